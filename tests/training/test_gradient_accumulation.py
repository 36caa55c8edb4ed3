"""Gradient accumulation: N micro-batches make the update of their whole batch.

It lets `base` train on the paper's 25k-token batches (§5.1) where the whole batch does not fit
in memory: each update still averages the gradient over all of the batch's tokens.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.training.distribution import create_strategy
from keras_transformer.training.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.optimizer import TransformerSchedule, create_optimizer

LENGTH = 6


def batch_of_four():
    """Four pairs; rows 0-1 and rows 2-3 hold 8 real target tokens each, so the mean loss of
    the whole batch is the mean of the two halves' mean losses."""
    rng = np.random.default_rng(7)
    ids = rng.integers(4, 1000, size=(4, LENGTH)).astype("int32")
    for row, length in enumerate((3, 5, 4, 4)):
        ids[row, length:] = 0
    target_in = np.concatenate([np.ones((4, 1), "int32"), ids[:, :-1]], axis=1)
    target_in[ids == 0] = 0
    return (ids, target_in), ids


def train(batches, accumulate, jit_compile):
    config = TransformerConfig.preset("tiny", residual_dropout=0.0)
    with create_strategy(1).scope():
        keras.utils.set_random_seed(3)
        model = Transformer(config)
        optimizer = keras.optimizers.SGD(
            0.5, gradient_accumulation_steps=accumulate if accumulate > 1 else None
        )
        model.compile(optimizer, LabelSmoothedCrossEntropy(0.1), jit_compile=jit_compile)
        model.optimizer.build(model.trainable_variables)  # as the trainer does: one trace
    dataset = tf.data.Dataset.from_tensor_slices(batches).map(lambda s, t, o: ((s, t), o))
    model.fit(dataset, epochs=1, steps_per_epoch=len(batches[0]), shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("jit_compile", [False, True])
def test_two_half_batches_accumulated_make_the_whole_batch_update(jit_compile):
    (source, target_in), target_out = batch_of_four()
    whole = train(tuple(a[None] for a in (source, target_in, target_out)), 1, jit_compile)
    halves = train(
        tuple(a.reshape(2, 2, LENGTH) for a in (source, target_in, target_out)), 2, jit_compile
    )
    assert int(whole.optimizer.iterations) == int(halves.optimizer.iterations) == 1
    for w1, w2 in zip(whole.get_weights(), halves.get_weights(), strict=True):
        np.testing.assert_allclose(w2, w1, atol=1e-5)


def test_no_update_before_the_last_micro_batch():
    (source, target_in), target_out = batch_of_four()
    first_half = tuple(a[None, :2] for a in (source, target_in, target_out))
    model = train(first_half, 2, jit_compile=False)
    keras.utils.set_random_seed(3)
    initial = Transformer(TransformerConfig.preset("tiny", residual_dropout=0.0)).get_weights()
    assert int(model.optimizer.iterations) == 0
    for w, i in zip(model.get_weights(), initial, strict=True):
        np.testing.assert_array_equal(w, i)


def test_schedule_counts_updates_not_micro_batches():
    plain = TransformerSchedule(d_model=512, warmup_steps=4000)
    accumulated = TransformerSchedule(d_model=512, warmup_steps=4000, accumulation_steps=4)
    for micro_batch in (0, 3, 4, 15999, 16000):
        assert float(accumulated(micro_batch)) == float(plain(micro_batch // 4))


def test_create_optimizer_accumulates():
    optimizer = create_optimizer(TransformerConfig.preset("base"), accumulation_steps=4)
    assert optimizer.gradient_accumulation_steps == 4
    assert optimizer.get_config()["learning_rate"]["config"]["accumulation_steps"] == 4
    assert create_optimizer(TransformerConfig.preset("base")).gradient_accumulation_steps is None
