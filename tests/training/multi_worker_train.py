"""One worker of the 2-process MultiWorkerMirroredStrategy test (run by test_multi_worker.py).

Usage: python multi_worker_train.py OUTPUT.npz  (TF_CONFIG set by the caller)
"""

import sys

import numpy as np
import tensorflow as tf

from keras_transformer import TransformerConfig
from keras_transformer.training.distribution import create_strategy
from keras_transformer.training.trainer import compile_model, fit_under_strategy

STEPS = 3


def per_worker_batches(context):
    """Each worker reads its own shard of one fixed dataset, as the real pipeline does."""
    rng = np.random.default_rng(11)
    ids = rng.integers(4, 1000, size=(STEPS * 4, 5)).astype("int32")
    target_in = np.concatenate([np.ones((len(ids), 1), "int32"), ids[:, :-1]], axis=1)
    dataset = tf.data.Dataset.from_tensor_slices(((ids, target_in), ids))
    dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
    return dataset.batch(2).repeat()


def main(output):
    strategy = create_strategy()
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy), strategy
    with strategy.scope():
        tf.keras.utils.set_random_seed(5)
        model = compile_model(TransformerConfig.preset("tiny", num_layers=1, residual_dropout=0.0))
    dataset = strategy.distribute_datasets_from_function(per_worker_batches)
    history = fit_under_strategy(
        model, strategy, dataset, epochs=1, steps_per_epoch=STEPS, verbose=0
    )
    weights = {f"weight_{i}": w for i, w in enumerate(model.get_weights())}
    np.savez(output, loss=history.history["loss"], **weights)


if __name__ == "__main__":
    main(sys.argv[1])
