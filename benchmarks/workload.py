"""The peers' benchmark workload (../shared/peers/README.md) as our configuration.

Table: docs/PERFORMANCE.md#speed-against-peers, through `throughput.py`, `alternated.py` and the
peers' scripts.

Imports the peers' `common.py` (their workload definition and timing protocol) from the peers
directory beside the checkout, or from `KT_PEERS_DIR`.
"""

import os
import platform
import sys
import time
from pathlib import Path

PEERS = Path(
    os.environ.get("KT_PEERS_DIR", Path(__file__).resolve().parents[2] / "shared" / "peers")
)
sys.path.insert(0, str(PEERS))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_transformer import runtime  # noqa: E402

# The process settings the CLI applies, before any TensorFlow operation: our programs are
# measured as a user runs them. oneDNN is left as the environment sets it, which
# `onednn.py` sets to compare both.
runtime.reuse_freed_memory()
runtime.prefer_wide_vectors()

import common  # noqa: E402  (the peers' workload definition)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import TransformerConfig  # noqa: E402

# The variant suffix of the tutorial-style peer's records when trained with its dropout on
# (`tutorial_dropout_on.py`): the targets count every peer as shipped, without it.
PEER_VARIANT_SUFFIX = ", dropout on"

__all__ = [
    "PEER_VARIANT_SUFFIX",
    "add_intra_op_threads_option",
    "common",
    "machine_description",
    "matmul_ceiling_gflops",
    "set_intra_op_threads",
    "workload_config",
]


def workload_config(size: str) -> TransformerConfig:
    sizes = common.SIZES[size]
    assert sizes["enc_layers"] == sizes["dec_layers"]
    return TransformerConfig.preset(
        "base",
        vocab_size=common.VOCAB,
        num_layers=sizes["enc_layers"],
        d_model=sizes["d_model"],
        d_ff=sizes["d_ff"],
        num_heads=sizes["heads"],
        residual_dropout=common.DROPOUT,
        label_smoothing=common.LABEL_SMOOTHING,
    )


def add_intra_op_threads_option(parser):
    """`--intra-op-threads N`: TensorFlow's intra-op threads (each XLA program's too); apply it
    with `set_intra_op_threads` before the first operation runs."""
    parser.add_argument("--intra-op-threads", type=int, help="TensorFlow's intra-op threads")


def set_intra_op_threads(args):
    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)


def matmul_ceiling_gflops(n=2048, repeats=10, dtype=tf.float32, jit_compile=True) -> float:
    """n×n matmul, median of `repeats`, as in peers/matmul_ceiling.py (fp32 under XLA)."""
    a = tf.cast(tf.random.normal((n, n)), dtype)
    matmul = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=jit_compile)
    for _ in range(3):
        matmul(a, a).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, a)[0, 0].numpy()
        times.append(time.perf_counter() - start)
    return 2 * n**3 / float(np.median(times)) / 1e9


def machine_description() -> dict:
    """The CPU and kernel a record was measured on. CI draws its machine, and the kinds differ in
    speed and in whether `malloc` faults large blocks in again (docs/PERFORMANCE.md), so a record
    names its own."""
    cpuinfo = Path("/proc/cpuinfo")
    fields = {}
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's
    return {
        "cpu": fields.get("model name", platform.processor()),
        "cpu_family": fields.get("cpu family"),
        "cpu_model": fields.get("model"),
        "avx512f": "avx512f" in fields.get("flags", "").split(),
        "cores": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
    }
