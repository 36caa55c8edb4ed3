"""Decoding speed of the `small` model: greedy and beam 4, cached vs. uncached, batch 1 and 64.

Table: docs/PERFORMANCE.md#speed-against-peers, through `throughput.py`, which times the peers'
decoding batch with its `measure`.

Batches are decoded as `Translator` decodes them: cut into one slice per CPU core, decoded side
by side (`--slices 1` decodes each batch whole, for comparison).

The peers' decode workload (../shared/peers/README.md): random source ids of length 24, exactly 24
generated tokens (input length + 0 extra, and an untrained model that never picks EOS first), the
`small` sizes with vocabulary 8000, and their timing protocol (3 warm-up calls, then 3
repetitions of 3 calls, median). Prints one JSON line per setting with sentences/s, generated
tokens/s (tokens actually generated, read from the result) and the median seconds per call.

    .venv/bin/python benchmarks/decoding.py [--jit] [--batches 1 64] [--slices N] [--out FILE]

`--intra-op-threads 1` runs every operation (and each XLA program) on one thread, so that each
slice of a batch has its own core instead of sharing both cores' thread pool with the other
slice (docs/PERFORMANCE.md: greedy gains, beam 4 and batch 1 lose, so it is not the default).
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np
import tensorflow as tf
from workload import (
    add_intra_op_threads_option,
    common,
    set_intra_op_threads,
    workload_config,
)

from keras_transformer import Transformer
from keras_transformer.decoding.search import (
    beam_decode,
    decode_side_by_side,
    greedy_decode,
    side_by_side_slices,
)


def decoder(model, beam_size, cached, jit_compile, slices=None):
    """A `tf.function` returning the generated-token count of one decode of a batch, decoded as
    `Translator` decodes: in slices side by side, one per core (`slices=1`: as one batch)."""

    def lengths(source):
        if beam_size == 1:
            return greedy_decode(model, source, extra_length=0, cached=cached).lengths
        result = beam_decode(model, source, beam_size, 0.6, extra_length=0, cached=cached)
        return result.lengths[:, 0]

    search = tf.function(lengths, jit_compile=jit_compile)
    return tf.function(
        lambda source: tf.reduce_sum(decode_side_by_side(search, source, slices=slices))
    )


def decode_sources(batch):
    """The peers' decode batch (32 × 24 random ids), cut or extended with more of the same kind."""
    sources = common.decode_batch()
    if batch > len(sources):
        rng = np.random.default_rng(common.SEED + 2)
        extra = rng.integers(common.LOW, common.VOCAB, (batch - len(sources), sources.shape[1]))
        sources = np.concatenate([sources, extra])
    return tf.constant(sources[:batch], tf.int32)


def measure(model, batch, beam_size, cached, jit_compile, slices=None) -> dict:
    source = decode_sources(batch)
    run = decoder(model, beam_size, cached, jit_compile, slices)

    def calls(count):
        return [int(run(source)) for _ in range(count)]

    start = time.perf_counter()
    calls(common.DEC_WARMUP_CALLS)
    warm = time.perf_counter() - start
    times, generated = [], 0
    for _ in range(common.REPS):
        start = time.perf_counter()
        generated = calls(common.DEC_CALLS_PER_REP)
        times.append(time.perf_counter() - start)
    median = statistics.median(times) / common.DEC_CALLS_PER_REP
    return {
        "search": "greedy" if beam_size == 1 else f"beam{beam_size}",
        "cached": cached,
        "batch": batch,
        "jit_compile": jit_compile,
        "slices": side_by_side_slices(batch, slices),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "warmup_s": round(warm, 2),
        "calls_per_rep": common.DEC_CALLS_PER_REP,
        "rep_seconds": [round(seconds, 4) for seconds in times],
        "call_s_median": round(median, 4),
        "sentences_per_s": round(batch / median, 1),
        "generated_tokens_per_s": round(generated[-1] / median, 1),
        "mean_new_tokens": generated[-1] / batch,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--uncached", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--slices", type=int, help="slices of a batch decoded side by side (default: one per core)"
    )
    add_intra_op_threads_option(parser)
    parser.add_argument("--out", help="append the JSON lines to this file")
    args = parser.parse_args()

    set_intra_op_threads(args)
    tf.keras.utils.set_random_seed(common.SEED)
    model = Transformer(workload_config("small"))
    for batch in args.batches:
        for beam in args.beams:
            for cached in (True, False) if args.uncached else (True,):
                record = measure(model, batch, beam, cached, args.jit and cached, args.slices)
                line = json.dumps(record)
                print(line, flush=True)
                if args.out:
                    with open(args.out, "a") as file:
                        file.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
