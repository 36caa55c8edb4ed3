"""Data-parallel training as in §5.2 ("one machine with 8 NVIDIA P100 GPUs") and beyond.

`create_strategy` picks `MultiWorkerMirroredStrategy` when `TF_CONFIG` describes a cluster of
several workers, otherwise `MirroredStrategy` over every visible GPU, or over the first
`num_devices` logical CPU devices (how the tests run "8 replicas" on a CPU); on one CPU
device it is TensorFlow's default strategy. In a cluster, `worker_name` tells the chief, which
writes the run's files, from the other workers.
"""

import json
import os

import tensorflow as tf


def configure_logical_cpus(count: int):
    """Splits the CPU into `count` logical devices; must run before TensorFlow initialises."""
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
            f"--devices {count} asks for more CPU devices than the {len(cpus)} configured; "
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
