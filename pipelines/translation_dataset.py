"""The training input of §5.1 as one tf.data pipeline of small transforms.

    read (validated) → shard → shuffle → tokenize in the graph, a chunk of pairs at a time
    → add BOS/EOS → bucket by token budget (dropping pairs over the maximum length) → prefetch

Elements are `((source_ids, target_in_ids), target_out_ids)`, int32, padded with PAD = 0:
source = tokens + [EOS], target_in = [BOS] + tokens, target_out = tokens + [EOS].
"""

import logging

import numpy as np
import tensorflow as tf

from pipelines.batching import CHUNK_PAIRS, bucket_by_token_budget, pair_lengths_of_chunk
from pipelines.corpus import read_parallel_corpus
from pipelines.tokenizer import BOS_ID, EOS_ID

logger = logging.getLogger(__name__)


def add_boundary_tokens(source, target):
    """Token ids, ragged `[pairs, (tokens)]` → `((source + EOS, BOS + target), target + EOS)`."""

    def column(token_id):
        return tf.RaggedTensor.from_tensor(
            tf.fill([source.nrows(), 1], token_id), row_splits_dtype=source.row_splits.dtype
        )

    eos, bos = column(EOS_ID), column(BOS_ID)
    return (tf.concat([source, eos], 1), tf.concat([bos, target], 1)), tf.concat([target, eos], 1)


def tokenize_pairs(tokenizer):
    """Text pairs → chunks of the model's elements (`pipelines.batching`'s chunked stream)."""

    def transform(dataset):
        return dataset.batch(CHUNK_PAIRS).map(
            lambda source, target: add_boundary_tokens(
                tokenizer.tokenize(source), tokenizer.tokenize(target)
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )

    return transform


def make_translation_dataset(
    source_path,
    target_path,
    tokenizer,
    batch_tokens=4096,
    max_length=256,
    shuffle=True,
    seed=None,
    num_shards=1,
    shard_index=0,
    repeat=False,
    deterministic=None,
    boundaries=None,
    pad_batches=False,
):
    """Bucketed, padded batches of a parallel corpus (see the module docstring).

    Args:
        source_path, target_path: aligned text files, plain or .gz.
        tokenizer: a `SubwordTokenizer`.
        batch_tokens: positions per batch and side, padding included.
        max_length: pairs whose longer side (with BOS/EOS) is longer are dropped
            (`count_over_length` counts them; `train` logs the count).
        shuffle, seed: shuffle the pairs each pass (with `seed`, the same order every run).
        num_shards, shard_index: this input pipeline's share of the pairs (distributed input).
        repeat: repeat forever, reshuffling each pass; batches are then always full.
        deterministic: keep element order under parallel maps (default: when `seed` is set).
        boundaries, pad_batches: the length buckets and whether a finite pass pads its last
            batches to full size (see `bucket_by_token_budget`); fixed shapes for XLA.
    """
    corpus = read_parallel_corpus(source_path, target_path)
    dataset = tf.data.Dataset.from_tensor_slices((corpus.source, corpus.target))
    dataset = dataset.shard(num_shards, shard_index)
    if shuffle:
        dataset = dataset.shuffle(len(corpus), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.apply(tokenize_pairs(tokenizer)).apply(
        bucket_by_token_budget(batch_tokens, max_length, boundaries, pad_batches)
    )
    options = tf.data.Options()
    options.deterministic = seed is not None if deterministic is None else deterministic
    # Sharding is done above, by pairs; tf.distribute must not shard again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def pair_lengths(source_path, target_path, tokenizer) -> np.ndarray:
    """The bucketing length (longer side, with BOS/EOS) of every pair of a corpus."""
    corpus = read_parallel_corpus(source_path, target_path)
    dataset = tf.data.Dataset.from_tensor_slices((corpus.source, corpus.target))
    chunks = dataset.apply(tokenize_pairs(tokenizer))
    lengths = chunks.map(lambda inputs, target_out: pair_lengths_of_chunk(*inputs))
    return np.concatenate([[], *lengths.as_numpy_iterator()]).astype(np.int64)


def count_over_length(source_path, target_path, tokenizer, max_length) -> int:
    """Pairs that `make_translation_dataset` drops for exceeding `max_length`."""
    return int(np.sum(pair_lengths(source_path, target_path, tokenizer) > max_length))
