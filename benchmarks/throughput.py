"""Training and decoding throughput of our Transformer on the peers' workload.

Table: docs/PERFORMANCE.md#speed-against-peers (our rows of the peers' runs).

Same model sizes, batch (64 × 24+24 tokens, vocabulary 8000, tied), label-smoothed loss, Adam
with a constant 1e-4, and timing protocol (1 compile step, 3 warm-up steps, 3 repetitions of N
timed steps, median) as the peer scripts (../shared/peers/README.md). For `small` it also
decodes the peers' batch (32 sources of 24 ids, exactly 24 new tokens) greedily and with beam 4,
both with the decoding cache. Prints one JSON line in the peers' format (their `report.py`
tabulates it) with train tokens/s and model FLOPs utilisation against the matmul ceiling
measured in the same process.

`--precision mixed_bfloat16` trains under Keras's mixed-precision policy instead (training
only, and not the peers' workload, which is float32): on CPUs with AMX, TensorFlow's oneDNN
kernels multiply bfloat16 several times faster than float32, while XLA on CPU does not use
AMX, so that figure is taken with `--no-jit`. The record then also holds the bfloat16 matmul
ceiling of the same mode.

    .venv/bin/python benchmarks/throughput.py --size small [--no-jit] [--out results.jsonl]
    .venv/bin/python benchmarks/throughput.py --size base --precision mixed_bfloat16 --no-jit
"""

import argparse
import time

import keras
import tensorflow as tf
from decoding import measure
from workload import common, machine_description, matmul_ceiling_gflops, workload_config

from keras_transformer import Transformer
from keras_transformer.objectives.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.training_run import PRECISIONS


class StepClock(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


def compiled_workload_model(size: str, jit_compile: bool):
    """Our Transformer compiled with the peers' loss and optimizer, and their batch, repeated."""
    config = workload_config(size)
    model = Transformer(config)
    adam = common.ADAM
    model.compile(
        optimizer=keras.optimizers.Adam(adam["lr"], adam["beta1"], adam["beta2"], adam["eps"]),
        loss=LabelSmoothedCrossEntropy(config.label_smoothing),
        jit_compile=jit_compile,
    )
    source, target_in, labels = (a.astype("int32") for a in common.train_batch())
    return model, tf.data.Dataset.from_tensors(((source, target_in), labels)).repeat()


def train_throughput(size: str, jit_compile: bool, steps: int) -> dict:
    model, dataset = compiled_workload_model(size, jit_compile)
    clock = StepClock()
    total = 1 + common.WARMUP_STEPS + common.REPS * steps
    # One fit call timed at batch ends (separate fit calls wait on tf.data autotuning).
    model.fit(dataset, epochs=1, steps_per_epoch=total, shuffle=False, verbose=0, callbacks=[clock])
    ends = clock.ends
    warm = ends[common.WARMUP_STEPS] - ends[0]
    times = [
        ends[first + steps - 1] - ends[first - 1]
        for first in (1 + common.WARMUP_STEPS + r * steps for r in range(common.REPS))
    ]
    # What Keras compiled, as the peers report it: it turns XLA off silently in some cases.
    return {
        **common.train_result(size, warm, times, steps),
        "effective_jit_compile": model.jit_compile,
    }


def decode_throughput(jit_compile: bool) -> dict:
    """Greedy and beam-4 cached decoding of the peers' batch with the `small` model."""
    tf.keras.utils.set_random_seed(common.SEED)
    model = Transformer(workload_config("small"))
    records = {}
    for key, beam in (("decode", 1), ("decode_beam4", 4)):
        result = measure(model, common.DEC_BATCH, beam, cached=True, jit_compile=jit_compile)
        records[key] = {**result, "kv_cache": True}
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(common.SIZES), default="small")
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--steps", type=int, help="timed steps per repetition")
    parser.add_argument("--precision", choices=PRECISIONS, default="float32")
    parser.add_argument("--out", help="append the JSON line to this file")
    args = parser.parse_args()

    ceiling = matmul_ceiling_gflops()
    record = {
        "matmul_ceiling_gflops_tf_xla": round(ceiling, 1),
        "precision": args.precision,
        "machine": machine_description(),
    }
    variant = "jit" if args.jit else "no_jit"
    if args.precision != "float32":
        # MFU against what this precision's products can reach in the same mode.
        compute_dtype = args.precision.removeprefix("mixed_")
        ceiling = matmul_ceiling_gflops(dtype=compute_dtype, jit_compile=args.jit)
        record[f"matmul_ceiling_gflops_{compute_dtype}_{variant}"] = round(ceiling, 1)
        variant += f" {args.precision}"
        keras.mixed_precision.set_global_policy(args.precision)
    train = train_throughput(args.size, args.jit, args.steps or common.TRAIN_STEPS[args.size])
    train["mfu_percent"] = round(100 * train["achieved_gflops"] / ceiling, 1)
    record["train"] = train
    if args.size == "small" and args.precision == "float32":
        record.update(decode_throughput(args.jit))
    common.emit(common.base_record("keras_transformer", variant, args.size, record), args.out)


if __name__ == "__main__":
    main()
