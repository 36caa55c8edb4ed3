"""Token-budget bucketing (§5.1): shapes, budget, efficiency, determinism, sharding."""

import itertools
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.training.data import kept_length_counts
from keras_transformer.training.trainer import count_batches
from pipelines import count_over_length, make_translation_dataset, padding_efficiency
from pipelines.batching import (
    BatchingSettings,
    bucket_batch_sizes,
    bucket_boundaries,
    fitted_bucket_boundaries,
    full_batches_per_pass,
    length_counts,
)
from pipelines.corpus import read_parallel_corpus
from pipelines.tokenizer import PAD_ID
from pipelines.translation_dataset import pair_lengths, tokenize_pairs

BUDGET = 1024
MAX_LENGTH = 64


def batches(dataset):
    return batches_of(dataset)


def test_every_batch_respects_the_budget_and_a_bucket_boundary(train_slice, tokenizer):
    dataset = make_translation_dataset(
        *train_slice, tokenizer, BatchingSettings(BUDGET, MAX_LENGTH, shuffle=True, seed=1)
    )
    lengths = {b - 1 for b in bucket_boundaries(MAX_LENGTH)}
    seen = 0
    for source, target_in, target_out in batches(dataset):
        assert source.shape == target_in.shape == target_out.shape
        assert source.size <= BUDGET and target_in.size <= BUDGET
        assert source.shape[1] in lengths
        assert np.all(target_in[:, 0][target_out[:, 0] != 0] == 1)  # BOS first
        assert np.all((source == 2).sum(1) == 1)  # one EOS per source
        seen += len(source)
    assert seen == 3000 - count_over_length(*train_slice, tokenizer, MAX_LENGTH)


def per_pair_bucketing(source_path, target_path, tokenizer, boundaries, pad_batches):
    """The reference: `tf.data`'s `bucket_by_sequence_length`, one pair an element."""
    corpus = read_parallel_corpus(source_path, target_path)
    pairs = (
        tf.data.Dataset.from_tensor_slices((corpus.source, corpus.target))
        .apply(tokenize_pairs(tokenizer))
        .unbatch()
        .map(lambda inputs, target_out: (inputs, target_out))  # rank-0 ragged → tensors
        .filter(lambda inputs, _: tf.maximum(*(tf.size(side) for side in inputs)) <= MAX_LENGTH)
    )
    sizes = bucket_batch_sizes(boundaries, BUDGET)
    batches = pairs.bucket_by_sequence_length(
        lambda inputs, _: tf.maximum(*(tf.size(side) for side in inputs)),
        boundaries,
        sizes,
        padded_shapes=(([None], [None]), [None]),
        padding_values=((PAD_ID, PAD_ID), PAD_ID),
        pad_to_bucket_boundary=True,
    )

    def full_rows(batch):
        return [np.pad(t, [[0, BUDGET // t.shape[1] - len(t)], [0, 0]]) for t in batch]

    return [full_rows(batch) if pad_batches else batch for batch in batches_of(batches)]


def batches_of(dataset):
    return [tuple(t.numpy() for t in (s, ti, to)) for (s, ti), to in dataset]


@pytest.mark.parametrize("pad_batches", [False, True])
@pytest.mark.parametrize("fitted", [False, True], ids=["a bucket a length", "fitted buckets"])
def test_chunked_bucketing_makes_the_batches_of_per_pair_bucketing(
    train_slice, tokenizer, pad_batches, fitted
):
    """A chunk of pairs at a time, the same batches, of the same pairs, in each bucket, as
    `tf.data` makes a pair at a time (batches of different buckets may come in other order)."""
    lengths = pair_lengths(*train_slice, tokenizer)
    boundaries = (
        fitted_bucket_boundaries(length_counts(lengths[lengths <= MAX_LENGTH]), 4, MAX_LENGTH)
        if fitted
        else bucket_boundaries(MAX_LENGTH)
    )
    ours = make_translation_dataset(
        *train_slice,
        tokenizer,
        BatchingSettings(
            BUDGET, MAX_LENGTH, deterministic=True, boundaries=boundaries, pad_batches=pad_batches
        ),
    )
    reference = per_pair_bucketing(*train_slice, tokenizer, boundaries, pad_batches)

    def keyed(batches):
        return sorted((b[0].shape, b[0].tobytes(), b[1].tobytes(), b[2].tobytes()) for b in batches)

    assert len(reference) > 20
    assert keyed(batches_of(ours)) == keyed(reference)


def test_a_budget_below_a_bucket_width_still_batches_its_pairs_one_a_batch(train_slice, tokenizer):
    dataset = make_translation_dataset(
        *train_slice, tokenizer, BatchingSettings(24, MAX_LENGTH, pad_batches=True)
    )
    rows = [int(np.sum(source[:, 0] != 0)) for source, _, _ in batches(dataset)]
    assert sum(rows) == 3000 - count_over_length(*train_slice, tokenizer, MAX_LENGTH)


def test_over_length_pairs_are_counted(train_slice, tokenizer):
    assert count_over_length(*train_slice, tokenizer, max_length=12) > 100
    assert count_over_length(*train_slice, tokenizer, max_length=200) == 0


def test_training_logs_the_over_length_pairs_of_both_splits(
    train_slice, tokenizer, multi30k_dir, caplog
):
    files = {
        "train": train_slice,
        "validation": [multi30k_dir / f"val.{s}.gz" for s in "en de".split()],
    }
    with caplog.at_level(logging.WARNING):
        kept = kept_length_counts(SimpleNamespace(max_length=12), files, tokenizer)
    for split, name, pairs in [("train", "training", 3000), ("validation", "validation", 1014)]:
        over = count_over_length(*files[split], tokenizer, max_length=12)
        assert over > 0
        assert f"{over} of {pairs} {name} pairs are longer than max_length=12" in caplog.text
    assert kept.sum() == 3000 - count_over_length(*train_slice, tokenizer, max_length=12)
    assert kept.size <= 13


def test_bucketing_pads_far_less_than_plain_batching(train_slice, tokenizer):
    bucketed = make_translation_dataset(
        *train_slice, tokenizer, BatchingSettings(4096, 128, shuffle=True, seed=3)
    )
    efficiency = padding_efficiency(bucketed)
    sizes = [len(s) for s, _, _ in batches(bucketed)]
    plain = (
        tf.data.Dataset.from_tensor_slices(
            (
                [tf.compat.as_str(s) for s in open_lines(train_slice[0])],
                [tf.compat.as_str(s) for s in open_lines(train_slice[1])],
            )
        )
        .shuffle(3000, seed=3)
        .map(lambda s, t: (tokenizer.tokenize(s), tokenizer.tokenize(t)))
        .map(lambda s, t: ((s, t), t))
        .padded_batch(int(np.mean(sizes)))
    )
    assert efficiency >= 0.90
    assert padding_efficiency(plain) < efficiency - 0.15


def open_lines(path):
    from pipelines.corpus import read_lines

    return read_lines(path)


def test_same_seed_same_batches(train_slice, tokenizer):
    def run():
        return batches(
            make_translation_dataset(
                *train_slice, tokenizer, BatchingSettings(2048, 64, shuffle=True, seed=11)
            )
        )

    first, second = run(), run()
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


def test_two_shards_partition_the_pairs(train_slice, tokenizer):
    def pairs(num_shards, index):
        dataset = make_translation_dataset(
            *train_slice,
            tokenizer,
            BatchingSettings(2048, 200),
            num_shards=num_shards,
            shard_index=index,
        )
        return sorted(tuple(row[row != 0]) for source, _, _ in batches(dataset) for row in source)

    shard_0, shard_1, everything = pairs(2, 0), pairs(2, 1), pairs(1, 0)
    assert len(shard_0) + len(shard_1) == len(everything) == 3000
    assert sorted(shard_0 + shard_1) == everything


def test_fitted_buckets_bound_the_shapes_and_pad_batches_fills_every_batch(train_slice, tokenizer):
    lengths = pair_lengths(*train_slice, tokenizer)
    boundaries = fitted_bucket_boundaries(
        length_counts(lengths[lengths <= MAX_LENGTH]), 4, MAX_LENGTH
    )
    dataset = make_translation_dataset(
        *train_slice,
        tokenizer,
        BatchingSettings(2048, MAX_LENGTH, boundaries=boundaries, pad_batches=True),
    )
    shapes, real_rows = set(), 0
    for source, target_in, target_out in batches(dataset):
        shapes.add(source.shape)
        assert source.shape == target_in.shape == target_out.shape
        real_rows += int(np.sum(source[:, 0] != 0))
        padded = source[:, 0] == 0
        assert not target_in[padded].any() and not target_out[padded].any()
    assert {rows for rows, _ in shapes} == {2048 // (b - 1) for b in boundaries[:-1]}
    assert {length for _, length in shapes} == {b - 1 for b in boundaries[:-1]}
    assert real_rows == 3000 - count_over_length(*train_slice, tokenizer, MAX_LENGTH)


@pytest.mark.parametrize("fitted", [False, True], ids=["a bucket a length", "fitted buckets"])
def test_an_epoch_is_the_full_batches_that_carry_one_pass(train_slice, tokenizer, fitted):
    """`train`'s epoch: as many of the repeated stream's full batches as carry one pass's pairs,
    to within a batch on average, and fewer than a finite pass's batches (each bucket ends in a
    smaller one). The shuffle decides which buckets one epoch's batches come from, so a single
    epoch may be off by more than a batch: the average is taken over several."""
    files = {"train": train_slice, "validation": train_slice}
    kept = kept_length_counts(SimpleNamespace(max_length=MAX_LENGTH), files, tokenizer)
    boundaries = fitted_bucket_boundaries(kept, 4, MAX_LENGTH) if fitted else None

    def dataset(repeat):
        return make_translation_dataset(
            *train_slice,
            tokenizer,
            BatchingSettings(
                2048,
                MAX_LENGTH,
                shuffle=True,
                seed=1,
                repeat=repeat,
                boundaries=boundaries,
                pad_batches=fitted,
            ),
        )

    epoch = full_batches_per_pass(kept, 2048, MAX_LENGTH, boundaries)
    epochs = 8
    stream = dataset(True).take(epochs * epoch)
    rows = [int(np.sum(source[:, 0] != 0)) for source, _, _ in batches(stream)]
    assert abs(sum(rows) - epochs * kept.sum()) < epochs * max(rows)
    assert epoch < count_batches(dataset(repeat=False))


def test_an_epoch_of_whole_batches_is_counted_exactly():
    """27 pairs in batches of 3 are 9 batches: a float sum of 27 thirds rounds up to 10."""
    assert full_batches_per_pass(length_counts([9] * 27), 48, 16, boundaries=[5, 17]) == 9


@pytest.mark.parametrize("seed", range(5))
def test_fitted_buckets_pad_least_among_all_choices(seed):
    lengths = np.random.default_rng(seed).integers(1, 13, size=40)

    def positions(limits):  # each pair pads to the smallest limit that holds it
        return sum(min(b for b in limits if b >= length) for length in lengths)

    fitted = fitted_bucket_boundaries(length_counts(lengths), 3, max_length=12)
    assert fitted[-1] == 13 and len(fitted) <= 4
    best = min(positions(limits + (12,)) for limits in itertools.combinations(range(1, 12), 2))
    assert positions([b - 1 for b in fitted]) == best
