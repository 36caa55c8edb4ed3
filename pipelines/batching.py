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

import math
from fractions import Fraction

import numpy as np
import tensorflow as tf

from pipelines.tokenizer import PAD_ID


def pair_length(source, target_in):
    """The length that decides a pair's bucket: its longer side."""
    return tf.maximum(tf.shape(source)[0], tf.shape(target_in)[0])


def bucket_boundaries(max_length, coarse_from=32, coarse_step=8):
    """Upper bounds (exclusive) of the length buckets: every length up to `coarse_from`, then
    every `coarse_step`, then max_length + 1. Short buckets are fine-grained because most
    sentences are short."""
    fine = list(range(2, min(coarse_from, max_length) + 1))
    coarse = list(range(fine[-1] + coarse_step if fine else 2, max_length + 1, coarse_step))
    return sorted(set(fine + coarse + [max_length + 1]))


def bucket_batch_sizes(boundaries, batch_tokens):
    """Pairs per batch for each bucket (and the overflow bucket, unused after filtering)."""
    sizes = [max(1, batch_tokens // (boundary - 1)) for boundary in boundaries]
    return sizes + [sizes[-1]]


def full_batches_per_pass(lengths, batch_tokens, max_length, boundaries=None):
    """How many full batches (`bucket_by_token_budget` on repeated data) carry one pass over
    pairs of these bucketing `lengths`: each bucket's pairs over its batch size, summed, rounded
    up. Fewer than a finite pass's batches, whose every bucket ends in a smaller one; and the same
    whatever the order of the pairs.

    Example (batches of 8 pairs up to length 4, of 2 pairs up to 16; a finite pass makes 1 + 2):
    >>> full_batches_per_pass([3, 3, 3, 9, 9, 9], 32, max_length=16, boundaries=[5, 17])
    2
    """
    boundaries = boundaries or bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, batch_tokens)
    buckets = np.searchsorted(boundaries, np.asarray(lengths), side="right")
    pairs = np.bincount(buckets, minlength=len(sizes))
    # Exact fractions: a float sum of 1/size per pair can land just above a whole number of
    # batches and round up to one batch too many.
    return math.ceil(sum(Fraction(int(n), size) for n, size in zip(pairs, sizes, strict=True)))


def filter_max_length(max_length):
    """Drops pairs whose longer side (with BOS/EOS) exceeds `max_length`."""

    def transform(dataset):
        return dataset.filter(lambda x, y: pair_length(*x) <= max_length)

    return transform


def fitted_bucket_boundaries(lengths, num_buckets, max_length):
    """The `num_buckets` boundaries that pad a corpus least, plus one catch-all up to `max_length`.

    Under XLA every bucket is one compiled shape, so the number of buckets is fixed and their
    limits are chosen from the pair lengths of the training data: dynamic programming over the
    length histogram minimises the positions used when each pair pads to its bucket's limit. The
    catch-all bucket takes longer pairs of other splits (never seen in training, so never
    compiled there).

    Example:
    >>> fitted_bucket_boundaries([3, 3, 4, 9, 10, 10], num_buckets=2, max_length=16)
    [5, 11, 17]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        raise ValueError("fitted_bucket_boundaries needs at least one pair length")
    if lengths.max() > max_length:
        raise ValueError(f"pair length {lengths.max()} exceeds max_length {max_length}")
    values, counts = np.unique(lengths, return_counts=True)
    pairs_up_to = np.concatenate([[0], np.cumsum(counts)])
    buckets = min(num_buckets, len(values))
    # cost[k][j]: fewest positions for values[:j] in k buckets; the last bucket's limit is
    # values[j - 1], and it holds the pairs after the previous bucket's end i.
    cost = np.full((buckets + 1, len(values) + 1), np.inf)
    cost[0][0] = 0.0
    start = np.zeros((buckets + 1, len(values) + 1), dtype=np.int64)
    for k in range(1, buckets + 1):
        for j in range(1, len(values) + 1):
            i = np.arange(j)
            total = cost[k - 1][i] + values[j - 1] * (pairs_up_to[j] - pairs_up_to[i])
            start[k][j], cost[k][j] = int(np.argmin(total)), float(np.min(total))
    limits, j = [], len(values)
    for k in range(buckets, 0, -1):
        limits.append(int(values[j - 1]))
        j = start[k][j]
    return sorted({limit + 1 for limit in limits} | {max_length + 1})


def bucket_by_token_budget(batch_tokens, max_length, boundaries=None, pad_batches=False):
    """Groups pairs of similar length into batches of at most `batch_tokens` per side.

    Args:
        batch_tokens: positions per batch and side, padding included.
        max_length: the longest pair (with BOS/EOS).
        boundaries: bucket limits (exclusive); default one bucket per length, which pads least.
            Under XLA pass few (`fitted_bucket_boundaries`): each is one compiled shape.
        pad_batches: also pad each bucket's last, smaller batch with all-PAD rows to the
            bucket's full batch, so a finite dataset (validation) has one shape per bucket too.
            PAD rows carry no loss and no metric.
    """
    boundaries = boundaries or bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, batch_tokens)

    def pad_rows(inputs, target_out):
        source, target_in = inputs
        rows = batch_tokens // tf.shape(source)[1]
        missing = [[0, tf.maximum(rows - tf.shape(source)[0], 0)], [0, 0]]
        pad = lambda t: tf.pad(t, missing, constant_values=PAD_ID)  # noqa: E731
        return (pad(source), pad(target_in)), pad(target_out)

    def transform(dataset):
        dataset = dataset.bucket_by_sequence_length(
            element_length_func=lambda x, y: pair_length(*x),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=sizes,
            padded_shapes=(([None], [None]), [None]),
            padding_values=((PAD_ID, PAD_ID), PAD_ID),
            pad_to_bucket_boundary=True,
        )
        return dataset.map(pad_rows) if pad_batches else dataset

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
