"""Data-parallel training as in §5.2 ("one machine with 8 NVIDIA P100 GPUs") and beyond.

`create_strategy` picks `MultiWorkerMirroredStrategy` when `TF_CONFIG` describes a cluster of
several workers, otherwise `MirroredStrategy` over every visible GPU, or over the first
`num_devices` logical CPU devices (how the tests run "8 replicas" on a CPU); on one CPU
device it is TensorFlow's default strategy. In a cluster, `worker_name` tells the chief, which
writes the run's files, from the other workers, and `broadcast_from_chief` gives every worker the
chief's values (the state it restored from the run directory).

With JAX as Keras's backend, `jax_data_parallel` splits each global batch over the devices with
`keras.distribution.DataParallel`: one program over all of them, whose loss is the global
batch's (no per-replica sums); tf.data then only feeds it, on TensorFlow's default strategy.
"""

import json
import os
import re

import keras
import tensorflow as tf

from keras_transformer.config import ConfigError
from keras_transformer.errors import KerasTransformerError
from pipelines.tokenizer import PAD_ID

# XLA's count of host (CPU) devices, which JAX reads when it starts.
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def configure_logical_cpus(count: int):
    """Splits the CPU into `count` logical devices of Keras's backend; must run before the
    backend initialises."""
    if keras.backend.backend() == "jax":
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {HOST_DEVICES_FLAG}={count}"
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    )


def _tf_config() -> dict:
    return json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")


def is_multi_worker() -> bool:
    """Whether `TF_CONFIG` describes a cluster of several tasks, this process one of them."""
    return sum(len(tasks) for tasks in _tf_config().get("cluster", {}).values()) > 1


def worker_name() -> str | None:
    """`None` for the process that writes a run's files (a single process, or the cluster's
    chief: the `chief` task, else `worker` 0, as TensorFlow's Keras callbacks decide), and
    `<type>-<index>` (say `worker-1`) for any other task of a multi-worker cluster."""
    if not is_multi_worker():
        return None
    config = _tf_config()
    task = config.get("task", {})
    kind, index = task.get("type", "worker"), int(task.get("index", 0))
    has_chief = bool(config["cluster"].get("chief"))
    if kind == "chief" or (kind == "worker" and index == 0 and not has_chief):
        return None
    return f"{kind}-{index}"


class WorkerLostError(KerasTransformerError, RuntimeError):
    """Another worker of the cluster stopped, or cannot be reached, while this one trained."""


# What TensorFlow's collectives raise when a peer is gone: TensorFlow's coordination service
# misses the peer's heartbeats and aborts every collective of the cluster with one of these.
PEER_FAILURES = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
    tf.errors.DeadlineExceededError,
)


def worker_lost(error: tf.errors.OpError) -> WorkerLostError:
    """A `WorkerLostError` for `error`, one of `PEER_FAILURES`, telling how to go on."""
    # TensorFlow's message: "{{function_node ...}} Collective ops is aborted by: Error reported
    # from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):"
    cause = re.sub(r"\{\{.*?\}\}|Collective ops is aborted by:", "", error.message).strip()
    cause = (cause.splitlines() or [""])[0].rstrip(":")
    return WorkerLostError(
        f"a worker of the cluster stopped or cannot be reached ({type(error).__name__}: "
        f"{cause}); the run's state is the chief's last backup: rerun the same command on every "
        "worker to resume from it"
    )


def broadcast_from_chief(
    strategy: tf.distribute.MultiWorkerMirroredStrategy, values: list
) -> list[tf.Tensor]:
    """The chief's `values` (tensors or numbers), on every worker of the cluster.

    One all-reduce sum to which replica 0, the chief's first, brings the values and every other
    replica zeros: exact, whatever the values. Ints travel as float64, exact below 2**53.
    """
    tensors = [tf.convert_to_tensor(value) for value in values]
    sent = [t if t.dtype.is_floating else tf.cast(t, tf.float64) for t in tensors]
    zeros = [tf.zeros_like(t) for t in sent]
    shares = strategy.experimental_distribute_values_from_function(
        lambda context: sent if context.replica_id_in_sync_group == 0 else zeros
    )
    summed = strategy.run(
        lambda share: tf.distribute.get_replica_context().all_reduce("SUM", share), args=(shares,)
    )
    local = [strategy.experimental_local_results(value)[0] for value in summed]
    return [tf.cast(value, t.dtype) for value, t in zip(local, tensors, strict=True)]


def create_strategy(num_devices: int | None = None) -> tf.distribute.Strategy:
    """The distribution strategy for this process (see the module docstring)."""
    if is_multi_worker():
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if gpus and not num_devices:
        return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus])
    cpus = tf.config.list_logical_devices("CPU")
    count = num_devices or 1
    if count > len(cpus):
        raise ValueError(
            f"devices {count} asks for more CPU devices than the {len(cpus)} configured; "
            "logical CPU devices must be configured before TensorFlow starts"
        )
    if count == 1:
        # One CPU device needs no mirroring. The default strategy saves MirroredStrategy's
        # per-step replica machinery, and Keras's gradient accumulation works under it only
        # (under MirroredStrategy its update, a merge_call, sits inside a cond, which
        # TensorFlow rejects).
        return tf.distribute.get_strategy()
    # NCCL, MirroredStrategy's default reduction, needs GPUs.
    return tf.distribute.MirroredStrategy(
        [cpu.name for cpu in cpus[:count]],
        cross_device_ops=tf.distribute.ReductionToOneDevice(),
    )


def jax_data_parallel(num_devices: int | None = None) -> int:
    """On JAX: `keras.distribution.DataParallel` over the first `num_devices` devices (every
    GPU by default) as the distribution of the models built after it; returns the device count.
    One device needs no distribution."""
    devices = keras.distribution.list_devices()
    count = num_devices or len(devices)
    if count > len(devices):
        raise ConfigError(f"devices {count} asks for more devices than JAX's {len(devices)}")
    if count > 1:
        keras.distribution.set_distribution(
            keras.distribution.DataParallel(devices=devices[:count])
        )
    return count


def rows_divisible_by(count: int):
    """A `tf.data` transform that pads each batch with all-PAD rows to a multiple of `count`
    rows, so that `DataParallel` splits it evenly; PAD rows carry no loss and no metric."""

    def pad_rows(inputs, target_out):
        source, target_in = inputs
        missing = [[0, -tf.shape(source)[0] % count], [0, 0]]
        pad = lambda t: tf.pad(t, missing, constant_values=PAD_ID)  # noqa: E731
        return (pad(source), pad(target_in)), pad(target_out)

    return lambda dataset: dataset.map(pad_rows)
