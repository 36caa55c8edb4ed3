"""Gradient accumulation: N micro-batches make the update of their whole batch.

It lets `base` train on the paper's 25k-token batches (§5.1) where the whole batch does not fit
in memory: each update still averages the gradient over all of the batch's tokens, weighting each
micro-batch by its token count (Keras's own accumulation weighs the micro-batches equally).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.objectives.losses import LabelSmoothedCrossEntropy
from keras_transformer.objectives.schedule import TransformerSchedule
from keras_transformer.training.distribution import create_strategy
from keras_transformer.training.optimizer import (
    TokenWeightedAccumulation,
    TokenWeightedAdam,
    create_optimizer,
)

LENGTH = 6
# One layer a stack: the update's weighting does not depend on depth, and each model's step is
# traced, or compiled with XLA, anew.
CONFIG = TransformerConfig.preset("tiny", num_layers=1, residual_dropout=0.0)


class TokenWeightedSGD(TokenWeightedAccumulation, keras.optimizers.SGD):
    """Plain SGD moves the weights by the gradient itself, so the tests see its weighting (Adam's
    first update is about lr·sign(gradient), blind to most of it)."""


def batch_of_four(lengths=(3, 5, 4, 4)):
    """Four pairs of the given real target lengths; by default rows 0-1 and rows 2-3 hold 8 real
    target tokens each, so the mean loss of the whole batch is the mean of the two halves'."""
    rng = np.random.default_rng(7)
    ids = rng.integers(4, 1000, size=(4, LENGTH)).astype("int32")
    for row, length in enumerate(lengths):
        ids[row, length:] = 0
    target_in = np.concatenate([np.ones((4, 1), "int32"), ids[:, :-1]], axis=1)
    target_in[ids == 0] = 0
    return (ids, target_in), ids


def train(batches, accumulate, jit_compile, token_weighted=True):
    """One epoch over `batches` with SGD, from the same initial weights every time; with
    `accumulate` > 1 the accumulation is token-weighted unless `token_weighted` is False (then
    Keras's own, equal-weight)."""
    with create_strategy(1).scope():
        keras.utils.set_random_seed(3)
        model = Transformer(CONFIG)
        steps = accumulate if accumulate > 1 else None
        if token_weighted:
            optimizer = TokenWeightedSGD(0.5, gradient_accumulation_steps=steps)
            loss = LabelSmoothedCrossEntropy(0.1, record_tokens=optimizer.record_tokens)
        else:
            optimizer = keras.optimizers.SGD(0.5, gradient_accumulation_steps=steps)
            loss = LabelSmoothedCrossEntropy(0.1)
        model.compile(optimizer, loss, jit_compile=jit_compile)
        model.optimizer.build(model.trainable_variables)  # as the trainer does: one trace
    dataset = tf.data.Dataset.from_tensor_slices(batches).map(lambda s, t, o: ((s, t), o))
    model.fit(dataset, epochs=1, steps_per_epoch=len(batches[0]), shuffle=False, verbose=0)
    return model


# Under XLA: the same updates (the False case) through XLA, which the precision tests compare
# with the plain path's losses.
UNDER_XLA = [
    pytest.mark.slow,
    pytest.mark.long(
        covered_by=[
            "tests/training/test_precision_and_xla.py::test_xla_gives_the_same_losses_as_the_plain_path"
        ]
    ),
]


@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=UNDER_XLA)])
def test_two_half_batches_accumulated_make_the_whole_batch_update(jit_compile):
    (source, target_in), target_out = batch_of_four()
    whole = train(tuple(a[None] for a in (source, target_in, target_out)), 1, jit_compile)
    halves = train(
        tuple(a.reshape(2, 2, LENGTH) for a in (source, target_in, target_out)), 2, jit_compile
    )
    assert int(whole.optimizer.iterations) == int(halves.optimizer.iterations) == 1
    for w1, w2 in zip(whole.get_weights(), halves.get_weights(), strict=True):
        np.testing.assert_allclose(w2, w1, atol=1e-5)


@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=UNDER_XLA)])
def test_micro_batches_of_unequal_token_counts_make_the_whole_batch_update(jit_compile):
    # 3 real target tokens in the first micro-batch, 11 in the second.
    (source, target_in), target_out = batch_of_four(lengths=(1, 2, 6, 5))
    assert [int((a != 0).sum()) for a in np.split(target_out, 2)] == [3, 11]
    whole = train(tuple(a[None] for a in (source, target_in, target_out)), 1, jit_compile)
    halves = tuple(a.reshape(2, 2, LENGTH) for a in (source, target_in, target_out))
    weighted = train(halves, 2, jit_compile)
    assert int(whole.optimizer.iterations) == int(weighted.optimizer.iterations) == 1
    for w1, w2 in zip(whole.get_weights(), weighted.get_weights(), strict=True):
        np.testing.assert_allclose(w2, w1, atol=1e-5)
    # The comparison can tell: weighing the two micro-batches equally lands elsewhere.
    equal = train(halves, 2, jit_compile, token_weighted=False)
    assert (
        max(
            np.abs(w2 - w1).max()
            for w1, w2 in zip(whole.get_weights(), equal.get_weights(), strict=True)
        )
        > 1e-3
    )


def test_accumulating_without_token_counts_is_an_error():
    variable = keras.Variable(np.ones(3, "float32"))
    optimizer = TokenWeightedSGD(0.5, gradient_accumulation_steps=2)
    with pytest.raises(ValueError, match="record_tokens"):
        optimizer.apply([np.ones(3, "float32")], [variable])


def test_backups_keep_the_token_count_and_old_backups_still_load():
    variables = [keras.Variable(np.ones(3, "float32")), keras.Variable(np.ones(2, "float32"))]
    optimizer = TokenWeightedAdam(0.1, gradient_accumulation_steps=2)
    optimizer.record_tokens(7)
    optimizer.apply([np.ones(3, "float32"), np.ones(2, "float32")], variables)  # half an update
    store = {}
    optimizer.save_own_variables(store)
    restored = TokenWeightedAdam(0.1, gradient_accumulation_steps=2)
    restored.build(variables)
    restored.load_own_variables(store)
    assert float(restored.variables[-1]) == 7.0  # the token count is the last variable
    for saved, loaded in zip(optimizer.variables, restored.variables, strict=True):
        np.testing.assert_array_equal(loaded, saved)

    # A backup of Keras's own accumulation (before the token count) taken at an update boundary.
    old = keras.optimizers.Adam(0.1, gradient_accumulation_steps=2)
    for _ in range(2):
        old.apply([np.ones(3, "float32"), np.ones(2, "float32")], variables)
    old_store = {}
    old.save_own_variables(old_store)
    assert len(old_store) == len(restored.variables) - 1
    restored.load_own_variables(old_store)
    assert int(restored.iterations) == 1 and float(restored.variables[-1]) == 0.0
    for saved, loaded in zip(old.variables, restored.variables, strict=False):
        np.testing.assert_array_equal(loaded, saved)


def test_no_update_before_the_last_micro_batch():
    (source, target_in), target_out = batch_of_four()
    first_half = tuple(a[None, :2] for a in (source, target_in, target_out))
    model = train(first_half, 2, jit_compile=False)
    keras.utils.set_random_seed(3)
    initial = Transformer(CONFIG).get_weights()
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
    assert isinstance(optimizer, TokenWeightedAdam)
    assert optimizer.gradient_accumulation_steps == 4
    assert optimizer.get_config()["learning_rate"]["config"]["accumulation_steps"] == 4
    plain = create_optimizer(TransformerConfig.preset("base"))
    assert isinstance(plain, keras.optimizers.Adam) and not isinstance(plain, TokenWeightedAdam)
    assert plain.gradient_accumulation_steps is None
