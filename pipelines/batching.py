"""Batching by approximate sequence length under a token budget (§5.1).

"Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens." Here pairs go into length buckets; a bucket's batch holds as many pairs as fit in the
budget once padded to the bucket's boundary, so every batch holds at most `batch_tokens`
positions on each side. Padding to the boundary (not to the batch's longest pair) keeps the set
of shapes small and fixed, which lets an XLA-compiled step compile once per bucket.

Pairs travel in chunks: an element `((source, target_in), target_out)` of ragged
`[pairs, (tokens)]` holds `CHUNK_PAIRS` of them, so that tokenizing, parsing and bucketing each
cost a few ops per thousand pairs rather than per pair. `bucket_by_token_budget` turns chunks
into padded batches; it is applied with `dataset.apply`.
"""

import dataclasses
import math
from fractions import Fraction

import numpy as np
import tensorflow as tf

from pipelines.tokenizer import PAD_ID

CHUNK_PAIRS = 1024  # pairs an element of a chunked stream holds


@dataclasses.dataclass(frozen=True)
class BatchingSettings:
    """How a split's pairs become batches: their order, the token budget and the length buckets.
    `make_translation_dataset` and `prepared_dataset` take one whole; `help` in each field's
    metadata documents it. Which pairs an input pipeline reads (`num_shards`, `shard_index`) is
    the caller's, not a batching setting.

    Example:
    >>> settings = BatchingSettings(batch_tokens=2048, max_length=64, boundaries=[9, 17, 65])
    >>> settings.boundaries
    (9, 17, 65)
    >>> dataclasses.replace(settings, shuffle=True, seed=1).shuffle
    True
    """

    batch_tokens: int = dataclasses.field(
        default=4096,
        metadata={"help": "positions per batch and side, padding included (§5.1: about 25,000)"},
    )
    max_length: int = dataclasses.field(
        default=256,
        metadata={"help": "pairs whose longer side, with BOS/EOS, is longer are dropped"},
    )
    boundaries: tuple[int, ...] | None = dataclasses.field(
        default=None,
        metadata={
            "help": "length buckets' limits (exclusive, the last above max_length); default "
            "one bucket per length, which pads least; under XLA few (fitted_bucket_boundaries)"
        },
    )
    pad_batches: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "pad each bucket's last, smaller batch with PAD rows to full size, so that a "
            "finite pass has one shape per bucket too (XLA)"
        },
    )
    shuffle: bool = dataclasses.field(
        default=False, metadata={"help": "shuffle the pairs each pass"}
    )
    seed: int | None = dataclasses.field(
        default=None, metadata={"help": "the shuffle's seed: the same order every run"}
    )
    repeat: bool = dataclasses.field(
        default=False,
        metadata={"help": "repeat for ever, reshuffling each pass: every batch is then full"},
    )
    deterministic: bool | None = dataclasses.field(
        default=None,
        metadata={"help": "keep the order under parallel reads and maps (default: when seeded)"},
    )

    def __post_init__(self):
        if self.boundaries is not None:  # a tuple: the settings stay hashable and unchanged
            object.__setattr__(self, "boundaries", tuple(self.boundaries))

    def dataset_options(self):
        """`tf.data.Options` of a dataset batched so: its determinism, and no auto-sharding
        (each input pipeline already reads its own share)."""
        options = tf.data.Options()
        seeded = self.seed is not None
        options.deterministic = seeded if self.deterministic is None else self.deterministic
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return options

    def bucketing(self):
        """The `bucket_by_token_budget` transform of these settings."""
        boundaries = list(self.boundaries) if self.boundaries else None
        return bucket_by_token_budget(
            self.batch_tokens, self.max_length, boundaries, self.pad_batches
        )


def pair_lengths_of_chunk(source, target_in):
    """The length that decides each pair's bucket: its longer side (ragged `[pairs, (tokens)]`)."""
    return tf.maximum(source.row_lengths(), target_in.row_lengths())


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


def length_counts(lengths) -> np.ndarray:
    """Pairs per bucketing length, `counts[length]`: what epoch sizes and fitted buckets are
    computed from. Its size is the longest length + 1, whatever the number of pairs.

    Example:
    >>> length_counts([3, 3, 5]).tolist()
    [0, 0, 0, 2, 0, 1]
    """
    return np.bincount(np.asarray(lengths, dtype=np.int64))


def full_batches_per_pass(counts, batch_tokens, max_length, boundaries=None):
    """How many full batches (`bucket_by_token_budget` on repeated data) carry one pass over
    pairs of these bucketing lengths (`counts[length]`, as `length_counts` gives them):
    `batches_per_pass`, rounded up. Fewer than a finite pass's batches, whose every bucket ends in
    a smaller one; and the same whatever the order of the pairs.

    Example (batches of 8 pairs up to length 4, of 2 pairs up to 16; a finite pass makes 1 + 2):
    >>> full_batches_per_pass(length_counts([3, 3, 3, 9, 9, 9]), 32, 16, boundaries=[5, 17])
    2
    """
    return math.ceil(batches_per_pass(counts, batch_tokens, max_length, boundaries))


def batches_per_pass(counts, batch_tokens, max_length, boundaries=None) -> Fraction:
    """The full batches of one pass over pairs of these bucketing lengths (`counts[length]`),
    exactly: each bucket's pairs over its batch size, summed. Input pipelines that share the
    pairs equally carry their share of it each.

    >>> batches_per_pass(length_counts([3, 3, 3, 9, 9, 9]), 32, 16, boundaries=[5, 17])
    Fraction(15, 8)
    """
    boundaries = boundaries or bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, batch_tokens)
    counts = np.asarray(counts, dtype=np.int64)
    buckets = np.searchsorted(boundaries, np.arange(counts.size), side="right")
    pairs = np.zeros(len(sizes), dtype=np.int64)
    np.add.at(pairs, buckets, counts)
    # Exact fractions: a float sum of 1/size per pair can land just above a whole number of
    # batches and round up to one batch too many.
    return sum((Fraction(int(n), size) for n, size in zip(pairs, sizes, strict=True)), Fraction())


def fitted_bucket_boundaries(counts, num_buckets, max_length):
    """The `num_buckets` boundaries that pad a corpus least, plus one catch-all up to `max_length`.

    Under XLA every bucket is one compiled shape, so the number of buckets is fixed and their
    limits are chosen from the pair lengths of the training data (`counts[length]`, as
    `length_counts` gives them): dynamic programming over the length histogram minimises the
    positions used when each pair pads to its bucket's limit. The catch-all bucket takes longer
    pairs of other splits (never seen in training, so never compiled there).

    Example:
    >>> fitted_bucket_boundaries(length_counts([3, 3, 4, 9, 10, 10]), 2, max_length=16)
    [5, 11, 17]
    """
    counts = np.asarray(counts, dtype=np.int64)
    values = np.flatnonzero(counts)
    if values.size == 0:
        raise ValueError("fitted_bucket_boundaries needs at least one pair length")
    if values[-1] > max_length:
        raise ValueError(f"pair length {values[-1]} exceeds max_length {max_length}")
    pairs_up_to = np.concatenate([[0], np.cumsum(counts[values])])
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

    Takes a stream of chunks (`CHUNK_PAIRS` pairs an element, as `tokenize_pairs` and
    `prepared_dataset` read them): `((source, target_in), target_out)`, each ragged
    `[pairs, (tokens)]`. Gives padded batches of the same structure. Pairs longer than
    `max_length` are dropped.

    Each step sorts a chunk's pairs, with those left waiting by earlier chunks, into buckets and
    emits every full batch; a bucket's remainder waits for the next chunk and, at the end of a
    finite stream, goes out as the bucket's last, smaller batch. So the batches are those of
    `tf.data`'s `bucket_by_sequence_length`, but found by a few ops over a thousand pairs where
    that spends several per pair.

    Args:
        batch_tokens: positions per batch and side, padding included.
        max_length: the longest pair (with BOS/EOS).
        boundaries: bucket limits (exclusive; the last above `max_length`); default one bucket
            per length, which pads least. Under XLA pass few (`fitted_bucket_boundaries`): each
            is one compiled shape.
        pad_batches: also pad each bucket's last, smaller batch with all-PAD rows to the
            bucket's full batch, so a finite dataset (validation) has one shape per bucket too.
            PAD rows carry no loss and no metric.
    """
    boundaries = boundaries or bucket_boundaries(max_length)
    if boundaries[-1] <= max_length:
        raise ValueError(f"the last bucket boundary {boundaries[-1]} must exceed {max_length}")
    limits = tf.constant(boundaries, tf.int64)
    rows = tf.constant(bucket_batch_sizes(boundaries, batch_tokens)[:-1], tf.int64)

    def step(waiting, element):
        chunk, is_last = element
        sides = zip(waiting, tf.nest.flatten(chunk), strict=True)
        pairs = tf.nest.pack_sequence_as(
            chunk, [tf.concat([_ragged(old), new], 0) for old, new in sides]
        )
        order, bucket = _sorted_into_buckets(pairs, limits, max_length)
        count = tf.math.bincount(bucket, minlength=len(boundaries), dtype=tf.int64)
        batches = tf.where(is_last, -(-count // rows), count // rows)  # whole ones until the end
        position = tf.range(tf.size(bucket, tf.int64)) - tf.gather(
            tf.cumsum(count, exclusive=True), bucket
        )
        goes = position < tf.gather(tf.minimum(batches * rows, count), bucket)
        batch_bucket, batch_rows = _batch_rows(count, batches, rows)
        widths = tf.gather(limits, batch_bucket) - 1
        emitted = _gather_pairs(pairs, tf.boolean_mask(order, goes))
        left = _gather_pairs(pairs, tf.boolean_mask(order, ~goes))
        return _state(left), (emitted, batch_rows, widths)

    def split(pairs, batch_rows, widths):
        def batch(start, count, width):
            rows_out = tf.maximum(batch_tokens // width, count) if pad_batches else count
            return tf.nest.map_structure(
                lambda side: side[start : start + count].to_tensor(PAD_ID, shape=[rows_out, width]),
                pairs,
            )

        starts = tf.cumsum(batch_rows, exclusive=True)
        return tf.data.Dataset.from_tensor_slices((starts, batch_rows, widths)).map(batch)

    def transform(dataset):
        empty = _empty_chunk(dataset.element_spec)
        end = tf.data.Dataset.from_tensors((empty, True))
        steps = dataset.map(lambda inputs, target_out: ((inputs, target_out), False))
        return steps.concatenate(end).scan(_state(empty), step).flat_map(split)

    return transform


def _sorted_into_buckets(pairs, limits, max_length):
    """The order of the pairs no longer than `max_length`, by bucket then as they came, and the
    bucket of each in that order."""
    lengths = tf.cast(pair_lengths_of_chunk(*pairs[0]), tf.int64)
    kept = tf.where(lengths <= max_length)[:, 0]
    bucket = tf.searchsorted(limits, tf.gather(lengths, kept), side="right")
    return tf.gather(kept, tf.argsort(bucket, stable=True)), tf.sort(bucket)


def _batch_rows(count, batches, rows):
    """The bucket and number of pairs of each batch emitted: `batches[k]` of `rows[k]` pairs in
    bucket k, of its `count[k]` pairs, the last one smaller if they run out."""
    batch_bucket = tf.repeat(tf.range(tf.size(count)), batches)
    index_in_bucket = tf.range(tf.size(batch_bucket, tf.int64)) - tf.gather(
        tf.cumsum(batches, exclusive=True), batch_bucket
    )
    full = tf.gather(rows, batch_bucket)
    return batch_bucket, tf.minimum(full, tf.gather(count, batch_bucket) - index_in_bucket * full)


def _gather_pairs(pairs, indices):
    return tf.nest.map_structure(lambda side: tf.gather(side, indices), pairs)


def _state(pairs):
    """Pairs waiting for their batch, as plain tensors (`Dataset.scan`'s state takes no ragged
    ones): `(values, row_splits)` of each side."""
    return tuple((side.flat_values, side.row_splits) for side in tf.nest.flatten(pairs))


def _ragged(parts):
    return tf.RaggedTensor.from_row_splits(*parts, validate=False)


def _empty_chunk(spec):
    """A chunk of no pair, of a chunked stream's element spec."""

    def empty(side):
        return tf.RaggedTensor.from_row_splits(
            tf.zeros([0], side.dtype), tf.zeros([1], side.row_splits_dtype)
        )

    return tf.nest.map_structure(empty, spec)


def padding_efficiency(dataset) -> float:
    """Real tokens / all positions over the source and target of every batch."""

    def count(totals, batch):
        (source, target_in), _ = batch
        real = tf.math.count_nonzero(source) + tf.math.count_nonzero(target_in)
        total = tf.size(source, tf.int64) + tf.size(target_in, tf.int64)
        return totals[0] + real, totals[1] + total

    real, total = dataset.reduce((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), count)
    return float(real) / max(float(total), 1.0)
