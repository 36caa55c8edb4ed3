"""MirroredStrategy over 8 replicas computes exactly the 1-device step (§5.2: 8 GPUs)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.objectives.losses import LabelSmoothedCrossEntropy
from keras_transformer.training import trainer
from keras_transformer.training.distribution import (
    PEER_FAILURES,
    WorkerLostError,
    create_strategy,
)
from keras_transformer.training.training_run import TrainingRun

REPLICAS = 8
PER_REPLICA = 2
LENGTH = 6


def global_batch():
    """16 pairs whose real lengths differ, so the replicas hold different token counts."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, LENGTH, size=REPLICAS * PER_REPLICA)
    ids = rng.integers(4, 1000, size=(REPLICAS * PER_REPLICA, LENGTH)).astype("int32")
    ids[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0
    target_in = np.concatenate([np.ones((len(ids), 1), "int32"), ids[:, :-1]], axis=1)
    target_in[ids == 0] = 0
    return (ids, target_in), ids


def train_one_step(strategy, dataset):
    # One layer a stack: the replicas' agreement does not depend on depth, and the step is
    # traced once a replica.
    config = TransformerConfig.preset("tiny", num_layers=1, residual_dropout=0.0)
    with strategy.scope():
        keras.utils.set_random_seed(3)
        model = Transformer(config)
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=LabelSmoothedCrossEntropy(0.1))
    initial = model.get_weights()
    # An explicit step count, as the trainer uses: with per-replica datasets, Keras's probe for
    # the end of the data would otherwise run a partial step that pollutes the reported loss.
    fit = model.fit(dataset, epochs=1, steps_per_epoch=1, shuffle=False, verbose=0)
    loss = fit.history["loss"][0]
    return loss, initial, model.get_weights()


@pytest.mark.slow  # eight replicas
def test_eight_replicas_give_the_one_device_loss_and_update():
    (source, target_in), target_out = global_batch()
    single = tf.data.Dataset.from_tensors(((source, target_in), target_out))

    def per_replica_batches(context):
        assert context.num_replicas_in_sync == REPLICAS
        return tf.data.Dataset.from_tensor_slices(
            tuple(
                np.reshape(a, (REPLICAS, PER_REPLICA, LENGTH))
                for a in (source, target_in, target_out)
            )
        ).map(lambda s, t, o: ((s, t), o))

    eight = create_strategy(REPLICAS)
    assert eight.num_replicas_in_sync == REPLICAS
    distributed = eight.distribute_datasets_from_function(per_replica_batches)

    loss_1, initial_1, weights_1 = train_one_step(create_strategy(1), single)
    loss_8, initial_8, weights_8 = train_one_step(eight, distributed)
    for i1, i8 in zip(initial_1, initial_8, strict=True):
        np.testing.assert_array_equal(i8, i1)
    assert abs(loss_1 - loss_8) < 1e-5
    for w1, w8 in zip(weights_1, weights_8, strict=True):
        np.testing.assert_allclose(w8, w1, atol=1e-5)
    # The step moved the weights from where both runs started, so the runs' agreement is not
    # that of two runs that both left their weights alone.
    assert max(np.abs(w - i).max() for w, i in zip(weights_1, initial_1, strict=True)) > 1e-3


# TensorFlow's message on the workers left when one stopped sending heartbeats (kill -9).
HEARTBEATS_MISSED = (
    "{{function_node __inference_one_step_on_data_1234}} Collective ops is aborted by: Error "
    "reported from /job:worker/task:1: The following tasks are unhealthy (stopped sending "
    "heartbeats):\n/job:worker/replica:0/task:1\nThe tasks have crashed."
)


@pytest.mark.parametrize("failure", PEER_FAILURES)
def test_a_lost_worker_is_one_error_that_says_to_rerun_every_worker(failure, tmp_path, monkeypatch):
    """What `train` raises when a collective aborts because a peer is gone: under TF_CONFIG, a
    `WorkerLostError` of one line naming TensorFlow's cause and how to resume; a single worker
    re-raises TensorFlow's error, which no peer explains."""
    error = failure(None, None, HEARTBEATS_MISSED)

    def aborted(*_):
        raise error

    monkeypatch.setattr(trainer, "_train_as_this_worker", aborted)
    config, run = TransformerConfig.preset("tiny"), TrainingRun(output=tmp_path)
    monkeypatch.setattr(trainer, "is_multi_worker", lambda: True)
    with pytest.raises(WorkerLostError) as lost:
        trainer.train(config, run)
    message = str(lost.value)
    assert "\n" not in message and lost.value.__cause__ is error
    assert message.startswith(
        "a worker of the cluster stopped or cannot be reached "
        f"({failure.__name__}: Error reported from /job:worker/task:1: The following tasks are "
        "unhealthy (stopped sending heartbeats))"
    )
    assert message.endswith("rerun the same command on every worker to resume from it")

    monkeypatch.setattr(trainer, "is_multi_worker", lambda: False)
    with pytest.raises(failure) as alone:
        trainer.train(config, run)
    assert alone.value is error
