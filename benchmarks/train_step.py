"""The cost of one training update of a preset as `keras-transformer train` compiles it.

`train` compiles the model with the label-smoothed loss and the token metrics (accuracy,
perplexity, target tokens) that its progress bar and `metrics.jsonl` report; the peers'
workload (`throughput.py`) compiles the loss alone. This times the preset's step with XLA at one
bucket shape of its batch (`--rows` sentences of `--length` subwords, the last 3 positions of
each row padding), with the metrics and without, alternating `--rounds` times, and prints one
JSON line per measurement: the median of `--steps` steps after 3 warm-up steps, and what the
metrics add to it.

    .venv/bin/python benchmarks/train_step.py --preset multi30k --rows 512 --length 16
"""

import argparse
import json
import statistics
import time

import numpy as np

from keras_transformer import Transformer, TransformerConfig, runtime
from keras_transformer.objectives.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.optimizer import create_optimizer
from keras_transformer.training.trainer import compile_model

runtime.configure()  # as `train` runs: before any TensorFlow operation

PADDING = 3  # positions of padding at the end of every row


def batch(config, rows, length, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, config.vocab_size, (rows, length)).astype("int32")
    target = rng.integers(4, config.vocab_size, (rows, length + 1)).astype("int32")
    source[:, -PADDING:] = target[:, -PADDING:] = 0
    return (source, target[:, :-1]), target[:, 1:]


def loss_only_model(config):
    model = Transformer(config)
    model.compile(
        optimizer=create_optimizer(config, 1),
        loss=LabelSmoothedCrossEntropy(config.label_smoothing),
        jit_compile=True,
    )
    return model


def median_step_ms(model, data, steps) -> float:
    for _ in range(3):  # the first compiles
        model.train_on_batch(*data)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model.train_on_batch(*data)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="multi30k")
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    config = TransformerConfig.preset(args.preset)
    data = batch(config, args.rows, args.length)
    target_tokens = args.rows * (args.length - PADDING)
    builds = {"loss and metrics (train)": lambda: compile_model(config, jit_compile=True)}
    builds["loss only"] = lambda: loss_only_model(config)
    medians = {name: [] for name in builds}
    for _ in range(args.rounds):
        for name, build in builds.items():
            ms = median_step_ms(build(), data, args.steps)
            medians[name].append(ms)
            record = {"preset": args.preset, "batch": [args.rows, args.length], "compiled": name}
            record |= {"step_ms": round(ms), "target_tokens_per_s": round(target_tokens / ms * 1e3)}
            print(json.dumps(record), flush=True)
    with_metrics, without = (statistics.median(m) for m in medians.values())
    print(json.dumps({"metrics_add_ms": round(with_metrics - without)}))


if __name__ == "__main__":
    main()
