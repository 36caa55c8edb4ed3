"""The training input of §5.1 as one tf.data pipeline of small transforms.

    read (validated) → shard → shuffle → tokenize in the graph, a chunk of pairs at a time
    → add BOS/EOS → bucket by token budget (dropping pairs over the maximum length) → prefetch

Elements are `((source_ids, target_in_ids), target_out_ids)`, int32, padded with PAD = 0:
source = tokens + [EOS], target_in = [BOS] + tokens, target_out = tokens + [EOS].
"""

import logging

import numpy as np
import tensorflow as tf

from pipelines.batching import CHUNK_PAIRS, BatchingSettings, pair_lengths_of_chunk
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
                tokenizer.tokenize(source), tokenizer.tokenize_target(target)
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )

    return transform


def make_translation_dataset(
    source_path, target_path, tokenizer, batching: BatchingSettings, num_shards=1, shard_index=0
):
    """Bucketed, padded batches of a parallel corpus (see the module docstring).

    Args:
        source_path, target_path: aligned text files, plain or .gz.
        tokenizer: a `SubwordTokenizer`.
        batching: the batches' `BatchingSettings`; pairs over its `max_length` are dropped
            (`count_over_length` counts them; `train` logs the count).
        num_shards, shard_index: this input pipeline's share of the pairs (distributed input;
            tf.distribute does not shard again).
    """
    corpus = read_parallel_corpus(source_path, target_path)
    dataset = tf.data.Dataset.from_tensor_slices((corpus.source, corpus.target))
    dataset = dataset.shard(num_shards, shard_index)
    if batching.shuffle:
        dataset = dataset.shuffle(len(corpus), seed=batching.seed, reshuffle_each_iteration=True)
    if batching.repeat:
        dataset = dataset.repeat()
    dataset = dataset.apply(tokenize_pairs(tokenizer)).apply(batching.bucketing())
    return dataset.with_options(batching.dataset_options()).prefetch(tf.data.AUTOTUNE)


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
