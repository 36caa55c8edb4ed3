"""One backend's side of the cross-backend tests (test_backends.py), in a process of its own:
Keras fixes its backend when it is imported.

Usage: KERAS_BACKEND=tensorflow|jax PYTHONPATH=... python backend_worker.py TASK DIR
(`without_tensorflow.python_path()`)

- `initial` (TensorFlow): the seeded `tiny` model's weights into DIR/initial.weights.h5, its
  logits on `probe_batch` and its cached greedy ids into DIR/initial.tensorflow.npz.
- `train` (JAX, TensorFlow unimportable): loads those weights and writes to DIR/initial.jax.npz
  their logits, their cached greedy ids and the full pass's argmax over those ids; fits a toy
  task with the paper's loss, metrics and schedule; writes the trained weights to
  DIR/trained.weights.h5, and to DIR/trained.jax.npz the loss on the first batch before and
  after and the trained weights' logits.
- `reload` (TensorFlow): the trained weights' logits into DIR/trained.tensorflow.npz.
"""

import os
import sys
from pathlib import Path

import numpy as np

from without_tensorflow import refuse_tensorflow

BOS_ID = 1
GREEDY_LENGTH = 7
FIT_STEPS = 60


def config():
    from keras_transformer import TransformerConfig

    # An output projection of its own: with the tied one, an untrained model's most probable
    # next token is the token it was given, and greedy decoding repeats its first token.
    return TransformerConfig.preset(
        "tiny", residual_dropout=0.0, warmup_steps=20, tie_embeddings=False
    )


def chain_pairs(rng, count, length=6):
    """`((source, target_in), target_out)`: sentences that follow a fixed successor of each
    token from a random first one, the target the source: learnable from either side."""
    successor = np.random.default_rng(0).permutation(np.arange(4, 40))
    source = np.empty((count, length), "int32")
    source[:, 0] = rng.integers(4, 40, size=count)
    for position in range(1, length):
        source[:, position] = successor[source[:, position - 1] - 4]
    target_in = np.concatenate([np.full((count, 1), BOS_ID, "int32"), source[:, :-1]], axis=1)
    return (source, target_in), source


def probe_batch():
    (source, target_in), _ = chain_pairs(np.random.default_rng(99), 4)
    source[1, 3:] = 0  # a padded sentence
    return source, target_in


def logits(model):
    return np.asarray(model(probe_batch()), "float32")


def greedy_ids(model):
    source, _ = probe_batch()
    return np.asarray(model.greedy_ids(source, np.full(len(source), BOS_ID), GREEDY_LENGTH))


def initial(directory: Path):
    import keras

    from keras_transformer import Transformer

    keras.utils.set_random_seed(3)
    model = Transformer(config())
    model.save_weights(directory / "initial.weights.h5")
    np.savez(
        directory / "initial.tensorflow.npz", logits=logits(model), greedy_ids=greedy_ids(model)
    )


def train(directory: Path):
    import keras

    from keras_transformer import Transformer
    from keras_transformer.objectives.losses import LabelSmoothedCrossEntropy
    from keras_transformer.objectives.metrics import MaskedAccuracy, Perplexity
    from keras_transformer.objectives.schedule import TransformerSchedule

    model = Transformer(config())
    model.load_weights(directory / "initial.weights.h5")
    ids = greedy_ids(model)
    source, _ = probe_batch()
    prefix = np.concatenate([np.full((len(ids), 1), BOS_ID), ids[:, :-1]], axis=1)
    np.savez(
        directory / "initial.jax.npz",
        logits=logits(model),
        greedy_ids=ids,
        full_pass_ids=np.asarray(model((source, prefix))).argmax(axis=-1),
    )
    model.compile(
        optimizer=keras.optimizers.Adam(
            TransformerSchedule(config().d_model, config().warmup_steps, scale=2.0),
            beta_1=0.9,
            beta_2=0.98,
            epsilon=1e-9,
        ),
        loss=LabelSmoothedCrossEntropy(0.1),
        metrics=[MaskedAccuracy(), Perplexity()],
    )
    inputs, targets = chain_pairs(np.random.default_rng(7), 16 * FIT_STEPS)
    first_batch = (inputs[0][:16], inputs[1][:16]), targets[:16]
    before = model.evaluate(*first_batch, return_dict=True, verbose=0)
    model.fit(inputs, targets, batch_size=16, epochs=1, shuffle=False, verbose=0)
    after = model.evaluate(*first_batch, return_dict=True, verbose=0)
    model.save_weights(directory / "trained.weights.h5")
    np.savez(
        directory / "trained.jax.npz",
        logits=logits(model),
        loss_before=before["loss"],
        loss_after=after["loss"],
        accuracy_after=after["accuracy"],
    )


def reload(directory: Path):
    from keras_transformer import Transformer

    model = Transformer(config())
    model.load_weights(directory / "trained.weights.h5")
    np.savez(
        directory / "trained.tensorflow.npz", logits=logits(model), greedy_ids=greedy_ids(model)
    )


TASKS = {"initial": initial, "train": train, "reload": reload}

if __name__ == "__main__":
    task, directory = sys.argv[1], Path(sys.argv[2])
    if os.environ.get("KERAS_BACKEND") == "jax":
        refuse_tensorflow()
    TASKS[task](directory)
