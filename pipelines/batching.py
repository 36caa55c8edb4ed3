"""Batching by approximate sequence length under a token budget (§5.1).

"Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens." Here pairs go into length buckets; a bucket's batch holds as many pairs as fit in the
budget once padded to the bucket's boundary, so every batch holds at most `batch_tokens`
positions on each side. Padding to the boundary (not to the batch's longest pair) keeps the set
of shapes small and fixed, which lets an XLA-compiled step compile once per bucket.

Each transform takes and returns a `tf.data.Dataset` of `((source, target_in), target_out)` and
is applied with `dataset.apply`.
"""

import tensorflow as tf

from pipelines.tokenizer import PAD_ID


def pair_length(source, target_in):
    """The length that decides a pair's bucket: its longer side."""
    return tf.maximum(tf.shape(source)[0], tf.shape(target_in)[0])


def bucket_boundaries(max_length, step=1, coarse_from=32, coarse_step=8):
    """Upper bounds (exclusive) of the length buckets: every `step` up to `coarse_from`, then
    every `coarse_step`, then max_length + 1. Short buckets are fine-grained because most
    sentences are short; each boundary is one compiled shape under XLA."""
    fine = list(range(1 + step, min(coarse_from, max_length) + 1, step))
    coarse = list(range(fine[-1] + coarse_step if fine else 2, max_length + 1, coarse_step))
    return sorted(set(fine + coarse + [max_length + 1]))


def bucket_batch_sizes(boundaries, batch_tokens):
    """Pairs per batch for each bucket (and the overflow bucket, unused after filtering)."""
    sizes = [max(1, batch_tokens // (boundary - 1)) for boundary in boundaries]
    return sizes + [sizes[-1]]


def filter_max_length(max_length):
    """Drops pairs whose longer side (with BOS/EOS) exceeds `max_length`."""

    def transform(dataset):
        return dataset.filter(lambda x, y: pair_length(*x) <= max_length)

    return transform


def bucket_by_token_budget(batch_tokens, max_length, bucket_width=1, drop_remainder=False):
    """Groups pairs of similar length into batches of at most `batch_tokens` per side.

    `bucket_width` is the length step of the short buckets: 1 pads least; wider buckets mean
    fewer distinct batch shapes, which matters under XLA, where each shape is compiled once.
    """
    boundaries = bucket_boundaries(max_length, step=bucket_width)

    def transform(dataset):
        return dataset.bucket_by_sequence_length(
            element_length_func=lambda x, y: pair_length(*x),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=bucket_batch_sizes(boundaries, batch_tokens),
            padded_shapes=(([None], [None]), [None]),
            padding_values=((PAD_ID, PAD_ID), PAD_ID),
            pad_to_bucket_boundary=True,
            drop_remainder=drop_remainder,
        )

    return transform


def padding_efficiency(dataset) -> float:
    """Real tokens / all positions over the source and target of every batch."""

    def count(totals, batch):
        (source, target_in), _ = batch
        real = tf.math.count_nonzero(source) + tf.math.count_nonzero(target_in)
        total = tf.size(source, tf.int64) + tf.size(target_in, tf.int64)
        return totals[0] + real, totals[1] + total

    real, total = dataset.reduce((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), count)
    return float(real) / max(float(total), 1.0)
