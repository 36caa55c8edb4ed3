"""Input pipeline speed and padding on Multi30k train (§5.1): read → tokenize → bucket → batch.

Prints one JSON line: examples/s and tokens/s (non-padding source + target ids) of full passes of
`make_translation_dataset` over the training split, and the padding efficiency (real tokens / all
positions) of token-budget bucketing against plain padded batching with the same mean batch size.
Compare tokens/s with the training throughput `benchmarks/throughput.py` prints: training must
never wait for its input.

    .venv/bin/python benchmarks/pipeline.py [--data-dir ../shared/data/multi30k] [--passes 2]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from pipelines import corpus_files, make_translation_dataset, padding_efficiency
from pipelines.tokenizer import load_or_train_tokenizer


def plain_batches(source_path, target_path, tokenizer, batch_size, max_length):
    """Shuffled pairs padded to the longest of each batch of `batch_size`, no bucketing."""
    from pipelines.batching import pair_lengths_of_chunk
    from pipelines.corpus import read_parallel_corpus
    from pipelines.translation_dataset import add_boundary_tokens

    def pad_kept(inputs, target_out):
        kept = pair_lengths_of_chunk(*inputs) <= max_length
        return tf.nest.map_structure(
            lambda side: tf.ragged.boolean_mask(side, kept).to_tensor(), (inputs, target_out)
        )

    corpus = read_parallel_corpus(source_path, target_path)
    return (
        tf.data.Dataset.from_tensor_slices((corpus.source, corpus.target))
        .shuffle(len(corpus), seed=1)
        .batch(batch_size)
        .map(lambda s, t: add_boundary_tokens(tokenizer.tokenize(s), tokenizer.tokenize(t)))
        .map(pad_kept)
    )


def timed_passes(dataset, passes):
    """Examples, real tokens and seconds of `passes` full iterations."""
    examples = tokens = 0
    start = time.perf_counter()
    for _ in range(passes):
        for (source, target_in), _ in dataset:
            examples += int(source.shape[0])
            tokens += int(tf.math.count_nonzero(source)) + int(tf.math.count_nonzero(target_in))
    return examples, tokens, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()

    files = corpus_files("multi30k", args.data_dir, "en", "de")
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = load_or_train_tokenizer(
            Path(scratch) / "subwords.model", [*files["train"]], args.vocab_size
        )
        dataset = make_translation_dataset(
            *files["train"], tokenizer, args.batch_tokens, args.max_length, seed=1
        )
        timed_passes(dataset, 1)  # warm-up: traces and the first shuffle buffer fill
        examples, tokens, seconds = timed_passes(dataset, args.passes)
        bucketed = padding_efficiency(dataset)
        mean_batch = int(np.mean([int(s.shape[0]) for (s, _), _ in dataset]))
        plain = padding_efficiency(
            plain_batches(*files["train"], tokenizer, mean_batch, args.max_length)
        )
    record = {
        "benchmark": "pipeline",
        "dataset": "multi30k train en-de",
        "batch_tokens": args.batch_tokens,
        "examples_per_s": round(examples / seconds, 1),
        "tokens_per_s": round(tokens / seconds, 1),
        "padding_efficiency_bucketed": round(bucketed, 4),
        "padding_efficiency_plain": round(plain, 4),
        "plain_batch_size": mean_batch,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
