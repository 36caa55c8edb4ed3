"""Training with `model.fit` under a distribution strategy, §5: resumable and observable.

The run directory's files and the rules of a resume are `keras_transformer.run_directory`'s.
Rerunning the same command resumes from its `backup/`: weights, optimizer slots and the step
counter (hence the learning-rate schedule) are restored and the interrupted epoch restarts.

On JAX (`train --backend jax`) the same pipeline feeds `model.fit`, whose step JAX compiles
(hence fitted length buckets, as under `--jit-compile`), over `keras.distribution.DataParallel`
where there are several devices; the checkpoints and backups are the same files. TensorFlow's
searches cannot run a JAX model, so validation BLEU is left to `evaluate` on the checkpoints,
and accumulation and clusters (`TF_CONFIG`) stay TensorFlow's.

A fault ends a run with one line and loses nothing: a NaN or infinite loss or gradient norm stops
it before the weights it made are saved (`callbacks.DivergenceGuard`); a second trainer of the
same run directory is refused (`run_directory.trainer_lock`), and so is a resume on other data
or on data that leaves no pair to train on. With `--skip-bad-batches N`, up to N batches whose
gradient norm is not finite are skipped instead, logged and counted.

In a cluster (`TF_CONFIG`) the chief alone writes the run directory; a worker that dies ends the
others with one line (`distribution.WorkerLostError`), and rerunning the same command resumes
every worker from the chief's backup (`share_chief_state`).

Fine-tuning (`train --init-from RUN`): the run starts from RUN's weights (an imported pretrained
model's, or a trained run's) with a fresh optimizer at step 0, keeps RUN's architecture and
tokenizer files (`run_directory.check_init_from`, `run_directory.adopt_tokenizer`), and usually
trains at a constant learning rate (`--learning-rate-schedule constant`) far below Eq. 3's peak.
A resume of it starts from its own backup, as any resume.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer import keras_internals, run_directory
from keras_transformer.config import ConfigError, TransformerConfig
from keras_transformer.model import Transformer
from keras_transformer.objectives.losses import LabelSmoothedCrossEntropy
from keras_transformer.objectives.metrics import MaskedAccuracy, Perplexity, TargetTokens
from keras_transformer.training import callbacks as run_callbacks
from keras_transformer.training.data import training_data
from keras_transformer.training.distribution import (
    PEER_FAILURES,
    broadcast_from_chief,
    create_strategy,
    is_multi_worker,
    jax_data_parallel,
    rows_divisible_by,
    worker_lost,
    worker_name,
)
from keras_transformer.training.optimizer import create_optimizer, run_schedule
from keras_transformer.training.training_run import TrainingRun

logger = logging.getLogger(__name__)

# Under XLA every batch shape is one compilation, so the buckets are few and fitted to the
# training lengths, which keeps the padding small (docs/PERFORMANCE.md).
XLA_BUCKETS = 6


def compile_model(
    config: TransformerConfig,
    jit_compile: bool = False,
    accumulate: int = 1,
    skip_bad_batches: bool = False,
    schedule=None,
) -> Transformer:
    """The Transformer with the paper's objective and optimizer (§5.3, §5.4), in the current
    strategy's scope; each update accumulates `accumulate` micro-batches, weighted by their
    non-padding target tokens (the loss tells the optimizer each one's count). With
    `skip_bad_batches`, a batch whose gradient norm is NaN or infinite changes nothing
    (`_logs_with_gradient_norm`). `schedule`: the learning rate (default Eq. 3 of `config`)."""
    model = Transformer(config)
    optimizer = create_optimizer(config, accumulate, schedule)
    optimizer.skip_non_finite = skip_bad_batches
    model.compile(
        optimizer=optimizer,
        loss=LabelSmoothedCrossEntropy(
            config.label_smoothing,
            record_tokens=optimizer.record_tokens if accumulate > 1 else None,
        ),
        metrics=[MaskedAccuracy(), Perplexity(), TargetTokens()],
        jit_compile=jit_compile,
    )
    # Adam's moments made now, not in the first traced step: a step that creates variables is
    # traced a second time to run without creating them, seconds of tracing for nothing.
    model.optimizer.build(model.trainable_variables)
    if keras.backend.backend() == "tensorflow":  # JAX's step is stateless: no norm kept there
        model.train_step = _logs_with_gradient_norm(model.train_step, model)
    return model


def _logs_with_gradient_norm(step, model):
    """`step`, with the norm of the gradients it applied in its logs as `gradient_norm` (not
    under loss scaling, whose optimizer applies them only in a conditional branch of its own).

    Where the optimizer skips non-finite updates, a skipped batch also leaves the metrics as they
    were (its NaN loss would stay in the epoch's mean), and the logs say `skipped_batch` 1.
    """

    def train_step(data):
        skipping = getattr(model.optimizer, "skip_non_finite", False)
        watched = model.metrics_variables if skipping else []
        kept = [tf.identity(variable.value) for variable in watched]
        logs = step(data)
        take = getattr(model.optimizer, "take_gradient_norm", None)
        norm = take() if take else None
        if skipping:
            skipped = model.optimizer.take_skipped()
            for variable, value in zip(watched, kept, strict=True):
                variable.assign(tf.where(skipped, value, variable.value))
            logs = {**model.get_metrics_result(), "skipped_batch": tf.cast(skipped, "float32")}
        return logs if norm is None else {**logs, "gradient_norm": norm}

    return train_step


def fit_under_strategy(model, strategy, dataset, **fit_kwargs):
    """`model.fit` that also works under `MultiWorkerMirroredStrategy`.

    Keras 3 trips twice under MultiWorkerMirroredStrategy (keras-team/keras#20585,
    tensorflow/tensorflow#72388), so for that strategy only:
    - it builds metrics before the first step by reducing a distributed data batch, which fails;
      a model without a strategy of its own defers that build to the first traced step, and
      fitting inside the strategy's scope keeps the step itself distributed;
    - it averages each step's scalar logs over workers along axis 0, which scalars lack; the
      logs get a leading axis of one, so that average is the mean over workers.
    """
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        keras_internals.forget_distribute_strategy(model)
        model.train_step = _logs_with_worker_axis(model.train_step)
        model.test_step = _logs_with_worker_axis(model.test_step)  # validation, likewise
    with strategy.scope():
        return model.fit(dataset, **fit_kwargs)


def _logs_with_worker_axis(step):
    return lambda data: {name: tf.reshape(value, [1]) for name, value in step(data).items()}


def as_worker(run: TrainingRun, scratch: Path) -> TrainingRun:
    """The run as a non-chief worker of a cluster (`TF_CONFIG`) trains it: in `scratch`, a
    directory deleted when it ends, without BLEU.

    Only the chief writes the run directory: its backup is the one state of the run, so that a
    rerun after any worker's crash resumes every worker from one step (`share_chief_state`).
    The others still save their weights when the chief does, into `scratch`: under
    `MultiWorkerMirroredStrategy` reading the variables to save them is a collective, which
    every worker must join. They also keep there their copy of config.json, run.json and the
    vocabulary (SentencePiece learns the same pieces from the same files, which `train`
    checks, or `--subwords` gives each the same one). BLEU's decoding is no collective, so they
    need not run it.
    """
    return dataclasses.replace(run, output=scratch, bleu_every=0)


def check_workers_agree(
    strategy: tf.distribute.Strategy,
    value: int,
    what: str,
    remedy: str,
):
    """Raises a `ConfigError` on every worker unless all of them hold the same `value`, an int
    saying `what`; `remedy` tells the user how to make them agree. Below 2**24, the squares
    summed over up to 32 workers stay exact in float64.

    Each worker trains a vocabulary of its own (`as_worker`): workers with different
    vocabularies would average gradients of ids that mean different pieces, silently.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    values = strategy.run(lambda: tf.constant([value, value * value], tf.float64))
    mean, mean_square = strategy.reduce("MEAN", values, axis=None).numpy()
    if mean_square != mean * mean:  # the same on every worker, so all of them stop
        raise ConfigError(
            f"the workers disagree on {what}: {value} here, {mean:g} on average. {remedy}"
        )


def resumable_backup(run: TrainingRun) -> run_callbacks.ResumableBackup:
    # Kept after a finished run, so that rerunning the command resumes instead of starting over.
    # Keras counts micro-batches here, the optimizer updates. In a cluster the model holds what
    # the chief restored before fit (`restore_run`): loading it again would be a collective that
    # only the chief joins.
    save_freq = run.checkpoint_every * run.accumulate if run.checkpoint_every else "epoch"
    return run_callbacks.ResumableBackup(
        run.output / run_directory.BACKUP_DIR,
        run.output / run_directory.CHECKPOINTS_DIR,
        save_freq=save_freq,
        delete_checkpoint=False,
        restore=not is_multi_worker(),
    )


def restored_step(model, backup: run_callbacks.ResumableBackup) -> int:
    """Loads the run's backup into `model` now (fit will again) and returns its step."""
    backup.set_model(model)
    backup.on_train_begin()
    return int(model.optimizer.iterations.numpy())


def restore_run(run: TrainingRun, config, strategy, model) -> run_callbacks.StopOnPlateau | None:
    """Restores the run's backup into `model` (built in `strategy`'s scope, which this is called
    outside of), over the weights of `init_from` where the run has one; returns `--patience`'s
    callback, primed.

    In a cluster the chief alone holds the backup, and loading weights into a model of
    `MultiWorkerMirroredStrategy` is a collective that every worker would have to join. So each
    worker restores into a model of its own outside the strategy (the others have nothing to
    restore) and takes the chief's state from there (`share_chief_state`).
    """
    if not is_multi_worker():
        with strategy.scope():
            start_from_init(run, model)
            return plateau_stop(run, restored_step(model, resumable_backup(run)))
    with tf.device("CPU:0"):  # in host memory: the accelerators' is the training's
        local = compile_model(config, run.jit_compile, run.accumulate)
    start_from_init(run, local)
    backup = run_callbacks.ResumableBackup(
        run.output / run_directory.BACKUP_DIR, run.output / run_directory.CHECKPOINTS_DIR
    )
    plateau = plateau_stop(run, restored_step(local, backup))
    with strategy.scope():
        share_chief_state(strategy, local, model, plateau)
    return plateau


def start_from_init(run: TrainingRun, model):
    """Gives `model` the weights of `run.init_from`'s run, as `run_directory.run_weights` picks
    them, and not its optimizer's state: `model`'s stays fresh, at step 0. Called before the
    run's backup is restored, so that a resume's own weights win."""
    if not run.init_from:
        return
    weights = run_directory.run_weights(run.init_from)
    pretrained = Transformer(run_directory.read_config(run.init_from))
    # A weights file also holds its run's optimizer: loaded into `model`, its step would count on.
    run_directory.load_weights_checked(pretrained, weights)
    model.set_weights(pretrained.get_weights())
    logger.info("starting from %s", weights)


def share_chief_state(strategy, source, model, plateau: run_callbacks.StopOnPlateau | None):
    """Gives `model`, on every worker of a cluster, what the chief restored into `source`:
    weights, optimizer state (the step), the epoch to restart and `--patience`'s count."""
    variables = [*model.weights, *model.optimizer.variables]
    counts = [keras_internals.initial_epoch(source)]
    if plateau:
        counts += [plateau.best, plateau.stale_epochs]
    restored = [*source.weights, *source.optimizer.variables]
    values = broadcast_from_chief(strategy, [*(v.value for v in restored), *counts])
    for variable, value in zip(variables, values[: len(variables)], strict=True):
        variable.assign(value)
    epoch, *patience = (float(value) for value in values[len(variables) :])
    keras_internals.set_initial_epoch(model, epoch)  # as the chief's backup set it, for fit
    if plateau:
        plateau.best, plateau.stale_epochs = patience[0], int(patience[1])


def validation_scores(
    run: TrainingRun, tokenizer, files, metrics
) -> run_callbacks.ValidationScores:
    from keras_transformer.analysis.evaluation import task
    from pipelines.corpus import read_parallel_corpus

    corpus = read_parallel_corpus(*files["validation"])
    count = run.bleu_sentences
    scoring = task(run.task_dataset, run.target_language, run.lowercase)
    return run_callbacks.ValidationScores(
        tokenizer,
        corpus.source[:count],
        corpus.target[:count],
        scoring.score,
        run.bleu_every,
        run.output / run_directory.LOGS_DIR,
        metrics,
        kind=scoring.name,
        search=scoring.search.replace(beam_size=1),  # greedy
    )


def build_callbacks(
    run: TrainingRun,
    tokenizer,
    files,
    plateau: run_callbacks.StopOnPlateau | None,
    step: int = 0,
) -> list[keras.callbacks.Callback]:
    """The run's callbacks, resumed at `step`."""
    metrics = run_callbacks.MetricsJsonl(
        run.output / run_directory.METRICS_FILE, every_steps=run.log_every
    )
    skipped = sum(r["kind"] == "skipped_batch" for r in logged_records(run, step))
    # First: it ends training before any other callback saves a diverged update's weights.
    guard = run_callbacks.DivergenceGuard(run.skip_bad_batches, skipped, metrics)
    callbacks = [
        guard,
        # Next: it restores the step that the others read when they begin.
        resumable_backup(run),
        run_callbacks.TokenThroughput(),
        run_callbacks.TraceCounter(),
        run_callbacks.RollingCheckpoints(
            run.output / run_directory.CHECKPOINTS_DIR,
            every_steps=run.checkpoint_every,
            every_minutes=run.checkpoint_minutes,
            keep=run.keep_checkpoints,
        ),
        metrics,
        keras.callbacks.TensorBoard(run.output / run_directory.LOGS_DIR, update_freq=run.log_every),
    ]
    if run.bleu_every:
        callbacks.append(validation_scores(run, tokenizer, files, metrics))
    if logs_progress(run):
        callbacks.append(run_callbacks.ProgressLog(run.log_every, run.max_steps, run.max_minutes))
    if run.max_steps:
        callbacks.append(run_callbacks.StopAtStep(run.max_steps))
    if run.max_minutes:
        callbacks.append(run_callbacks.StopAfterMinutes(run.max_minutes))
    if plateau:
        callbacks.append(plateau)  # last: `callbacks.cut_short` holds for those before it
    return callbacks


def logs_progress(run: TrainingRun) -> bool:
    """Whether the run's progress goes to a log file or a pipe, not a terminal (at `verbose=1`).

    There Keras's bar prints only at an epoch's end, so the fit prints a line an epoch
    (`verbose=2`) and `ProgressLog` a line every `log_every` updates, with the time left.
    """
    return run.verbose == 1 and not sys.stdout.isatty()


def plateau_stop(run: TrainingRun, step: int) -> run_callbacks.StopOnPlateau | None:
    """`--patience`'s callback, primed with the validation losses logged up to `step`."""
    if not run.patience:
        return None
    history = [
        r["val_loss"] for r in logged_records(run, step) if r["kind"] == "epoch" and "val_loss" in r
    ]
    return run_callbacks.StopOnPlateau(run.patience, history)


def logged_records(run: TrainingRun, step: int) -> list[dict]:
    """The run's metrics.jsonl records up to `step` (none where it has none)."""
    metrics = run.output / run_directory.METRICS_FILE
    records = run_directory.read_metrics(metrics) if metrics.exists() else []
    return [r for r in records if r["step"] <= step]


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The CPU's feature flags (and the rest of `cpuinfo`'s words); None where it cannot be read
    (not Linux)."""
    try:
        return set(cpuinfo.read_text().split())
    except OSError:
        return None


def cpu_has_bfloat16_units(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU multiplies bfloat16 in hardware (AMX-BF16 or AVX512-BF16 in its flags)."""
    flags = cpu_flags(cpuinfo)
    return flags is None or bool(flags & {"amx_bf16", "avx512_bf16"})  # unknown: no warning


def bfloat16_cpu_warning(run: TrainingRun, on_gpu: bool, bfloat16_units: bool) -> str | None:
    """Why `--precision mixed_bfloat16` would train slower than float32 here, if it would.

    Without bfloat16 units TensorFlow emulates it, several times slower than float32; with them,
    oneDNN uses them but XLA's CPU backend does not (`benchmarks/throughput.py --precision
    mixed_bfloat16`; docs/DEFAULTS.md).
    """
    if run.precision != "mixed_bfloat16" or on_gpu:
        return None
    if not bfloat16_units:
        return (
            "precision mixed_bfloat16 on a CPU without bfloat16 units (no amx_bf16 or "
            "avx512_bf16 in /proc/cpuinfo): TensorFlow emulates bfloat16, which trains several "
            "times slower than float32; use precision float32"
        )
    if run.jit_compile:
        return (
            "precision mixed_bfloat16 with jit_compile on a CPU: XLA's CPU backend does not "
            "use the bfloat16 units, TensorFlow's oneDNN kernels do; drop jit_compile"
        )
    return None


def configure_numerics(run: TrainingRun):
    """Seeds, op determinism and the mixed-precision policy, before any model is built."""
    if run.seed is not None:
        keras.utils.set_random_seed(run.seed)
    if run.deterministic:
        tf.config.experimental.enable_op_determinism()
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    warning = bfloat16_cpu_warning(run, on_gpu, cpu_has_bfloat16_units())
    if warning:
        logger.warning(warning)
    keras.mixed_precision.set_global_policy(run.precision)


def steps_per_epoch(pass_batches: Fraction, replicas: int) -> int:
    """Steps that read every pair once: each step takes one batch per replica, and the input
    pipelines (one per worker) share the pairs equally, so each replica's share of the pass is
    `pass_batches / replicas` full batches, rounded up so that none is left unread (and fewer
    than one batch a replica read twice, the next pass's first)."""
    return max(1, math.ceil(pass_batches / replicas))


def train(config: TransformerConfig, run: TrainingRun) -> Path:
    """Trains (or resumes) a run; returns the path of the final weights."""
    if run.max_minutes and is_multi_worker():
        # Each worker would stop by its own clock, one step apart at worst, and the one still
        # going would wait in that step's all-reduce for the others for ever.
        raise ConfigError(
            "max_minutes under MultiWorkerMirroredStrategy (TF_CONFIG names several tasks) "
            "would stop each worker at its own step; bound the run with max_steps"
        )
    on_jax = keras.backend.backend() == "jax"
    run = for_jax(run) if on_jax else run
    if run.subwords:
        run_directory.check_subwords(run)
    if run.init_from:
        run_directory.check_init_from(run.init_from, config)
        if run.learning_rate_schedule == "paper":
            logger.warning(
                "init_from with the paper's learning rate: Eq. 3 peaks at %.2g, which moves "
                "pretrained weights far; learning_rate_schedule 'constant' fine-tunes them",
                float(run_schedule(config, run)(config.warmup_steps * run.accumulate - 1)),
            )
    try:
        return _train_as_this_worker(config, run, on_jax)
    except PEER_FAILURES as error:
        if not is_multi_worker():
            raise
        # A worker died (kill -9, a lost machine): TensorFlow's coordination service missed its
        # heartbeats and aborted the collectives that the others waited in.
        raise worker_lost(error) from error


def _train_as_this_worker(config: TransformerConfig, run: TrainingRun, on_jax: bool) -> Path:
    name = worker_name()
    if name is None:
        with run_directory.trainer_lock(run.output):
            return _train_locked(config, run, on_jax)
    with tempfile.TemporaryDirectory(prefix=f"keras-transformer-{name}-") as scratch:
        _train_locked(config, as_worker(run, Path(scratch)), on_jax)
    return run.output / run_directory.FINAL_WEIGHTS


def _train_locked(config: TransformerConfig, run: TrainingRun, on_jax: bool) -> Path:
    from pipelines.batching import batches_per_pass

    run_directory.prepare(run, config)
    configure_numerics(run)
    # On JAX, tf.data runs on TensorFlow's default strategy and the batch is split by Keras.
    strategy = tf.distribute.get_strategy() if on_jax else create_strategy(run.devices)
    jax_devices = jax_data_parallel(run.devices) if on_jax else 1
    replicas = strategy.num_replicas_in_sync
    if run.skip_bad_batches and replicas > 1:
        raise ConfigError(
            f"skip_bad_batches needs a single replica, not {replicas}: the skipped update is "
            "decided inside the step, where MirroredStrategy's update cannot be"
        )
    if run.accumulate > 1 and replicas > 1:
        raise ConfigError(
            f"accumulate {run.accumulate} needs a single replica, not {replicas}: Keras "
            "accumulates gradients only outside MirroredStrategy"
        )
    # The batch of config.batch_tokens is split over the replicas and the accumulated
    # micro-batches; one update sees all of it.
    micro_batches = replicas * run.accumulate
    if config.batch_tokens // micro_batches < config.max_length:
        # A bucket's batch is at least one pair, so a smaller share would exceed its budget.
        raise ConfigError(
            f"batch_tokens {config.batch_tokens} over {micro_batches} micro-batch(es) leaves "
            f"{config.batch_tokens // micro_batches} tokens a batch, less than one sentence of "
            f"max_length {config.max_length}: raise batch_tokens, or use fewer accumulate "
            "micro-batches or devices"
        )
    data = training_data(run, config, config.batch_tokens // micro_batches)
    run_directory.check_same_data_files(run, data.identity)
    if not data.length_counts.sum():  # else the repeated, filtered data would wait for ever
        raise ConfigError(
            f"no training pair to train on in {run.data_dir}: the training split is empty, or "
            f"every pair is longer than max_length={config.max_length} subwords (raise it with "
            "the config's max_length)"
        )
    tokenizer = data.tokenizer
    check_workers_agree(
        strategy,
        tokenizer.fingerprint(),
        f"the vocabulary {tokenizer.path} (a checksum of its pieces)",
        "Every worker learns it from its own copy of the training files, or takes subwords: "
        "give all of them the same files and settings (the chief's run keeps the one it learned)",
    )
    boundaries = length_buckets(config, run, data.length_counts)

    def dataset(split, context=None, repeat=False):
        batches = data.batches(split, context, repeat, boundaries, pad_batches=run.jit_compile)
        return batches.apply(rows_divisible_by(jax_devices)) if jax_devices > 1 else batches

    # An epoch of the full batches that carry one pass, counted up front from the pairs'
    # lengths: with per-replica datasets Keras must not probe for the end of the data (see
    # tests/test_distribution.py). The workers' input pipelines share the pairs equally, so the
    # same steps on each read every pair once (tests/training/test_multi_worker_shards.py).
    # Workers whose epochs differed would fall out of step in their collectives (one
    # validating while another trains): they stop instead.
    pass_batches = batches_per_pass(
        data.length_counts, config.batch_tokens // micro_batches, config.max_length, boundaries
    )
    epoch_steps = steps_per_epoch(pass_batches, replicas)
    check_workers_agree(
        strategy,
        epoch_steps,
        "the steps an epoch (counted on their training files)",
        "Give every worker the same training files and flags",
    )
    train_data = strategy.distribute_datasets_from_function(
        lambda context: dataset("train", context, repeat=True)
    )
    with strategy.scope():
        model = compile_model(
            config,
            run.jit_compile,
            run.accumulate,
            skip_bad_batches=bool(run.skip_bad_batches),
            schedule=run_schedule(config, run),
        )
    plateau = restore_run(run, config, strategy, model)
    step = int(model.optimizer.iterations.numpy())
    final = run.output / run_directory.FINAL_WEIGHTS
    if run.max_steps and step >= run.max_steps:
        logger.info("the run already reached step %d of --max-steps %d", step, run.max_steps)
        run_directory.save_weights_atomically(model, final)
        return final
    if plateau and plateau.plateaued:
        logger.info(
            "the run already stopped improving: validation loss %.4f, then %d epochs without a "
            "better one (--patience %d)",
            plateau.best,
            plateau.stale_epochs,
            run.patience,
        )
        run_directory.save_weights_atomically(model, final)
        return final
    logger.info(
        "training %s on %s, %d replica(s), %d micro-batch(es) an update, %d updates an epoch, "
        "run directory %s",
        config,
        keras.backend.backend(),
        replicas * jax_devices,
        run.accumulate,
        epoch_steps // run.accumulate,
        run.output,
    )
    fit_under_strategy(
        model,
        strategy,
        train_data,
        validation_data=with_known_length(dataset("validation")),
        epochs=run.epochs,
        steps_per_epoch=epoch_steps,
        # The pipeline shuffles the pairs before bucketing; Keras cannot shuffle a dataset, and
        # with its default shuffle=True it warns in every run that it ignores it.
        shuffle=False,
        callbacks=build_callbacks(run, tokenizer, data.text_files, plateau, step),
        verbose=2 if logs_progress(run) else run.verbose,
    )
    run_directory.save_weights_atomically(model, final)
    return final


def for_jax(run: TrainingRun) -> TrainingRun:
    """The run as JAX trains it: compiled (JAX compiles every step), without validation BLEU
    (TensorFlow's search); TensorFlow's accumulation and clusters are refused."""
    if run.accumulate > 1:
        raise ConfigError(
            f"accumulate {run.accumulate} on JAX: the loss hands each micro-batch's token count "
            "to the update within TensorFlow's training step only; use the tensorflow backend"
        )
    if is_multi_worker():
        raise ConfigError("TF_CONFIG describes a cluster, which only the tensorflow backend trains")
    if run.deterministic:
        # tf.config.experimental.enable_op_determinism covers TensorFlow's kernels only (here
        # the input pipeline); JAX's compiled step would run as before, unpinned.
        raise ConfigError(
            "deterministic=True on JAX: op determinism covers TensorFlow's kernels, not JAX's "
            "training step; set deterministic=False or train on TensorFlow"
        )
    if run.skip_bad_batches:
        raise ConfigError(
            "skip_bad_batches on JAX: its stateless step keeps no gradient norm to decide by; "
            "use the tensorflow backend"
        )
    if run.bleu_every:
        logger.warning(
            "on JAX, no validation BLEU while training (bleu_every): the search is "
            "TensorFlow's; score the checkpoints with `keras-transformer evaluate`"
        )
    return dataclasses.replace(run, jit_compile=True, bleu_every=None)


def length_buckets(config, run, length_counts) -> list[int] | None:
    """Under XLA, the length buckets fitted to the training pairs (`counts[length]`)."""
    from pipelines.batching import fitted_bucket_boundaries

    if not run.jit_compile:
        return None
    boundaries = fitted_bucket_boundaries(length_counts, XLA_BUCKETS, config.max_length)
    logger.info("XLA: %d length buckets %s, one compiled shape each", len(boundaries), boundaries)
    return boundaries


def count_batches(dataset: tf.data.Dataset) -> int:
    return int(dataset.reduce(0, lambda count, _: count + 1))


def with_known_length(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset` (one pass, in a fixed order) with its batch count stated. Keras then ends each
    validation pass at the last batch; not knowing it, Keras runs into the end of the data and
    logs "Your input ran out of data; interrupting training", a false alarm in every run."""
    return dataset.apply(tf.data.experimental.assert_cardinality(count_batches(dataset)))
