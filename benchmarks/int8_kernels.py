"""int8 matrix products on CPU against float32: which kernel, if any, makes int8 pay.

Table: docs/PRETRAINED_PERFORMANCE.md#int8-kernels.

One product `x [M, K] @ w [K, N]` at each shape of `--shapes` (a projection of the model: the
output projection of OPUS-MT en-de is 512×58101), through each path a `--quantize int8` could
take, the paths alternated in one run (their order reversed from repeat to repeat) so that the
machine's drift falls on all of them alike:

- `float32`, `float32 XLA`: `tf.matmul` in a `tf.function`, as a plain graph and compiled by XLA
  (`jit_compile=True`); the baselines.
- `int8 matmul`, `int8 matmul XLA`: what Keras 3's int8 `Dense` computes
  (`Dense._int8_call`): the weights quantized once, per output channel, the activations per row
  at each call (absolute maximum to 127), `tf.matmul(int8, int8, output_type=tf.int32)`, the
  result scaled back to float32.
- `Keras Dense int8`: `keras.layers.Dense(N).quantize("int8")` called in a `tf.function`, as a
  user would try it.
- `weight-only dequantize`, `weight-only dequantize XLA`, `weight-only scale after`: the weights
  stored as int8 with a float32 scale per output channel, the arithmetic float32's: the weights
  turned back into float32 at each call before `tf.matmul`, or `matmul(x, float32(w_int8))`
  with the scales applied to its result.
- `LiteRT float32`, `LiteRT int8`: a model of the one product (a `FULLY_CONNECTED`) converted
  with `tf.lite.TFLiteConverter`, as float32 and with dynamic-range quantization
  (`tf.lite.Optimize.DEFAULT`: int8 weights, activations quantized on the fly), run by
  `ai_edge_litert`'s interpreter with its default XNNPACK delegate; the time of `set_tensor`
  and `invoke`, the output read in place.

Each repeat times each path over enough calls to last `--seconds`; a figure is the time of a
call, its median and range over the repeats. Each path's speed is given against `float32`, and
against its own float32 (XLA's against `float32 XLA`, LiteRT's against `LiteRT float32`); its
error is the largest absolute difference from `float32`'s output over that output's largest
absolute value. TensorFlow and LiteRT get `--threads` threads each; oneDNN is as the CLI sets
it (`runtime.configure`) unless `TF_ENABLE_ONEDNN_OPTS` is set, and the record says which.

The record's first line is the machine and versions, then one line per shape and path.

    .venv/bin/python benchmarks/int8_kernels.py [--repeats 5] [--threads 2]
        [--shapes 64x512x2048 16x512x58101 ...] [--out benchmarks/results/int8-kernels-<UTC>.jsonl]
"""

import argparse
import datetime
import json
import os
import statistics
import time
from pathlib import Path

from records import machine, markdown_table

from keras_transformer import runtime

REPO = Path(__file__).resolve().parent.parent
SHAPES = (
    "1x512x2048",
    "64x512x2048",
    "256x512x2048",
    "256x512x32000",
    "1024x512x512",
    "16x512x58101",
    "64x512x58101",
)
# Each path's own float32 baseline.
BASELINES = {
    "float32": "float32",
    "float32 XLA": "float32 XLA",
    "int8 matmul": "float32",
    "int8 matmul XLA": "float32 XLA",
    "Keras Dense int8": "float32",
    "weight-only dequantize": "float32",
    "weight-only dequantize XLA": "float32 XLA",
    "weight-only scale after": "float32",
    "LiteRT float32": "LiteRT float32",
    "LiteRT int8": "LiteRT float32",
}
# Keras's int8 range (`quantizers.abs_max_quantize`): symmetric, -127..127.
INT8_MAX = 127.0


def parse_shape(text: str) -> tuple[int, int, int]:
    """`"MxKxN"` → (M, K, N)."""
    m, k, n = (int(size) for size in text.lower().split("x"))
    return m, k, n


def abs_max_quantize(t, axis):
    """`t` as int8 and the float32 scale of each slice along `axis` (absolute maximum to 127,
    Keras's `AbsMaxQuantizer(axis)`), kept as a dimension of 1: `t ≈ t_int8 / scale`."""
    import tensorflow as tf

    scale = INT8_MAX / (tf.reduce_max(tf.abs(t), axis=axis, keepdims=True) + 1e-7)
    return tf.cast(tf.clip_by_value(tf.round(t * scale), -INT8_MAX, INT8_MAX), tf.int8), scale


def tensorflow_paths(w) -> dict:
    """Path name → a function of `x`, each a `tf.function` over the constant weights `w`."""
    import keras
    import tensorflow as tf

    w_int8, w_scale = abs_max_quantize(w, axis=0)  # per output channel

    def float32(x):
        return tf.matmul(x, w)

    def int8_matmul(x):
        x_int8, x_scale = abs_max_quantize(x, axis=-1)  # per row, as Keras's inputs quantizer
        product = tf.matmul(x_int8, w_int8, output_type=tf.int32)
        return tf.cast(product, tf.float32) / (x_scale * w_scale)

    def dequantize(x):
        return tf.matmul(x, tf.cast(w_int8, tf.float32) / w_scale)

    def scale_after(x):
        return tf.matmul(x, tf.cast(w_int8, tf.float32)) / w_scale

    dense = keras.layers.Dense(w.shape[1], use_bias=False)
    dense.build((None, w.shape[0]))
    dense.kernel.assign(w)
    dense.quantize("int8")
    return {
        "float32": tf.function(float32),
        "float32 XLA": tf.function(float32, jit_compile=True),
        "int8 matmul": tf.function(int8_matmul),
        "int8 matmul XLA": tf.function(int8_matmul, jit_compile=True),
        "Keras Dense int8": tf.function(dense),
        "weight-only dequantize": tf.function(dequantize),
        "weight-only dequantize XLA": tf.function(dequantize, jit_compile=True),
        "weight-only scale after": tf.function(scale_after),
    }


def litert_paths(w, rows: int, threads: int) -> dict:
    """The LiteRT paths, float32 and int8 (dynamic range): each a function of `x [rows, K]`, a
    NumPy array (see `interpreter_call`)."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    module = tf.Module()
    module.product = tf.function(
        lambda x: tf.matmul(x, w), input_signature=[tf.TensorSpec([rows, w.shape[0]], tf.float32)]
    )
    paths = {}
    quantizations = {"LiteRT float32": [], "LiteRT int8": [tf.lite.Optimize.DEFAULT]}
    for name, optimizations in quantizations.items():
        converter = tf.lite.TFLiteConverter.from_concrete_functions(
            [module.product.get_concrete_function()], module
        )
        converter.optimizations = optimizations
        interpreter = Interpreter(model_content=converter.convert(), num_threads=threads)
        interpreter.allocate_tensors()
        paths[name] = interpreter_call(interpreter)
    return paths


def interpreter_call(interpreter):
    """A function of `x` that sets the input, invokes and returns the output in place (a view
    that the next call overwrites)."""
    (source,) = interpreter.get_input_details()
    (target,) = interpreter.get_output_details()

    def call(x):
        interpreter.set_tensor(source["index"], x)
        interpreter.invoke()
        return interpreter.tensor(target["index"])()

    return call


def calls_per_repeat(call, x, seconds: float) -> int:
    """Calls that last about `seconds`, from the time of one warm call (after a first one,
    which traces and compiles)."""
    call(x)
    start = time.perf_counter()
    call(x)
    return max(1, round(seconds / (time.perf_counter() - start)))


def time_per_call(call, x, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        call(x)
    return (time.perf_counter() - start) / count


def measure_shape(shape, repeats: int, seconds: float, threads: int) -> list[dict]:
    """One record per path at `shape`: seconds a call in each repeat, speed and error."""
    import numpy as np
    import tensorflow as tf

    m, k, n = shape
    generator = np.random.default_rng(0)
    x_array = generator.standard_normal((m, k), np.float32)
    w = tf.constant(generator.standard_normal((k, n), np.float32) * k**-0.5)
    x = tf.constant(x_array)
    paths = {name: (call, x) for name, call in tensorflow_paths(w).items()}
    paths |= {name: (call, x_array) for name, call in litert_paths(w, m, threads).items()}
    outputs = {}
    for name, (call, inputs) in paths.items():
        outputs[name] = np.array(call(inputs))
    counts = {
        name: calls_per_repeat(call, inputs, seconds) for name, (call, inputs) in paths.items()
    }
    times = {name: [] for name in paths}
    for repeat in range(repeats):
        order = list(paths) if repeat % 2 == 0 else list(paths)[::-1]
        for name in order:
            call, inputs = paths[name]
            times[name].append(time_per_call(call, inputs, counts[name]))
    reference = outputs["float32"]
    scale = float(np.max(np.abs(reference)))
    records = []
    for name, seconds_each in times.items():
        median = statistics.median(seconds_each)
        records.append(
            {
                "shape": "x".join(map(str, shape)),
                "path": name,
                "calls_per_repeat": counts[name],
                "ms_per_call": [round(1000 * s, 4) for s in seconds_each],
                "ms_median": round(1000 * median, 4),
                "speed_vs_float32": round(statistics.median(times["float32"]) / median, 3),
                "speed_vs_own_float32": round(
                    statistics.median(times[BASELINES[name]]) / median, 3
                ),
                "max_abs_error_over_scale": float(
                    f"{np.max(np.abs(outputs[name] - reference)) / scale:.3g}"
                ),
            }
        )
    return records


# The printed table: header → a record's cell.
COLUMNS = {
    "shape M×K×N": lambda r: r["shape"].replace("x", "×"),
    "path": lambda r: r["path"],
    "ms/call (median)": lambda r: f"{r['ms_median']:.3g}",
    "range": lambda r: f"{min(r['ms_per_call']):.3g}–{max(r['ms_per_call']):.3g}",
    "vs float32": lambda r: f"{r['speed_vs_float32']:.2f}×",
    "vs own float32": lambda r: f"{r['speed_vs_own_float32']:.2f}×",
    "max error / scale": lambda r: f"{r['max_abs_error_over_scale']:.1e}",
}


def header(threads: int) -> dict:
    """The record's first line: the machine, the versions and the settings that decide the
    kernels."""
    import keras
    import tensorflow as tf
    from ai_edge_litert import __version__ as litert_version

    return {
        **machine(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "ai_edge_litert": litert_version,
        runtime.ONEDNN_VARIABLE: os.environ.get(runtime.ONEDNN_VARIABLE),
        "threads": threads,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="MxKxN, x [M, K] @ w [K, N]")
    parser.add_argument("--threads", type=int, default=2, help="TensorFlow's and LiteRT's")
    parser.add_argument("--seconds", type=float, default=0.2, help="a path's time per repeat")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    shapes = [parse_shape(text) for text in args.shapes]
    runtime.configure()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    now = datetime.datetime.now(datetime.UTC)
    out = args.out or REPO / f"benchmarks/results/int8-kernels-{now:%Y-%m-%dT%H%MZ}.jsonl"
    records = []
    with out.open("w", encoding="utf-8") as file:
        file.write(json.dumps({**header(args.threads), "utc": f"{now:%Y-%m-%dT%H:%MZ}"}) + "\n")
        for shape in shapes:
            print(f"measuring {'×'.join(map(str, shape))} ...", flush=True)
            for record in measure_shape(shape, args.repeats, args.seconds, args.threads):
                file.write(json.dumps(record) + "\n")
                file.flush()
                records.append(record)
    print(markdown_table(records, COLUMNS))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
