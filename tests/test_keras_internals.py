"""The private Keras and TensorFlow APIs that `keras_transformer.keras_internals` holds are still
there and still do what the package relies on: a Keras or TensorFlow release that renames,
removes or changes one fails here, by name, rather than silently elsewhere."""

import inspect
import os
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import keras_internals


def small_model(layers=()):
    model = keras.Sequential([keras.Input((3,)), *layers, keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    return model


def parameters(function) -> tuple:
    return tuple(inspect.signature(function).parameters)[1:]  # after self


@pytest.mark.parametrize("name, expected", keras_internals.OPTIMIZER_HOOKS.items())
def test_the_optimizer_hooks_that_token_weighted_accumulation_overrides_exist(name, expected):
    optimizer = keras.optimizers.Adam(gradient_accumulation_steps=2)
    optimizer.build([keras.Variable(np.ones(3))])
    assert hasattr(optimizer, name), f"Keras's optimizers no longer have {name}"
    if expected is not None:
        assert parameters(getattr(type(optimizer), name)) == expected


@pytest.mark.parametrize("name, expected", keras_internals.BACKUP_HOOKS.items())
def test_the_backup_hooks_that_resumable_backup_overrides_exist(name, expected):
    assert parameters(getattr(keras.callbacks.BackupAndRestore, name)) == expected


def test_weights_file_bytes_are_a_weights_file_that_loads_back(tmp_path):
    model = small_model()
    model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0)  # optimizer state too
    path = tmp_path / "model.weights.h5"
    path.write_bytes(keras_internals.weights_file_bytes(model))
    restored = small_model()
    restored.optimizer.build(restored.trainable_variables)
    restored.load_weights(path)
    for got, want in zip(restored.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert int(restored.optimizer.iterations) == int(model.optimizer.iterations) == 1


def test_sublayers_reach_inside_nested_layers():
    inner = keras.Sequential([keras.layers.Dropout(0.1)])
    kinds = [type(layer) for layer in keras_internals.sublayers(small_model([inner]))]
    assert keras.layers.Dropout in kinds and keras.layers.Dense in kinds


def test_fit_starts_from_the_initial_epoch_set():
    model = small_model()
    assert keras_internals.initial_epoch(model) == 0
    keras_internals.set_initial_epoch(model, 2)
    history = model.fit(np.ones((4, 3)), np.ones((4, 2)), epochs=3, verbose=0)
    assert history.epoch == [2]
    assert keras_internals.initial_epoch(model) == 2


def test_a_model_without_its_own_strategy_takes_the_current_one():
    model = small_model()
    keras_internals.forget_distribute_strategy(model)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        assert model.distribute_strategy is strategy


def test_backup_files_and_position_are_the_callbacks(tmp_path):
    backup = keras.callbacks.BackupAndRestore(tmp_path, save_freq=1)
    weights, metadata = keras_internals.backup_files(backup)
    assert Path(weights).parent == Path(metadata).parent == tmp_path
    assert weights.endswith(".weights.h5") and metadata.endswith(".json")
    backup.set_model(small_model())
    backup.on_epoch_end(0)
    backup.on_train_batch_end(3)
    assert keras_internals.backup_position(backup) == {"epoch": 1, "batch": 3}
    keras_internals.set_backup_epoch(backup, 5)
    assert keras_internals.backup_position(backup)["epoch"] == 5


def test_a_frozen_function_computes_the_same_without_variables():
    scale = tf.Variable(3.0)
    function = tf.function(lambda x: x * scale).get_concrete_function(tf.TensorSpec([2]))
    frozen = keras_internals.frozen_function(function)
    assert not frozen.variables
    np.testing.assert_array_equal(frozen(tf.constant([1.0, 2.0]))[0], [3.0, 6.0])


def test_tensorflow_says_it_has_initialized():
    tf.constant(1.0) + 1.0  # noqa: B018  (an operation: the eager context initializes)
    assert keras_internals.tensorflow_initialized() is True


def test_tensorflow_says_whether_onednn_is_on():
    # The conftest configured this process as the CLI does, which always sets the variable.
    told = os.environ["TF_ENABLE_ONEDNN_OPTS"].lower() in ("1", "true")
    assert keras_internals.onednn_enabled() is told
