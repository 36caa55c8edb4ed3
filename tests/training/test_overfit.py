"""A tiny Transformer memorises a handful of real Multi30k pairs: the whole stack can learn."""

import gzip

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig
from keras_transformer.training.trainer import compile_model

pytestmark = pytest.mark.slow  # trains to overfitting

PAIRS = 8
STEPS = 150
LOSS_THRESHOLD = 0.1  # unsmoothed cross entropy per token; it starts near log(V) ≈ 4.7


def read_lines(path, count):
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [next(lines).strip() for _ in range(count)]


def word_ids(sentences, vocabulary):
    """Whitespace words → ids after the reserved PAD=0, BOS=1, EOS=2, UNK=3."""
    return [[vocabulary.setdefault(w, len(vocabulary)) for w in s.split()] for s in sentences]


def padded(rows, length):
    return np.array([row + [0] * (length - len(row)) for row in rows], "int32")


def test_tiny_model_overfits_a_handful_of_real_pairs(multi30k_dir):
    vocabulary = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    source = word_ids(read_lines(multi30k_dir / "train.en.gz", PAIRS), vocabulary)
    target = word_ids(read_lines(multi30k_dir / "train.de.gz", PAIRS), vocabulary)
    length = max(map(len, source + target)) + 1
    x = (padded([s + [2] for s in source], length), padded([[1] + t for t in target], length))
    y = padded([t + [2] for t in target], length)

    config = TransformerConfig.preset(
        "tiny",
        vocab_size=len(vocabulary),
        residual_dropout=0.0,
        label_smoothing=0.0,
        warmup_steps=30,
        learning_rate_scale=0.5,
    )
    model = compile_model(config)  # the trainer's loss, metrics and optimizer
    # The same batch every step; an epoch of 10 steps keeps Keras's per-epoch work off the clock.
    batches = tf.data.Dataset.from_tensors((x, y)).repeat()
    fit = model.fit(batches, epochs=STEPS // 10, steps_per_epoch=10, shuffle=False, verbose=0)
    history = fit.history

    assert history["loss"][0] > 3.0
    assert history["loss"][-1] < LOSS_THRESHOLD
    assert history["accuracy"][-1] == 1.0
