"""Callbacks that make `model.fit` runs observable and resumable (§5.2: checkpoints, averaging).

- `TokenThroughput` adds non-padding target tokens per second to the progress bar and logs.
- `MetricsJsonl` appends every logged value to `metrics.jsonl` with the step and wall time;
  `run_directory.read_metrics` reads it back, the resumed processes laid end to end.
- `RollingCheckpoints` writes `ckpt-<step>.weights.h5` every N steps or minutes, keeping the last
  K: the files that checkpoint averaging reads (§6.1 averages the last 5 or 20).
- `ValidationScores` greedy-decodes a fixed slice of the validation split every K steps and logs
  its scores (sacreBLEU and chrF, or parsing F1) to TensorBoard and `metrics.jsonl`.
- `ProgressLog` logs a line every N updates with the step, loss, rate and time left: the
  progress a log file or a pipe gets, where Keras's bar prints only at an epoch's end.
- `StopAtStep` / `StopAfterMinutes` end training at a step count or a wall-clock budget;
  `StopOnPlateau` once the validation loss has not improved for N epochs.
- `ResumableBackup` is Keras's `BackupAndRestore` (weights, optimizer slots and step counter,
  restarting the interrupted epoch) that never starts over silently from a corrupt backup: it
  resumes from the newest readable checkpoint instead, and says so, or stops.
- `DivergenceGuard` stops training at the first NaN or infinite loss or gradient norm, before
  anything saves the weights that update made; or, as fairseq does, counts and logs up to N
  batches whose update the optimizer skipped, and stops at the next.
"""

import json
import logging
import math
import time
from pathlib import Path

import keras

from durable_files import write_atomically, write_error
from keras_transformer import keras_internals
from keras_transformer.run_directory import (
    DIVERGENCE_REMEDY,
    CheckpointError,
    DivergenceError,
    checkpoint_path,
    checkpoint_step,
    list_checkpoints,
    load_weights_checked,
    save_weights_atomically,
)

logger = logging.getLogger(__name__)


def _step(model) -> int:
    return int(model.optimizer.iterations.numpy())


class EveryUpdate(keras.callbacks.Callback):
    """Calls `on_update(step, logs)` when a batch ends with a new optimizer step.

    Under gradient accumulation several batches end at one step, the first ones before any
    update at all; only the batch that made the update counts.
    """

    def on_train_begin(self, logs=None):
        self._step_seen = _step(self.model)

    def on_train_batch_end(self, batch, logs=None):
        step = _step(self.model)
        if step != self._step_seen:
            self._step_seen = step
            self.on_update(step, logs)

    def on_update(self, step, logs):
        raise NotImplementedError


class TokenThroughput(keras.callbacks.Callback):
    """Puts `target_tokens_per_s` (non-padding target tokens / s) into the batch logs.

    Reads the `target_tokens` metric, so it must be compiled into the model's metrics.
    """

    def on_epoch_begin(self, epoch, logs=None):
        self._start, self._rate = time.perf_counter(), None

    def on_train_batch_end(self, batch, logs=None):
        if logs is None or "target_tokens" not in logs:
            return
        elapsed = time.perf_counter() - self._start
        self._rate = float(logs["target_tokens"]) / max(elapsed, 1e-9)
        logs["target_tokens_per_s"] = self._rate

    def on_epoch_end(self, epoch, logs=None):
        # The epoch's training rate as of its last batch: validation has run since, and its
        # time is not training time.
        if logs is not None and self._rate is not None:
            logs["target_tokens_per_s"] = self._rate


class TraceCounter(keras.callbacks.Callback):
    """Puts `train_traces`, how often the training step has been traced, into the epoch logs.

    A trace builds the step's graph (under XLA a compilation follows). With fixed bucket
    shapes the count stops growing after the first epoch; growth later means retracing,
    which costs seconds a batch, and is logged as a warning.
    """

    def __init__(self):
        super().__init__()
        self.traces = 0
        self._count_after_epoch = None

    def on_train_begin(self, logs=None):
        self._train_step = train_step = self.model.train_step

        def counted_train_step(*args):  # (data), or (state, data) on JAX
            self.traces += 1  # Python code in a traced function runs once per trace
            return train_step(*args)

        self.model.train_step = counted_train_step
        # fit made its train function from the unwrapped step already; nothing is traced yet.
        self.model.make_train_function(force=True)

    def on_epoch_end(self, epoch, logs=None):
        if self._count_after_epoch is not None and self.traces > self._count_after_epoch:
            logger.warning(
                "the training step was retraced in epoch %d (%d traces in all)", epoch, self.traces
            )
        self._count_after_epoch = self.traces
        if logs is not None:
            logs["train_traces"] = self.traces

    def on_train_end(self, logs=None):
        self.model.train_step = self._train_step


class MetricsJsonl(EveryUpdate):
    """Appends `{"step", "epoch", "time", "kind", ...metrics}` lines to a file.

    Each process begins with a `start` record of the step it trains from, so that a reader can
    drop what an earlier process logged past that step: work a resume from the backup undid.
    """

    def __init__(self, path, every_steps=50):
        super().__init__()
        self.path = Path(path)
        self.every_steps = every_steps
        self._epoch = 0
        self._start = time.time()

    def write(self, kind, logs):
        record = {
            "kind": kind,
            "step": _step(self.model),
            "epoch": self._epoch,
            "time": round(time.time() - self._start, 3),
            **{k: float(v) for k, v in (logs or {}).items()},
        }
        try:
            with self.path.open("a") as file:
                file.write(json.dumps(record) + "\n")
        except OSError as error:  # an unfinished line is left out by readers and dropped later
            raise write_error(self.path, error) from error

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        _drop_unterminated_record(self.path)
        self.write("start", {})

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_update(self, step, logs):
        if step % self.every_steps == 0:
            self.write("train", logs)

    def on_epoch_end(self, epoch, logs=None):
        # A rerun trains a cut-short epoch again: its record is no epoch's for --patience.
        self.write("partial_epoch" if cut_short(self.model) else "epoch", logs)


def _drop_unterminated_record(path):
    """Cuts a last line without its newline: a record that a killed process did not finish, which
    the next record would otherwise be appended to."""
    if not path.exists():
        return
    text = path.read_bytes()
    if text and not text.endswith(b"\n"):
        kept = text[: text.rfind(b"\n") + 1]
        logger.warning(
            "%s: dropped an unfinished last record (%d bytes)", path, len(text) - len(kept)
        )
        write_atomically(path, lambda partial: partial.write_bytes(kept))


class RollingCheckpoints(EveryUpdate):
    """Saves weights every `every_steps` steps and/or `every_minutes`, keeping the last `keep`.

    A run resumed from a backup older than its newest checkpoints trains those steps again: the
    checkpoints past the step it resumed at move to `undone-from-<step>/` when it begins, so that
    averaging never mixes weights of the undone steps with the new ones
    (`run_directory.read_metrics` drops their records), and nothing trained is deleted (without
    its backup a run starts at step 0).
    """

    def __init__(self, directory, every_steps=None, every_minutes=None, keep=5):
        super().__init__()
        self.directory = Path(directory)
        self.every_steps = every_steps
        self.every_minutes = every_minutes
        self.keep = keep
        self._last_save = time.monotonic()

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        undone = [
            p for p in list_checkpoints(self.directory) if checkpoint_step(p) > self._step_seen
        ]
        if not undone:
            return
        aside = self.directory / f"undone-from-{self._step_seen:08d}"
        aside.mkdir(exist_ok=True)
        for path in undone:
            path.rename(aside / path.name)
        logger.warning(
            "resumed at step %d: %d later checkpoint(s), of steps trained again now, moved to %s",
            self._step_seen,
            len(undone),
            aside,
        )

    def on_update(self, step, logs):
        due_by_steps = self.every_steps and step % self.every_steps == 0
        due_by_time = (
            self.every_minutes and time.monotonic() - self._last_save >= 60 * self.every_minutes
        )
        if due_by_steps or due_by_time:
            self.save(step)

    def on_train_end(self, logs=None):
        self.save(_step(self.model))

    def save(self, step):
        self.directory.mkdir(parents=True, exist_ok=True)
        path = checkpoint_path(self.directory, step)
        if not path.exists():
            save_weights_atomically(self.model, path)
        self._last_save = time.monotonic()
        for old in list_checkpoints(self.directory)[: -self.keep]:
            old.unlink()


class ValidationScores(EveryUpdate):
    """Scores of greedy outputs for fixed validation sentences, every `every_steps` steps.

    Args:
        tokenizer: the run's `SubwordTokenizer`.
        sources, references: the validation slice (lists of str).
        score: `(sources, hypotheses, references) -> dict`; its float values are logged with a
            "val_" prefix (an `evaluation.Task`'s: sacreBLEU, chrF, ...; or parsing F1, ...).
        every_steps: evaluation period in optimizer steps (and once at the end of training).
        log_dir: TensorBoard directory; scalars go to its `<kind>/` run.
        metrics: the run's `MetricsJsonl`, which gets `kind: <kind>` lines.
        kind: names the records, "bleu" or "parsing".
        search: the `SearchSettings` of the outputs' search, of beam size 1 (greedy: cheap
            enough to run while training).
    """

    def __init__(
        self,
        tokenizer,
        sources,
        references,
        score,
        every_steps,
        log_dir,
        metrics,
        kind,
        search,
    ):
        super().__init__()
        self.tokenizer = tokenizer
        self.sources, self.references = sources, references
        self.score = score
        self.every_steps = every_steps
        self.log_dir = Path(log_dir)
        self.metrics = metrics
        self.kind = kind
        self.search = search
        self._translator = None
        self._last_step = None

    def on_update(self, step, logs):
        if step % self.every_steps == 0:
            self.evaluate()

    def on_train_end(self, logs=None):
        self.evaluate()

    def evaluate(self):
        import tensorflow as tf

        from keras_transformer.decoding.translator import Translator

        step = _step(self.model)
        if step == self._last_step:
            return
        self._last_step = step
        if self._translator is None:  # one translator, so its traced search is reused
            self._translator = Translator(self.model, self.tokenizer)
        start = time.perf_counter()
        hypotheses = self._translator.translate(self.sources, self.search, progress=False)
        scores = self.score(self.sources, hypotheses, self.references)
        scores = {f"val_{k}": v for k, v in scores.items() if isinstance(v, float)}
        scores[f"val_{self.kind}_seconds"] = time.perf_counter() - start
        self.metrics.write(self.kind, scores)
        with tf.summary.create_file_writer(str(self.log_dir / self.kind)).as_default(step=step):
            for name, value in scores.items():
                tf.summary.scalar(name, value)
        logger.info(
            "step %d: greedy validation on %d sentences: %s",
            step,
            len(self.sources),
            ", ".join(f"{k} {v:.2f}" for k, v in scores.items()),
        )


def cut_short(model) -> bool:
    """In `on_epoch_end`: whether a batch stopped training before the epoch's end (--max-steps,
    --max-minutes), Keras ending the epoch anyway.

    `StopOnPlateau`, the only callback that stops at an epoch's end, runs after every callback
    that asks (`training.build_callbacks` puts it last). An epoch stopped on its last batch is
    complete: it counts for --patience and a rerun goes on with the next one.
    """
    return bool(model.stop_training) and getattr(model, "stopped_mid_epoch", True)


def stop_after(callback: keras.callbacks.Callback, batch: int | None) -> None:
    """Stops `callback.model`'s fit after `batch` of the epoch, noting for `cut_short` whether
    batches of the epoch are left (`None`: before any batch)."""
    steps = (callback.params or {}).get("steps")
    callback.model.stopped_mid_epoch = batch is None or steps is None or batch + 1 < steps
    callback.model.stop_training = True


class ProgressLog(EveryUpdate):
    """Logs `step 300/900 (33%), loss 3.214, 2.10 updates/s, 4,200 tokens/s, ETA 4m45s` every
    `every_steps` updates.

    The rate is that since the previous line, so a first step's compilation does not slow the
    estimate for good. The time left is to `max_steps`, or to the end of `max_minutes` of this
    process where that comes first; with neither, the line has no total and no ETA.
    """

    def __init__(self, every_steps, max_steps=None, max_minutes=None, clock=time.monotonic):
        super().__init__()
        self.every_steps = every_steps
        self.max_steps = max_steps
        self.max_seconds = None if max_minutes is None else 60 * max_minutes
        self.clock = clock

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self._start = self._last_time = self.clock()
        self._last_step = self._step_seen

    def on_update(self, step, logs):
        if step % self.every_steps:
            return
        now = self.clock()
        rate = (step - self._last_step) / max(now - self._last_time, 1e-9)
        self._last_step, self._last_time = step, now
        logger.info("%s", self.line(step, logs or {}, rate, now))

    def line(self, step, logs, rate, now) -> str:
        parts = [f"step {step}"]
        if self.max_steps:
            parts[0] += f"/{self.max_steps} ({100 * step / self.max_steps:.0f}%)"
        if "loss" in logs:
            parts.append(f"loss {float(logs['loss']):.3f}")
        parts.append(f"{rate:.2f} updates/s")
        if "target_tokens_per_s" in logs:
            parts.append(f"{float(logs['target_tokens_per_s']):,.0f} tokens/s")
        left = self.seconds_left(step, rate, now)
        if left is not None:
            parts.append(f"ETA {duration(left)}")
        return ", ".join(parts)

    def seconds_left(self, step, rate, now) -> float | None:
        candidates = []
        if self.max_steps:
            candidates.append(max(self.max_steps - step, 0) / max(rate, 1e-9))
        if self.max_seconds is not None:
            candidates.append(max(self.max_seconds - (now - self._start), 0.0))
        return min(candidates) if candidates else None


def duration(seconds: float) -> str:
    """`3725` → `1h02m05s`; `285` → `4m45s`; `9.4` → `9s`."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class StopAtStep(keras.callbacks.Callback):
    """Stops training once the optimizer has taken `max_steps` steps (resumed runs included)."""

    def __init__(self, max_steps):
        super().__init__()
        self.max_steps = max_steps

    def on_train_begin(self, logs=None):
        self.on_train_batch_end(None)

    def on_train_batch_end(self, batch, logs=None):
        if _step(self.model) >= self.max_steps:
            stop_after(self, batch)


class StopAfterMinutes(keras.callbacks.Callback):
    """Stops training after a wall-clock budget of this process."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = 60 * minutes

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if time.monotonic() - self._start >= self.seconds:
            stop_after(self, batch)


class StopOnPlateau(keras.callbacks.Callback):
    """Stops once the validation loss has not improved for `patience` epochs.

    fairseq's `--patience`, which the published Multi30k Transformer-Tiny recipe sets to 10.
    `history` is the validation losses of the epochs trained before a resume, so that the count
    goes on across processes.
    """

    def __init__(self, patience, history=()):
        super().__init__()
        self.patience = patience
        self.best, self.stale_epochs = math.inf, 0
        for loss in history:
            self.observe(loss)

    def observe(self, val_loss):
        if val_loss < self.best:
            self.best, self.stale_epochs = val_loss, 0
        else:
            self.stale_epochs += 1

    @property
    def plateaued(self) -> bool:
        return self.stale_epochs >= self.patience

    def on_epoch_end(self, epoch, logs=None):
        if cut_short(self.model) or not logs or "val_loss" not in logs:
            return
        self.observe(float(logs["val_loss"]))
        if self.plateaued:
            logger.info(
                "stopping: the validation loss has not improved on %.4f for %d epochs",
                self.best,
                self.stale_epochs,
            )
            self.model.stop_training = True


class DivergenceGuard(keras.callbacks.Callback):
    """Raises `DivergenceError` at the first update whose loss or gradient norm is NaN or
    infinite, naming the step and the quantity.

    First in the callback list, it ends `fit` before any other callback sees that update: no
    backup, checkpoint or final weights are written from the weights it made, so the last good
    ones stay (`run_directory.save_weights_atomically` refuses non-finite weights too).

    With `skip_budget` N (`train --skip-bad-batches N`), a batch whose update the optimizer
    skipped for its non-finite gradient norm (`skipped_batch` in the logs) is logged and
    written to `metrics` (a `skipped_batch` record with the run's count), up to N in the run,
    `skipped` of them before this process; the next one stops training as above.
    """

    QUANTITIES = {"loss": "loss", "gradient_norm": "gradient norm"}

    def __init__(self, skip_budget=0, skipped=0, metrics=None):
        super().__init__()
        self.skip_budget = skip_budget
        self.skipped = skipped
        self.metrics = metrics

    def on_train_batch_end(self, batch, logs=None):
        if (logs or {}).get("skipped_batch"):
            self._count_skipped(float(logs.get("gradient_norm", math.nan)))
            return
        for key, name in self.QUANTITIES.items():
            value = (logs or {}).get(key)
            if value is not None and not math.isfinite(float(value)):
                raise DivergenceError(
                    f"training diverged at step {_step(self.model)}: the {name} is "
                    f"{float(value)}; {DIVERGENCE_REMEDY}"
                )

    def _count_skipped(self, norm):
        self.skipped += 1
        step = _step(self.model) + 1  # the step the skipped update would have made
        if self.skipped > self.skip_budget:
            raise DivergenceError(
                f"training diverged at step {step}: the gradient norm is {norm} in bad batch "
                f"{self.skipped}, past skip_bad_batches {self.skip_budget}; {DIVERGENCE_REMEDY}"
            )
        logger.warning(
            "step %d: skipped a batch whose gradient norm is %s (%d of --skip-bad-batches %d)",
            step,
            norm,
            self.skipped,
            self.skip_budget,
        )
        if self.metrics:
            self.metrics.write("skipped_batch", {"skipped_batches": self.skipped})


# What reading an unreadable backup raises: h5py's OSError for a truncated or foreign file,
# KeyError for a group or key the file lacks, and a JSON or text decoding error for its training
# position. Any other error (a model not built, a wrong argument) is the caller's, not the
# file's: it propagates, and the backup stays where it is.
UNREADABLE_FILE = (OSError, KeyError, json.JSONDecodeError, UnicodeDecodeError)


class ResumableBackup(keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` that never starts over silently from an unreadable backup.

    Restores weights, optimizer slots and the step counter (so the learning-rate schedule goes on
    where it stopped) and restarts the interrupted epoch: the data position is kept by epoch.
    Backs up every `save_freq` batches and when training stops.

    An unreadable backup is moved aside and the newest readable checkpoint of
    `checkpoints_dir` (weights, optimizer slots and step counter too) restored instead, with a
    warning; without one, it is an error naming the file.

    With `restore=False` it only backs up, the model holding the restored state already (its
    initial epoch the one to restart, `keras_internals.initial_epoch`).
    """

    def __init__(self, backup_dir, checkpoints_dir=None, restore=True, **kwargs):
        super().__init__(backup_dir, **kwargs)
        self.checkpoints_dir = checkpoints_dir
        self.restore = restore

    @property
    def weights_path(self) -> str:
        return keras_internals.backup_files(self)[0]

    @property
    def has_backup(self) -> bool:
        return Path(self.weights_path).exists()

    def on_train_begin(self, logs=None):
        if self.restore:
            self._restore(logs)
        # Keras counts the epoch for its backups from 0 in each process, so a backup taken before
        # the end of the restarted epoch would say epoch 0.
        keras_internals.set_backup_epoch(self, self.resumed_epoch)

    def _restore(self, logs):
        try:
            super().on_train_begin(logs)
        except UNREADABLE_FILE as error:  # never restart silently from an unreadable backup
            self._resume_from_checkpoint(error)
        if self.has_backup:
            logger.info(
                "resumed from %s at step %d, restarting epoch %d",
                self.weights_path,
                _step(self.model),
                self.resumed_epoch,
            )

    def on_epoch_end(self, epoch, logs=None):
        # A cut-short epoch stays the one to restart: the backup at the end of training says so,
        # and none says otherwise before it.
        if not cut_short(self.model):
            super().on_epoch_end(epoch, logs)

    def on_train_end(self, logs=None):
        # A run that stops (--max-steps, --max-minutes, --patience) backs up where it stopped, so
        # that a rerun goes on from there, not from the last periodic backup up to
        # --checkpoint-every updates earlier, which it would train again.
        self._save_model()
        super().on_train_end(logs)

    def _save_model(self):  # keras_internals.BACKUP_HOOKS
        # Keras writes both files in place; a kill during the write made the backup unreadable.
        # The weights go first: a kill between the two renames then repeats an epoch's data
        # rather than skipping it.
        Path(self.backup_dir).mkdir(parents=True, exist_ok=True)
        weights, metadata = keras_internals.backup_files(self)
        save_weights_atomically(self.model, weights)
        position = json.dumps(keras_internals.backup_position(self))
        write_atomically(metadata, lambda partial: partial.write_text(position))

    def _resume_from_checkpoint(self, error):
        checkpoints = list_checkpoints(self.checkpoints_dir) if self.checkpoints_dir else []
        for path in reversed(checkpoints):
            try:
                load_weights_checked(self.model, path)
            except CheckpointError as unreadable:
                logger.warning("%s", unreadable)
                continue
            aside = Path(self.backup_dir).with_name(
                f"{Path(self.backup_dir).name}-unreadable-{time.strftime('%Y%m%dT%H%M%S')}"
            )
            Path(self.backup_dir).rename(aside)
            logger.warning(
                "the backup %s is unreadable (%s): resumed from %s at step %d instead; the "
                "unreadable backup was moved to %s",
                self.weights_path,
                str(error).splitlines()[0],
                path,
                _step(self.model),
                aside,
            )
            return
        raise CheckpointError(
            f"cannot resume from the backup in {self.backup_dir} ({self.weights_path}), and "
            f"no readable checkpoint in {self.checkpoints_dir} replaces it: {error}. Delete "
            "that directory to start over."
        ) from error

    @property
    def resumed_epoch(self) -> int:
        return keras_internals.initial_epoch(self.model)
