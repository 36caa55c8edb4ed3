"""Label-smoothed cross entropy (§5.4) and token metrics against NumPy references."""

import numpy as np
import pytest

from keras_transformer.objectives.losses import LabelSmoothedCrossEntropy
from keras_transformer.objectives.metrics import MaskedAccuracy, Perplexity


def numpy_smoothed_loss(targets, logits, epsilon):
    vocab = logits.shape[-1]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    smoothed = np.full(logits.shape, epsilon / vocab)
    total, count = 0.0, 0
    for b, t in np.ndindex(targets.shape):
        if targets[b, t] == 0:
            continue
        q = smoothed[b, t].copy()
        q[targets[b, t]] += 1 - epsilon
        total += -(q * log_probs[b, t]).sum()
        count += 1
    return total / count


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.2])
def test_label_smoothed_loss_equals_numpy(epsilon):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 7)).astype("float32")
    targets = np.array([[3, 4, 5, 0, 0], [1, 2, 0, 0, 0], [6, 5, 4, 3, 2]])
    loss = LabelSmoothedCrossEntropy(label_smoothing=epsilon)(targets, logits)
    assert float(loss) == pytest.approx(numpy_smoothed_loss(targets, logits, epsilon), rel=1e-5)


def test_padding_carries_no_loss():
    logits = np.random.default_rng(1).normal(size=(1, 3, 5)).astype("float32")
    loss_fn = LabelSmoothedCrossEntropy()
    other = logits.copy()
    other[0, 2] += 10.0  # position 2 is padding
    targets = np.array([[1, 2, 0]])
    assert float(loss_fn(targets, logits)) == pytest.approx(float(loss_fn(targets, other)))


def test_masked_accuracy_and_perplexity():
    logits = np.log(np.array([[[0.7, 0.1, 0.2], [0.2, 0.3, 0.5], [0.9, 0.05, 0.05]]], "float32"))
    targets = np.array([[0, 2, 0]])  # only position 1 is real
    accuracy, perplexity = MaskedAccuracy(), Perplexity()
    accuracy.update_state(targets, logits)
    perplexity.update_state(targets, logits)
    assert float(accuracy.result()) == 1.0
    assert float(perplexity.result()) == pytest.approx(1 / 0.5, rel=1e-5)


def test_masked_accuracy_is_the_argmax_hit_rate_over_real_tokens():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(4, 6, 9)).astype("float32")
    targets = rng.integers(1, 9, size=(4, 6))
    targets[:, 4:] = 0
    targets[0, :3] = logits[0, :3].argmax(-1)  # some hits for certain
    accuracy = MaskedAccuracy()
    accuracy.update_state(targets, logits)
    real = targets != 0
    expected = (logits.argmax(-1) == targets)[real].mean()
    assert expected > 0 and float(accuracy.result()) == pytest.approx(expected)


def test_gradient_is_softmax_minus_smoothed_target_over_real_tokens():
    import tensorflow as tf

    epsilon, vocab = 0.1, 6
    logits = tf.constant(np.random.default_rng(2).normal(size=(2, 3, vocab)), tf.float32)
    targets = np.array([[2, 5, 0], [1, 0, 0]])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = LabelSmoothedCrossEntropy(label_smoothing=epsilon)(targets, logits)
    smoothed = np.eye(vocab)[targets] * (1 - epsilon) + epsilon / vocab
    real = (targets != 0)[..., None]
    expected = np.where(real, tf.nn.softmax(logits).numpy() - smoothed, 0.0) / real.sum()
    np.testing.assert_allclose(tape.gradient(loss, logits).numpy(), expected, atol=1e-6)
