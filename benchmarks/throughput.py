"""Training throughput of our Transformer on the peers' workload (../shared/peers/README.md).

Same model sizes, batch (64 × 24+24 tokens, vocabulary 8000, tied), label-smoothed loss, Adam
with a constant 1e-4, and timing protocol (1 compile step, 3 warm-up steps, 3 repetitions of N
timed steps, median) as the peer scripts, whose `common.py` this imports. Prints one JSON line
with train tokens/s and model FLOPs utilisation against the matmul ceiling measured in the same
process.

    .venv/bin/python benchmarks/throughput.py --size small [--no-jit] [--out results.jsonl]
"""

import argparse
import os
import sys
import time
from pathlib import Path

PEERS = Path(
    os.environ.get("KT_PEERS_DIR", Path(__file__).resolve().parents[2] / "shared" / "peers")
)
sys.path.insert(0, str(PEERS))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import common  # noqa: E402  (the peers' workload definition)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import Transformer, TransformerConfig  # noqa: E402
from keras_transformer.losses import LabelSmoothedCrossEntropy  # noqa: E402


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


def matmul_ceiling_gflops(n=2048, repeats=10) -> float:
    """fp32 n×n matmul under XLA, best median as in peers/matmul_ceiling.py."""
    a = tf.random.normal((n, n))
    matmul = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=True)
    for _ in range(3):
        matmul(a, a).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, a)[0, 0].numpy()
        times.append(time.perf_counter() - start)
    return 2 * n**3 / float(np.median(times)) / 1e9


class StepClock(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


def train_throughput(size: str, jit_compile: bool, steps: int) -> dict:
    config = workload_config(size)
    model = Transformer(config)
    adam = common.ADAM
    model.compile(
        optimizer=keras.optimizers.Adam(adam["lr"], adam["beta1"], adam["beta2"], adam["eps"]),
        loss=LabelSmoothedCrossEntropy(config.label_smoothing),
        jit_compile=jit_compile,
    )
    source, target_in, labels = (a.astype("int32") for a in common.train_batch())
    dataset = tf.data.Dataset.from_tensors(((source, target_in), labels)).repeat()
    clock = StepClock()
    total = 1 + common.WARMUP_STEPS + common.REPS * steps
    # One fit call timed at batch ends (separate fit calls wait on tf.data autotuning).
    model.fit(dataset, epochs=1, steps_per_epoch=total, verbose=0, callbacks=[clock])
    ends = clock.ends
    warm = ends[common.WARMUP_STEPS] - ends[0]
    times = [
        ends[first + steps - 1] - ends[first - 1]
        for first in (1 + common.WARMUP_STEPS + r * steps for r in range(common.REPS))
    ]
    return common.train_result(size, warm, times, steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(common.SIZES), default="small")
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--steps", type=int, help="timed steps per repetition")
    parser.add_argument("--out", help="append the JSON line to this file")
    args = parser.parse_args()

    ceiling = matmul_ceiling_gflops()
    train = train_throughput(args.size, args.jit, args.steps or common.TRAIN_STEPS[args.size])
    train["mfu_percent"] = round(100 * train["achieved_gflops"] / ceiling, 1)
    record = common.base_record(
        "keras_transformer",
        "jit" if args.jit else "no_jit",
        args.size,
        {"matmul_ceiling_gflops_tf_xla": round(ceiling, 1), "train": train},
    )
    common.emit(record, args.out)


if __name__ == "__main__":
    main()
