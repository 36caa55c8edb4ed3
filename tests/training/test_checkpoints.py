"""Rolling checkpoints, their average (§6.1), and clear errors for corrupt files."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.run_directory import (
    CheckpointError,
    list_checkpoints,
    load_weights_checked,
    read_metrics,
    save_weights_atomically,
)
from keras_transformer.training.callbacks import (
    MetricsJsonl,
    ResumableBackup,
    RollingCheckpoints,
    StopAtStep,
)
from keras_transformer.training.checkpoint_averaging import average_last_checkpoints
from keras_transformer.training.trainer import compile_model

CONFIG = TransformerConfig.preset("tiny", num_layers=1, warmup_steps=10)


def toy_data(pairs=8, length=5):
    rng = np.random.default_rng(0)
    ids = rng.integers(4, CONFIG.vocab_size, size=(pairs, length)).astype("int32")
    target_in = np.concatenate([np.ones((pairs, 1), "int32"), ids[:, :-1]], axis=1)
    return (ids, target_in), ids


def test_rolling_checkpoints_keep_the_last_k(tmp_path):
    x, y = toy_data()
    callback = RollingCheckpoints(tmp_path, every_steps=2, keep=3)
    compile_model(CONFIG).fit(x, y, batch_size=1, epochs=1, verbose=0, callbacks=[callback])
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt-00000004.weights.h5",
        "ckpt-00000006.weights.h5",
        "ckpt-00000008.weights.h5",
    ]


def test_a_resume_sets_aside_the_checkpoints_of_the_steps_it_trains_again(tmp_path):
    x, y = toy_data()
    callback = RollingCheckpoints(tmp_path, every_steps=2, keep=10)
    compile_model(CONFIG).fit(x, y, batch_size=1, epochs=1, verbose=0, callbacks=[callback])
    # As if restored from a backup at step 4, older than ckpt-6 and 8.
    resumed = compile_model(CONFIG)
    resumed.optimizer.iterations.assign(4)

    resumed.fit(
        (x[0][:2], x[1][:2]), y[:2], batch_size=1, epochs=1, verbose=0, callbacks=[callback]
    )

    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt-00000002.weights.h5",
        "ckpt-00000004.weights.h5",
        "ckpt-00000006.weights.h5",
    ]
    aside = tmp_path / "undone-from-00000004"
    assert sorted(p.name for p in aside.iterdir()) == [
        "ckpt-00000006.weights.h5",
        "ckpt-00000008.weights.h5",
    ]
    probe = Transformer(CONFIG)
    probe.load_weights(tmp_path / "ckpt-00000006.weights.h5")  # the resumed run's step 6
    for got, want in zip(probe.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)


def test_average_is_the_elementwise_mean(tmp_path):
    x, y = toy_data()
    model = compile_model(CONFIG)
    callback = RollingCheckpoints(tmp_path, every_steps=1, keep=10)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[callback])
    checkpoints = list_checkpoints(tmp_path)
    expected_weights = []
    for path in checkpoints[-3:]:
        probe = Transformer(CONFIG)
        probe.load_weights(path)
        expected_weights.append(probe.get_weights())
    expected = [np.mean(ws, axis=0) for ws in zip(*expected_weights, strict=True)]

    averaged = Transformer(CONFIG)
    used = average_last_checkpoints(averaged, tmp_path, last=3, output=tmp_path / "avg.weights.h5")
    assert used == checkpoints[-3:]
    restored = Transformer(CONFIG)
    restored.load_weights(tmp_path / "avg.weights.h5")
    for got, want in zip(restored.get_weights(), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert not np.allclose(expected[0], expected_weights[-1][0])  # the average is not the last


def test_too_few_checkpoints_is_an_error(tmp_path):
    with pytest.raises(CheckpointError, match="holds 0"):
        average_last_checkpoints(Transformer(CONFIG), tmp_path, 5, tmp_path / "a.weights.h5")


def test_averaging_none_is_an_error_not_all(tmp_path):
    with pytest.raises(CheckpointError, match="last 0 checkpoints: at least 1"):
        average_last_checkpoints(Transformer(CONFIG), tmp_path, 0, tmp_path / "a.weights.h5")


def test_corrupt_checkpoint_names_the_file(tmp_path):
    corrupt = tmp_path / "ckpt-00000010.weights.h5"
    corrupt.write_bytes(b"not an h5 file")
    with pytest.raises(CheckpointError, match="ckpt-00000010.weights.h5"):
        load_weights_checked(Transformer(CONFIG), corrupt)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_weights_checked(Transformer(CONFIG), tmp_path / "missing.weights.h5")


def backup_position(backup):
    return json.loads((backup / "training_metadata.json").read_text())


def test_backup_restores_step_and_optimizer_and_refuses_corruption(tmp_path):
    x, y = toy_data()
    backup = tmp_path / "backup"
    model = compile_model(CONFIG)
    metrics = MetricsJsonl(tmp_path / "metrics.jsonl")
    model.fit(
        x,
        y,
        batch_size=2,
        epochs=3,
        verbose=0,
        callbacks=[
            ResumableBackup(backup, save_freq=2, delete_checkpoint=False),
            metrics,
            StopAtStep(6),
        ],
    )
    assert int(model.optimizer.iterations) == 6
    # Stopped at step 6 = epoch 1, batch 2 (4 batches an epoch), which Keras ends all the same.
    ended = [(r["kind"], r["step"]) for r in read_metrics(metrics.path) if "epoch" in r["kind"]]
    assert ended == [("epoch", 4), ("partial_epoch", 6)]
    assert backup_position(backup) == {"epoch": 1, "batch": 1}

    # Resuming restores step 6 and restarts epoch 1, so epochs 1-2 add 8 steps: 14. Starting
    # over would give 12. The backups in the restarted epoch name it too.
    resumed = compile_model(CONFIG)
    backup_callback = ResumableBackup(backup, save_freq=2, delete_checkpoint=False)
    positions = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: seen.append(backup_position(backup))
    )
    seen = []
    resumed.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[backup_callback, positions])
    assert backup_callback.resumed_epoch == 1
    assert int(resumed.optimizer.iterations) == 14
    assert seen[1] == {"epoch": 1, "batch": 1}  # step 8, backed up (save_freq 2)

    for path in backup.rglob("*.h5"):
        path.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match=str(backup)):
        compile_model(CONFIG).fit(x, y, epochs=1, verbose=0, callbacks=[ResumableBackup(backup)])
    assert keras.backend.backend() == "tensorflow"


def test_a_stop_on_the_epochs_last_batch_completes_it(tmp_path):
    x, y = toy_data()
    backup = tmp_path / "backup"
    model = compile_model(CONFIG)
    metrics = MetricsJsonl(tmp_path / "metrics.jsonl")
    callbacks = [ResumableBackup(backup, save_freq=2, delete_checkpoint=False), metrics]
    model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[*callbacks, StopAtStep(8)])
    # Step 8 is epoch 1's last batch: that epoch counts whole, and the backup names epoch 2.
    ended = [(r["kind"], r["step"]) for r in read_metrics(metrics.path) if "epoch" in r["kind"]]
    assert ended == [("epoch", 4), ("epoch", 8)]
    assert backup_position(backup) == {"epoch": 2, "batch": 0}

    # The rerun trains epoch 2 only, not epoch 1 again: 4 more steps.
    model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=callbacks)
    assert int(model.optimizer.iterations) == 12
    ended = [(r["kind"], r["step"]) for r in read_metrics(metrics.path) if "epoch" in r["kind"]]
    assert ended[2:] == [("epoch", 12)]


class KilledWhileWriting(Exception):
    pass


def test_a_save_killed_mid_write_leaves_the_previous_file_readable(tmp_path, monkeypatch):
    model = compile_model(CONFIG)
    model.fit(*toy_data(), batch_size=4, epochs=1, verbose=0)
    path = tmp_path / "latest.weights.h5"
    save_weights_atomically(model, path)
    saved = model.get_weights()

    write_bytes = Path.write_bytes

    def die_half_written(file, data):
        write_bytes(file, data[: len(data) // 2])  # the real write, cut short
        raise KilledWhileWriting

    model.fit(*toy_data(), batch_size=4, epochs=1, verbose=0)  # new weights to save
    monkeypatch.setattr(Path, "write_bytes", die_half_written)
    with pytest.raises(KilledWhileWriting):
        save_weights_atomically(model, path)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # the partial file is gone
    restored = Transformer(CONFIG)
    load_weights_checked(restored, path)
    for got, want in zip(restored.get_weights(), saved, strict=True):
        np.testing.assert_array_equal(got, want)
