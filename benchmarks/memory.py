"""Peak resident memory: training `base` at its token budget, and decoding against output length.

Table: docs/PERFORMANCE.md#memory.

Every figure comes from a fresh child process (its own `ru_maxrss`), so no measurement inherits
another's peak:

- `train`: `keras-transformer train --preset base` on Multi30k EN→DE for a few steps at the
  preset's default batch of 25,000 tokens a side (§5.1), as a user runs it, or at
  `--train-batch-tokens`; `--train-accumulate N` splits each batch into N accumulated
  micro-batches (the same update in less memory).
- `decode`: greedy and beam-4 cached decoding of the peers' batch (32 sources of 24 ids) by the
  `small` model, for outputs of growing length. The decoding cache is preallocated for the whole
  output (keys and values of every decoder layer, `batch × beam × length × d_model` each), so
  memory may grow by that cache and no more, and repeated calls must not grow it at all. Each
  line prints the cache's bytes beside the peak, the growth over repeated calls, and Python's own
  heap peak during them (`tracemalloc`), which stays flat because the steps run inside one graph
  loop. (An untrained model never ends a sentence early, so every call decodes the full length;
  beam search also reorders the whole cache every step, so its time grows with the square of the
  length.)

    .venv/bin/python benchmarks/memory.py [--train-steps 3] [--train-accumulate N]
        [--lengths 48 192 768]
        [--beam-lengths 48 192] [--out F]
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DECODE_BATCH = 32


def max_rss_mib(who=resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


def train_peak(data_dir: Path, steps: int, jit_compile: bool, batch_tokens, accumulate) -> dict:
    """Peak RSS of a `train --preset base` child process over `steps` steps (run with
    `/usr/bin/time -v`, so that a child killed for memory still reports its peak)."""
    with tempfile.TemporaryDirectory() as output:
        command = [
            *("/usr/bin/time", "-v", sys.executable),
            *("-m", "keras_transformer", "train", "--preset", "base"),
            *("--data-dir", str(data_dir), "--output", output, "--max-steps", str(steps)),
            *("--checkpoint-every", str(steps), "--bleu-every", "0"),
            "--jit-compile" if jit_compile else "--no-jit-compile",
            *(("--batch-tokens", str(batch_tokens)) if batch_tokens else ()),
            *("--accumulate", str(accumulate)),
        ]
        completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    peak_kib = re.search(r"Maximum resident set size \(kbytes\): (\d+)", completed.stderr)
    record = {
        "what": "train base",
        "batch_tokens": batch_tokens or "preset (25,000)",
        "accumulate": accumulate,
        "jit_compile": jit_compile,
        "peak_rss_mib": round(int(peak_kib.group(1)) / 1024) if peak_kib else None,
    }
    if "Command terminated by signal 9" in completed.stderr:
        record["outcome"] = "killed by signal 9 (out of memory)"
    elif completed.returncode:
        raise SystemExit(f"training failed:\n{completed.stderr[-4000:]}")
    return record


REPEATS = 3


def decode_child(length: int, beam_size: int) -> dict:
    """In this (child) process: decode outputs of `length` tokens and report memory."""
    import tracemalloc

    import tensorflow as tf
    from decoding import decode_sources
    from workload import common, workload_config

    from keras_transformer import Transformer
    from keras_transformer.decoding.search import beam_decode, greedy_decode

    tf.keras.utils.set_random_seed(common.SEED)
    config = workload_config("small").replace(max_length=max(length, 256))
    model = Transformer(config)
    source = decode_sources(DECODE_BATCH)
    extra = length - int(source.shape[1])

    @tf.function(jit_compile=True)
    def decode(source):
        if beam_size == 1:
            return tf.reduce_sum(greedy_decode(model, source, extra_length=extra).lengths)
        return tf.reduce_sum(beam_decode(model, source, beam_size, 0.6, extra).lengths[:, 0])

    generated = int(decode(source))  # traces and compiles
    after_first = max_rss_mib()
    tracemalloc.start()
    for _ in range(REPEATS):
        decode(source).numpy()
    python_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    cache_bytes = 2 * config.num_layers * DECODE_BATCH * beam_size * length * config.d_model * 4
    return {
        "what": f"decode {'greedy' if beam_size == 1 else f'beam {beam_size}'}",
        "output_length": length,
        "generated_tokens": generated,
        "cache_mib": round(cache_bytes / 2**20, 1),
        "peak_rss_mib": round(max_rss_mib()),
        f"growth_over_{REPEATS}_calls_mib": round(max_rss_mib() - after_first, 1),
        "python_heap_peak_kib": round(python_peak / 1024, 1),
    }


def run_child(length: int, beam_size: int) -> dict:
    command = [sys.executable, __file__, "--child", str(length), str(beam_size)]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode:
        raise SystemExit(f"decoding child failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared/data/multi30k")
    parser.add_argument("--train-steps", type=int, default=3, help="0 skips training")
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--train-batch-tokens", type=int, help="default: the preset's")
    parser.add_argument("--train-accumulate", type=int, default=1, help="micro-batches an update")
    parser.add_argument("--lengths", type=int, nargs="*", default=[48, 192, 768])
    parser.add_argument("--beam-lengths", type=int, nargs="*", default=[48, 192])
    parser.add_argument("--out", type=Path, help="append the JSON lines to this file")
    parser.add_argument("--child", type=int, nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(decode_child(*args.child)))
        return

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    measurements = [(run_child, (length, 1)) for length in args.lengths]
    measurements += [(run_child, (length, 4)) for length in args.beam_lengths]
    if args.train_steps:
        train = (
            args.data_dir,
            args.train_steps,
            args.jit,
            args.train_batch_tokens,
            args.train_accumulate,
        )
        measurements.append((train_peak, train))
    for measure, arguments in measurements:
        line = json.dumps(measure(*arguments))
        print(line, flush=True)
        if args.out:
            with args.out.open("a") as out:
                out.write(line + "\n")


if __name__ == "__main__":
    main()
