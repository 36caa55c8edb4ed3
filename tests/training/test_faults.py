"""Faults a long run meets end with one clear error or a logged recovery, and every weights file
left behind is readable and finite: a NaN update, a failed write, an unreadable backup."""

import errno
import gzip
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from durable_files import WriteError
from keras_transformer import Transformer, TransformerConfig, cli
from keras_transformer.run_directory import (
    CheckpointError,
    DivergenceError,
    checkpoint_step,
    list_checkpoints,
    read_metrics,
    read_settings,
    save_weights_atomically,
)
from keras_transformer.training.callbacks import (
    DivergenceGuard,
    MetricsJsonl,
    ResumableBackup,
    RollingCheckpoints,
)
from keras_transformer.training.trainer import compile_model
from repo_paths import REPO_ROOT

CONFIG = TransformerConfig.preset(
    "tiny", num_layers=1, warmup_steps=10, residual_dropout=0.0, attention_dropout=0.0
)


def toy_data(pairs=8, length=5):
    rng = np.random.default_rng(0)
    ids = rng.integers(4, CONFIG.vocab_size, size=(pairs, length)).astype("int32")
    target_in = np.concatenate([np.ones((pairs, 1), "int32"), ids[:, :-1]], axis=1)
    return (ids, target_in), ids


def weights_of(path, config=CONFIG) -> list[np.ndarray]:
    """The weights in `path` (model and optimizer), read into a fresh model: the file must be
    readable."""
    model = compile_model(config)
    model.load_weights(path)
    return state_of(model)


def state_of(model) -> list[np.ndarray]:
    return [*model.get_weights(), *(v.numpy() for v in model.optimizer.variables)]


def assert_readable_and_finite(paths, config=CONFIG):
    assert paths
    for path in paths:
        assert all(np.isfinite(w).all() for w in weights_of(path, config)), path


def run_callbacks(directory):
    return [
        DivergenceGuard(),
        ResumableBackup(
            directory / "backup", directory / "checkpoints", save_freq=1, delete_checkpoint=False
        ),
        RollingCheckpoints(directory / "checkpoints", every_steps=1, keep=10),
    ]


def test_the_logged_gradient_norm_is_the_norm_of_the_batch_gradient():
    (source, target_in), target = toy_data(pairs=4)
    model = compile_model(CONFIG)
    model((source, target_in))  # built before the independent gradient is taken
    with tf.GradientTape() as tape:
        loss = model.loss(target, model((source, target_in), training=True))
    expected = tf.linalg.global_norm(tape.gradient(loss, model.trainable_variables))

    logs = model.train_on_batch((source, target_in), target, return_dict=True)

    assert float(expected) > 0
    np.testing.assert_allclose(logs["gradient_norm"], float(expected), rtol=1e-5)


class PoisonWeightsBefore(keras.callbacks.Callback):
    """Makes a weight NaN before batch `batch`: that step's loss is NaN."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.batch:
            variable = self.model.trainable_variables[0]
            variable.assign(np.full(variable.shape, np.nan, "float32"))


def test_a_nan_loss_stops_training_at_its_step_and_saves_nothing_non_finite(tmp_path):
    x, y = toy_data()
    model = compile_model(CONFIG)

    with pytest.raises(DivergenceError) as diverged:
        callbacks = [*run_callbacks(tmp_path), PoisonWeightsBefore(4)]
        model.fit(x, y, batch_size=1, shuffle=False, verbose=0, callbacks=callbacks)

    message = str(diverged.value)
    assert message.startswith("training diverged at step 5: the loss is nan;")
    assert "rerun to resume" in message and "learning_rate_scale" in message
    assert [checkpoint_step(p) for p in list_checkpoints(tmp_path / "checkpoints")] == [1, 2, 3, 4]
    saved = [*tmp_path.rglob("*.h5")]
    assert_readable_and_finite(saved)
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith("partial-")]

    # The rerun resumes from the last good state, step 4, and trains on.
    resumed = compile_model(CONFIG)
    resumed.fit(x, y, batch_size=1, shuffle=False, verbose=0, callbacks=run_callbacks(tmp_path))
    assert int(resumed.optimizer.iterations.numpy()) == 4 + len(y)
    assert_readable_and_finite([*tmp_path.rglob("*.h5")])


def test_an_infinite_gradient_norm_is_named():
    guard = DivergenceGuard()
    guard.set_model(compile_model(CONFIG))
    with pytest.raises(DivergenceError, match=r"at step 0: the gradient norm is inf;"):
        guard.on_train_batch_end(0, {"loss": 2.5, "gradient_norm": float("inf")})


def skipping_fit(x, y, sample_weight, directory, skip_budget):
    """`fit` one pair a batch with bad batches skipped, from the same initial weights each time;
    returns the model."""
    directory.mkdir(exist_ok=True)
    keras.utils.set_random_seed(3)
    model = compile_model(CONFIG, skip_bad_batches=True)
    metrics = MetricsJsonl(directory / "metrics.jsonl", every_steps=1)
    callbacks = [DivergenceGuard(skip_budget, metrics=metrics), metrics]
    fit = dict(batch_size=1, shuffle=False, verbose=0, callbacks=callbacks)
    model.fit(x, y, sample_weight=sample_weight, **fit)
    return model


def test_a_skipped_bad_batch_changes_nothing_and_is_counted(tmp_path, caplog):
    """With --skip-bad-batches, a batch whose loss is NaN (a NaN sample weight) leaves the model
    and optimizer as training without that batch does, and is logged and counted; one bad batch
    more than allowed stops training as a divergence."""
    (source, target_in), target = toy_data()
    weights = np.ones(len(target), "float32")
    weights[3] = np.nan
    keep = np.arange(len(target)) != 3

    with caplog.at_level(logging.WARNING):
        skipped = skipping_fit((source, target_in), target, weights, tmp_path, skip_budget=1)
    clean = skipping_fit(
        (source[keep], target_in[keep]), target[keep], weights[keep], tmp_path / "clean", 1
    )

    assert int(skipped.optimizer.iterations.numpy()) == len(target) - 1
    for bad, good in zip(state_of(skipped), state_of(clean), strict=True):
        np.testing.assert_array_equal(bad, good)
    assert "step 4: skipped a batch whose gradient norm is nan (1 of --skip-bad-batches 1)" in (
        caplog.text
    )
    records = read_metrics(tmp_path / "metrics.jsonl")
    counts = [(r["step"], r["skipped_batches"]) for r in records if "skipped_batches" in r]
    assert counts == [(3, 1)]
    assert all(np.isfinite(r["loss"]) for r in records if "loss" in r)

    weights[5] = np.inf
    bad_norm = r"at step 5: the gradient norm is (nan|inf) in bad batch 2, past skip_bad_batches"
    with pytest.raises(DivergenceError, match=bad_norm):
        skipping_fit((source, target_in), target, weights, tmp_path / "twice", skip_budget=1)


def test_non_finite_weights_are_never_written_over_good_ones(tmp_path):
    model = compile_model(CONFIG)
    model.fit(*toy_data(), batch_size=4, verbose=0)
    path = tmp_path / "model.weights.h5"
    save_weights_atomically(model, path)
    good = path.read_bytes()
    variable = model.trainable_variables[0]
    variable.assign(np.full(variable.shape, np.nan, "float32"))

    with pytest.raises(DivergenceError, match=rf"not writing {path}: .* NaN or infinite"):
        save_weights_atomically(model, path)
    assert path.read_bytes() == good


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EFBIG, errno.EIO])
def test_a_weights_write_that_fails_is_a_clear_error_and_keeps_the_old_file(
    tmp_path, monkeypatch, number
):
    model = compile_model(CONFIG)
    path = tmp_path / "ckpt-00000001.weights.h5"
    save_weights_atomically(model, path)
    good = path.read_bytes()
    model.fit(*toy_data(), batch_size=4, verbose=0)
    real_fsync = os.fsync

    def disk_fails(descriptor):
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(os, "fsync", disk_fails)  # the data reaches no disk
    with pytest.raises(WriteError, match=rf"cannot write {path}: {os.strerror(number)}"):
        save_weights_atomically(model, path)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_an_unreadable_backup_falls_back_to_the_newest_readable_checkpoint(tmp_path, caplog):
    x, y = toy_data()
    model = compile_model(CONFIG)
    model.fit(x, y, batch_size=2, verbose=0, callbacks=run_callbacks(tmp_path)[1:])
    checkpoints = list_checkpoints(tmp_path / "checkpoints")
    assert [checkpoint_step(p) for p in checkpoints] == [1, 2, 3, 4]
    checkpoints[-1].write_bytes(b"\x89HDF\r\n\x1a\n truncated")  # the newest is unreadable too
    backup = tmp_path / "backup"
    for path in backup.glob("*.h5"):
        path.write_bytes(b"\x00garbage")

    resumed = compile_model(CONFIG)
    callback = ResumableBackup(backup, tmp_path / "checkpoints")
    callback.set_model(resumed)
    with caplog.at_level(logging.WARNING):
        callback.on_train_begin()

    assert int(resumed.optimizer.iterations.numpy()) == 3
    for got, want in zip(state_of(resumed), weights_of(checkpoints[-2]), strict=True):
        np.testing.assert_array_equal(got, want)
    assert f"resumed from {checkpoints[-2]} at step 3 instead" in caplog.text
    [aside] = tmp_path.glob("backup-unreadable-*")
    assert "garbage" in next(aside.glob("*.h5")).read_text(errors="replace")
    assert not backup.exists()


def test_an_unreadable_backup_without_a_readable_checkpoint_is_an_error(tmp_path):
    model = compile_model(CONFIG)
    model.fit(*toy_data(), batch_size=4, verbose=0, callbacks=run_callbacks(tmp_path)[1:2])
    for path in (tmp_path / "backup").glob("*.h5"):
        path.write_bytes(b"\x00garbage")
    callback = ResumableBackup(tmp_path / "backup", tmp_path / "checkpoints")
    callback.set_model(compile_model(CONFIG))
    with pytest.raises(CheckpointError, match="cannot resume from the backup") as failed:
        callback.on_train_begin()
    assert "no readable checkpoint" in str(failed.value)
    assert Path(tmp_path / "backup").is_dir()  # left where it was, for a person to look at


def test_an_error_that_is_not_the_backup_files_propagates_and_keeps_the_backup(tmp_path):
    model = compile_model(CONFIG)
    model.fit(*toy_data(), batch_size=4, verbose=0, callbacks=run_callbacks(tmp_path)[1:])
    backup = sorted(p.name for p in (tmp_path / "backup").iterdir())
    callback = ResumableBackup(tmp_path / "backup", tmp_path / "checkpoints")
    # A configuration error: a model of another shape than the backup's.
    callback.set_model(compile_model(CONFIG.replace(num_layers=2)))
    with pytest.raises(ValueError):
        callback.on_train_begin()
    # An API error: a model without an optimizer to restore.
    callback.set_model(Transformer(CONFIG))
    with pytest.raises(AttributeError):
        callback.on_train_begin()
    assert sorted(p.name for p in (tmp_path / "backup").iterdir()) == backup
    assert not list(tmp_path.glob("backup-unreadable-*"))


# -- the command line: one line, and a run that goes on ---------------------------------------

# One layer a stack, as tests/training/test_training_cli.py: each process traces its steps.
TINY = ["--preset", "tiny", "--set", "vocab_size=600", "--set", "num_layers=1"]
TINY += ["--batch-tokens", "512", "--bleu-every", "0"]


def train_arguments(data_dir, output, *extra):
    return ["train", *TINY, "--data-dir", str(data_dir), "--output", str(output), *extra]


def train(data_dir, output, *extra, limit_file_size=None):
    """`keras-transformer train` in a process of its own; with `limit_file_size`, no file it
    writes may grow past that many bytes (RLIMIT_FSIZE)."""

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_size, limit_file_size))

    return subprocess.run(
        [sys.executable, "-m", "keras_transformer", *train_arguments(data_dir, output, *extra)],
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=limited if limit_file_size else None,
    )


def refusal(data_dir, output, *extra) -> str:
    """The one-line error of a train command refused before it trains, run in this process."""
    with pytest.raises(SystemExit) as refused:
        cli.main(train_arguments(data_dir, output, *extra))
    message = str(refused.value)
    assert "\n" not in message
    return message


def assert_one_line_error(result, starting):
    assert result.returncode == 2, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"keras-transformer train: error: {starting}"), result.stderr[-3000:]
    for crash in ("Traceback", "Exception ignored", "Segmentation fault"):
        assert crash not in result.stderr, result.stderr[-3000:]


def assert_run_readable(output):
    """Every file the run left: JSON that parses, weights that load and are finite, no
    partial file."""
    for name in ("config.json", "run.json"):
        json.loads((output / name).read_text())
    read_metrics(output)
    assert_readable_and_finite(
        [p for p in output.rglob("*.h5")], TransformerConfig.from_file(output / "config.json")
    )
    assert not [p for p in output.rglob("partial-*")]


@pytest.fixture(scope="module")
def trained_4_steps(multi30k_slice, tmp_path_factory):
    """A run trained for 4 steps, with checkpoints at 2 and 4; tests that fault it take a copy
    (`copy_of`), so one process trains it for all of them."""
    output = tmp_path_factory.mktemp("trained") / "run"
    first = train(multi30k_slice, output, "--max-steps", "4", "--checkpoint-every", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    return output


def copy_of(run, tmp_path):
    return shutil.copytree(run, tmp_path / "run")


@pytest.mark.long(
    covered_by=[
        "tests/training/test_faults.py::test_a_nan_loss_stops_training_at_its_step_and_saves_nothing_non_finite",
        "tests/training/test_faults.py::test_an_infinite_gradient_norm_is_named",
    ]
)
@pytest.mark.slow
def test_a_run_that_diverges_stops_in_one_line_and_resumes_with_a_lower_rate(
    multi30k_slice, trained_4_steps, tmp_path
):
    output = copy_of(trained_4_steps, tmp_path)

    # Eq. 3 times 10^30: the weights overflow within a few updates.
    exploding = ("--set", "learning_rate_scale=1e30", "--allow-training-changes")
    diverged = train(
        multi30k_slice, output, "--max-steps", "12", "--checkpoint-every", "100", *exploding
    )
    assert_one_line_error(diverged, "training diverged at step ")
    assert "rerun to resume" in diverged.stderr
    assert_run_readable(output)
    assert max(checkpoint_step(p) for p in list_checkpoints(output / "checkpoints")) == 4

    lower = ("--set", "learning_rate_scale=0.5", "--allow-training-changes", "--log-every", "1")
    resumed = train(multi30k_slice, output, "--max-steps", "6", *lower)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step 4," in resumed.stderr
    assert_run_readable(output)
    changes = read_settings(output)["training_changes"]
    assert [c["learning_rate_scale"] for c in changes] == [[1.0, 1e30], [1e30, 0.5]]

    # Other training files: refused, unless asked for.
    changed = tmp_path / "changed"
    shutil.copytree(multi30k_slice, changed)
    with gzip.open(changed / "train.de.gz", "at", encoding="utf-8") as file:
        file.write("Noch ein Satz.\n")
    with gzip.open(changed / "train.en.gz", "at", encoding="utf-8") as file:
        file.write("One more sentence.\n")
    message = refusal(changed, output, "--max-steps", "6", "--set", "learning_rate_scale=0.5")
    assert "run.json was trained on other data" in message and "train.de.gz" in message


@pytest.mark.long(
    covered_by=[
        "tests/training/test_faults.py::test_a_weights_write_that_fails_is_a_clear_error_and_keeps_the_old_file",
    ]
)
@pytest.mark.slow
def test_a_disk_that_fills_mid_save_is_one_line_and_the_rerun_goes_on(
    multi30k_slice, trained_4_steps, tmp_path
):
    output = copy_of(trained_4_steps, tmp_path)
    weights_size = (output / "model.weights.h5").stat().st_size

    full = train(
        multi30k_slice,
        output,
        *("--max-steps", "6", "--checkpoint-every", "1"),
        limit_file_size=weights_size // 2,
    )
    assert_one_line_error(full, "cannot write ")
    assert "File too large (EFBIG)" in full.stderr
    assert_run_readable(output)

    rerun = train(multi30k_slice, output, "--max-steps", "6")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "at step 4," in rerun.stderr
    assert_run_readable(output)


def test_empty_training_files_are_one_clear_error(multi30k_slice, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(multi30k_slice, data)
    for language in ("en", "de"):
        with gzip.open(data / f"train.{language}.gz", "wt"):
            pass
    message = refusal(data, tmp_path / "run", "--max-steps", "2")
    assert message.endswith(
        f"no text to learn a vocabulary from: {data / 'train.en.gz'}, {data / 'train.de.gz'}"
    )


def test_training_pairs_all_longer_than_max_length_are_one_clear_error(multi30k_slice, tmp_path):
    message = refusal(multi30k_slice, tmp_path / "run", "--max-steps", "2", "--set", "max_length=3")
    assert "no training pair to train on" in message
    assert "every pair is longer than max_length=3" in message
    json.loads((tmp_path / "run" / "run.json").read_text())
