"""Training and decoding speed of `base` and `big` on JAX, for a GPU: tokens/s and MFU.

Table: docs/PERFORMANCE.md#gpus.

Needs JAX, Keras and numpy only (the model core imports no TensorFlow), so it runs on a GPU
machine whose image has JAX but no TensorFlow. Batches are synthetic: random ids at the paper's
token budget (§5.1, ~25,000 source and ~25,000 target tokens a batch), every sentence
`--length` tokens, so no position is padding.

For each preset and precision (float32; bfloat16, Keras's `mixed_bfloat16` policy: bfloat16
compute, float32 weights) it times `train_on_batch` (Adam and Eq. 3, label smoothing, as
`train` compiles them) after warm-up steps, and prints:

- training target tokens/s (each target token comes with one source token);
- MFU: model FLOPs/s over the chip's peak (`PEAK_TFLOPS`; float32 matmuls run on the tensor
  cores as TF32, XLA's default precision on these GPUs). Model FLOPs of one step
  (`training_flops`) are 3× the forward pass's (the backward pass costs twice the forward):
  2 FLOPs a multiply-add of every weight matrix at every position that uses it, which is
  the usual 6 · parameters · tokens without the embedding lookups, plus attention's two
  products, QKᵀ and AV, 4 · d_model FLOPs a query-key pair, over every pair computed (the
  causal half that the mask discards included, as the chip computes it);
- cached greedy decoding, target tokens/s: `Transformer.greedy_ids`, one compiled loop over
  `decode_step` for `--decode-batch` sentences.

`--smoke` runs the `tiny` preset for a few steps on whatever JAX finds (a CPU here); the test
suite runs it so that the script keeps working between GPU runs. The record of a full run goes to
benchmarks/results/gpu-<UTC timestamp>.jsonl (`--out`); figures belong in docs/PERFORMANCE.md.

    python benchmarks/gpu.py                 # sized for under 8 minutes on one H100/H200-class GPU
    python benchmarks/gpu.py --smoke --out -
"""

import os

os.environ["KERAS_BACKEND"] = "jax"  # a script: Keras has not been imported yet

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from keras_transformer.config import TransformerConfig  # noqa: E402
from keras_transformer.model import Transformer  # noqa: E402
from keras_transformer.objectives.losses import LabelSmoothedCrossEntropy  # noqa: E402
from keras_transformer.training.optimizer import create_optimizer  # noqa: E402

PAPER_BATCH_TOKENS = 25_000
# Dense peak TFLOP/s by chip (the device name contains the key): bfloat16 and TF32 tensor-core
# figures of NVIDIA's data sheets, SXM parts, without sparsity.
PEAK_TFLOPS = {
    "H200": {"bfloat16": 989.4, "float32": 494.7},
    "H100": {"bfloat16": 989.4, "float32": 494.7},
    "A100": {"bfloat16": 312.0, "float32": 156.0},
}
POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}


def training_flops(config: TransformerConfig, batch: int, length: int) -> float:
    """Model FLOPs of one training step on `batch` pairs of `length` tokens a side (see the
    module docstring)."""
    d, d_ff, n = config.d_model, config.d_ff, config.num_layers
    attention_projections = 2 * d * config.num_heads * (config.d_k + config.d_v)
    feed_forward = 2 * d * d_ff
    tokens = batch * length
    # Multiply-adds a position: encoder layers; decoder self-attention, cross-attention's
    # query and output, feed-forward; cross-attention's keys and values per source position;
    # the output projection per target position.
    encoder = n * (attention_projections + feed_forward)
    cross_query_output = d * config.num_heads * (config.d_k + config.d_v)
    cross_key_value = n * cross_query_output
    decoder = n * (attention_projections + cross_query_output + feed_forward)
    output = d * config.output_vocab_size
    multiply_adds = tokens * (encoder + cross_key_value + decoder + output)
    # Three attentions a layer pair (encoder self, decoder self, cross), each over length²
    # query-key pairs a sentence, d_k + d_v multiply-adds a pair and head for QKᵀ and AV.
    multiply_adds += n * 3 * batch * length**2 * config.num_heads * (config.d_k + config.d_v)
    return 3 * 2 * multiply_adds


def chip_peak(precision: str) -> tuple[str, float | None]:
    """The first device's name and its peak TFLOP/s at `precision` (None when unknown)."""
    name = jax.devices()[0].device_kind
    for chip, peaks in PEAK_TFLOPS.items():
        if chip in name:
            return name, peaks[precision]
    return name, None


def synthetic_pairs(config: TransformerConfig, batch: int, length: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, config.output_vocab_size, size=(3, batch, length), dtype="int32")
    return (ids[0], ids[1]), ids[2]


def time_training(config, batch, length, steps, warmup) -> float:
    """Seconds a training step, on average over `steps` after `warmup` (compilation)."""
    model = Transformer(config)
    model.compile(
        optimizer=create_optimizer(config),
        loss=LabelSmoothedCrossEntropy(config.label_smoothing),
        jit_compile=True,
    )
    inputs, targets = synthetic_pairs(config, batch, length)
    for _ in range(warmup):
        model.train_on_batch(inputs, targets)  # returns the loss as a float: the step is done
    start = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch(inputs, targets)
    return (time.perf_counter() - start) / steps


def time_decoding(config, batch, length, repeats) -> float:
    """Seconds for one cached greedy decoding of `batch` sentences, `length` positions each
    (sources of `length` tokens), compiled once: the weights enter as arguments, not constants."""
    model = Transformer(config)
    (source, _), _ = synthetic_pairs(config, batch, length, seed=1)
    start_ids = np.ones(batch, "int32")

    @jax.jit
    def decode(values, source):
        with keras.StatelessScope(state_mapping=list(zip(model.variables, values, strict=True))):
            return model.greedy_ids(source, start_ids, length)

    values = [v.value for v in model.variables]
    decode(values, source).block_until_ready()
    start = time.perf_counter()
    for _ in range(repeats):
        decode(values, source).block_until_ready()
    return (time.perf_counter() - start) / repeats


def measure(preset, precision, args) -> dict:
    keras.mixed_precision.set_global_policy(POLICIES[precision])
    try:
        config = TransformerConfig.preset(preset)
        batch = max(1, args.batch_tokens // args.length)
        step = time_training(config, batch, args.length, args.steps, args.warmup)
        decoding = time_decoding(config, args.decode_batch, args.decode_length, args.repeats)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    device, peak = chip_peak(precision)
    flops = training_flops(config, batch, args.length) / step
    return {
        "preset": preset,
        "precision": precision,
        "device": device,
        "batch": batch,
        "length": args.length,
        "step_s": round(step, 4),
        "train_target_tokens_per_s": round(batch * args.length / step),
        "model_tflops_per_s": round(flops / 1e12, 2),
        "mfu": round(flops / (peak * 1e12), 4) if peak else None,
        "decode_batch": args.decode_batch,
        "decode_length": args.decode_length,
        "decode_tokens_per_s": round(args.decode_batch * args.decode_length / decoding),
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["base", "big"])
    parser.add_argument("--precisions", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--batch-tokens", type=int, default=PAPER_BATCH_TOKENS)
    parser.add_argument("--length", type=int, default=64, help="tokens a sentence, each side")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation)")
    parser.add_argument("--decode-batch", type=int, default=64)
    parser.add_argument("--decode-length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed decodings")
    parser.add_argument("--smoke", action="store_true", help="tiny preset, few steps, any device")
    parser.add_argument("--out", help="the record's path; '-' for none")
    args = parser.parse_args(argv)
    if args.smoke:
        args.presets, args.batch_tokens, args.length = ["tiny"], 256, 16
        args.steps, args.warmup, args.decode_batch, args.decode_length = 2, 1, 4, 8
        args.repeats = 1
    return args


def main(argv=None):
    args = parse_args(argv)
    records = []
    for preset in args.presets:
        for precision in args.precisions:
            record = measure(preset, precision, args)
            records.append(record)
            mfu = f"{record['mfu']:.1%}" if record["mfu"] is not None else "n/a (unknown chip)"
            print(
                f"{preset:5s} {precision:9s} train {record['train_target_tokens_per_s']:>9,} "
                f"target tok/s ({record['batch']}x{record['length']}, {record['step_s']:.3f} s "
                f"a step), {record['model_tflops_per_s']:.1f} TFLOP/s, MFU {mfu}; "
                f"greedy decode {record['decode_tokens_per_s']:,} tok/s on {record['device']}",
                flush=True,
            )
    if args.out == "-":
        return
    now = datetime.datetime.now(datetime.UTC)
    out = Path(args.out or REPO / f"benchmarks/results/gpu-{now:%Y-%m-%dT%H%MZ}.jsonl")
    stamp = {"benchmark": "gpu", "date": now.isoformat(timespec="seconds")}
    versions = {"jax": jax.__version__, "keras": keras.__version__}
    out.write_text("".join(json.dumps({**stamp, **versions, **r}) + "\n" for r in records))
    print(f"record: {out}")


if __name__ == "__main__":
    main()
