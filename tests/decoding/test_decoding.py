"""Greedy and beam search (§6.1): exact against brute force, cached = uncached, no cross-talk."""

import itertools
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.decoding import beam_search as beam_search_module
from keras_transformer.decoding.beam_search import NEG_INF, beam_search, length_penalty
from keras_transformer.decoding.search import (
    MIN_SLICE_ROWS,
    beam_decode,
    decode_side_by_side,
    greedy_decode,
    greedy_search,
    hypothesis_steps,
    max_output_lengths,
    side_by_side_slices,
)
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID

# Sentences of very different lengths in one padded batch (EOS = 2 ends each).
SOURCES = [[17, 40, 9, 2], [5, 2], [8, 33, 21, 7, 19, 46, 12, 2]]


def padded(rows):
    width = max(map(len, rows))
    return np.array([row + [PAD_ID] * (width - len(row)) for row in rows], np.int32)


@pytest.fixture(scope="module")
def model():
    tf.keras.utils.set_random_seed(7)
    return Transformer(TransformerConfig.preset("tiny", vocab_size=50))


def test_length_penalty_is_gnmt():
    lengths = np.arange(1, 60)
    for alpha in (0.0, 0.6, 1.0):
        np.testing.assert_allclose(
            length_penalty(lengths, alpha).numpy(), ((5 + lengths) / 6) ** alpha, rtol=1e-6
        )


def bigram_table(vocab=12, seed=0):
    """Random next-token logits given the previous token, `[vocab, vocab]`, where EOS is either
    a row's best token (after tokens 5 and 9) or far below its second best, and PAD and BOS never
    follow. A beam of one then never holds a finished hypothesis that greedy search would not
    end with too, the one case in which the two searches may differ (an early EOS that
    outscores the greedy path)."""
    logits = np.random.default_rng(seed).normal(size=(vocab, vocab)).astype(np.float32)
    logits[:, [PAD_ID, BOS_ID, EOS_ID]] = -30.0
    logits[[5, 9], EOS_ID] = logits[[5, 9]].max(axis=1) + 1.0
    return logits


@pytest.mark.parametrize("min_length", [0, 4])
def test_beam_of_one_without_penalty_is_greedy(min_length):
    table = tf.constant(bigram_table())

    def symbols_to_logits(ids, step, cache):
        return tf.gather(table, ids), cache

    first_ids = tf.constant([3, 4, 6, 7, 8, 10, 11], tf.int32)
    limits = tf.constant([20, 20, 20, 20, 20, 20, 2])  # the last stops at its limit
    greedy = greedy_search(symbols_to_logits, first_ids, (), 20, limits, min_length=min_length)
    beam = beam_search(symbols_to_logits, first_ids, (), 1, 0.0, 20, limits, min_length=min_length)
    assert np.any(greedy.ids.numpy() == EOS_ID), "some sentence should end with EOS"
    assert not np.any(greedy.ids[:, :min_length].numpy() == EOS_ID)
    np.testing.assert_array_equal(beam.ids[:, 0].numpy(), greedy.ids.numpy())
    np.testing.assert_array_equal(beam.lengths[:, 0].numpy(), greedy.lengths.numpy())
    np.testing.assert_allclose(beam.log_probs[:, 0], greedy.log_probs, atol=1e-5)


def log_softmax(logits):
    """NumPy's log-softmax over the last axis, in float64."""
    logits = np.asarray(logits, np.float64)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def test_banned_tokens_are_never_generated_and_masked_after_normalizing():
    """As transformers, Marian and fairseq: the log-softmax over the whole vocabulary, banned
    tokens included, then the ban; a score is the model's log-probability."""
    # PAD and BOS score highest at both steps; of the other tokens, 4 and then EOS.
    table = np.array([[9.0, 8.0, -5.0, 1.0, 3.0, 2.0], [9.0, 8.0, 4.0, 1.0, 3.0, 2.0]], "float32")

    def symbols_to_logits(ids, step, cache):
        return tf.tile(tf.gather(table, step)[None], [tf.shape(ids)[0], 1]), cache

    first_ids, banned = tf.constant([BOS_ID]), (PAD_ID, BOS_ID)
    greedy = greedy_search(symbols_to_logits, first_ids, (), 2, banned_ids=banned)
    beam = beam_search(symbols_to_logits, first_ids, (), 2, 0.0, 2, banned_ids=banned)
    full = log_softmax(table)
    expected = full[0, 4] + full[1, EOS_ID]
    np.testing.assert_array_equal(greedy.ids[0].numpy(), [4, EOS_ID])
    np.testing.assert_array_equal(beam.ids[0, 0].numpy(), [4, EOS_ID])
    np.testing.assert_allclose([greedy.log_probs[0], beam.log_probs[0, 0]], [expected] * 2, 1e-6)
    unbanned = greedy_search(symbols_to_logits, first_ids, (), 2)
    assert unbanned.ids[0, 0] == PAD_ID  # what the ban rules out


def test_min_length_holds_eos_back_after_normalizing_with_it():
    # EOS scores highest at both steps; token 4 second.
    table = np.array([[-9.0, -9.0, 5.0, 1.0, 3.0, 2.0]] * 2, "float32")

    def symbols_to_logits(ids, step, cache):
        return tf.tile(tf.gather(table, step)[None], [tf.shape(ids)[0], 1]), cache

    first_ids, banned = tf.constant([BOS_ID]), (PAD_ID, BOS_ID)
    greedy = greedy_search(symbols_to_logits, first_ids, (), 3, banned_ids=banned, min_length=1)
    beam = beam_search(symbols_to_logits, first_ids, (), 2, 0.0, 3, banned_ids=banned, min_length=1)
    full = log_softmax(table[0])
    expected = full[4] + full[EOS_ID]
    np.testing.assert_array_equal(greedy.ids[0].numpy(), [4, EOS_ID, PAD_ID])
    np.testing.assert_array_equal(beam.ids[0, 0].numpy(), [4, EOS_ID, PAD_ID])
    np.testing.assert_allclose([greedy.log_probs[0], beam.log_probs[0, 0]], [expected] * 2, 1e-6)


def distinct_candidates(batch_size, beam_size, vocab_size):
    """Distinct logits and parent log-probabilities: no two candidates tie."""
    rng = np.random.default_rng(3)
    rows = batch_size * beam_size
    logits = rng.permutation(rows * vocab_size).reshape(rows, vocab_size) / 7.0
    return logits, -rng.permutation(rows).reshape(batch_size, beam_size) / 3.0


def tied_candidates(batch_size, beam_size, vocab_size):
    """Ties everywhere: logits of 4 values, so equal within a row; rows drawn from 2, parents'
    log-probabilities from 2 values, so equal candidates across parents too. Rows of equal
    logits are equal rows, so their log-softmax is computed alike, bit for bit."""
    rng = np.random.default_rng(5)
    rows = rng.integers(0, 4, size=(2, vocab_size)) / 2.0
    logits = rows[rng.integers(0, 2, size=batch_size * beam_size)]
    return logits, -rng.integers(0, 2, size=(batch_size, beam_size)) / 4.0


@pytest.mark.parametrize(
    "batch_size, beam_size, vocab_size, banned, candidates",
    [
        (3, 4, 50, (PAD_ID, BOS_ID, EOS_ID), distinct_candidates),
        (2, 2, 3, (), distinct_candidates),
        (2, 3, 1, (), distinct_candidates),
        (3, 4, 50, (PAD_ID, BOS_ID, EOS_ID), tied_candidates),
        (2, 3, 6, (PAD_ID,), tied_candidates),
    ],
)
def test_candidates_from_each_rows_best_are_the_ranking_of_the_whole_sentence(
    batch_size, beam_size, vocab_size, banned, candidates
):
    """The `2 × beam` candidates, found among each row's `2 × beam` best tokens, are exactly
    NumPy's ranking of every parent plus every token over the whole sentence, ties (equal
    logits, equal parents) going to the lower parent and then the lower token."""
    logits, alive_log_probs = candidates(batch_size, beam_size, vocab_size)
    # The full log-softmax, then the banned tokens ruled out.
    log_probs = np.where(np.isin(np.arange(vocab_size), banned), -np.inf, log_softmax(logits))
    every = (alive_log_probs[:, :, None] + log_probs.reshape(batch_size, beam_size, -1)).reshape(
        batch_size, -1
    )
    best = np.argsort(-every, axis=1, kind="stable")[:, : min(2 * beam_size, every.shape[1])]
    # Candidates either tie exactly or differ by far more than float32 rounds them apart.
    finite = np.sort(every[np.isfinite(every)])
    gaps = np.diff(finite)
    assert np.all((gaps == 0) | (gaps > 1e-4))
    if candidates is tied_candidates:
        assert np.any(gaps == 0)

    masked = tf.nn.log_softmax(tf.constant(logits, tf.float32)) + beam_search_module.token_bias(
        vocab_size, banned
    )
    top_log_probs, parents, tokens = beam_search_module._best_candidates(
        masked, tf.constant(alive_log_probs, tf.float32), beam_size, vocab_size
    )
    np.testing.assert_array_equal(parents.numpy(), best // vocab_size)
    np.testing.assert_array_equal(tokens.numpy(), best % vocab_size)
    np.testing.assert_allclose(top_log_probs.numpy(), np.take_along_axis(every, best, 1), 1e-5)


@pytest.mark.parametrize("compact", [False, True])
def test_min_length_at_the_limit_makes_every_hypothesis_that_long(model, compact):
    source, extra = padded(SOURCES), 6
    limits = [len(row) + extra for row in SOURCES]
    longest = max(limits)
    greedy = greedy_decode(model, source, extra, min_length=longest)
    beam = beam_decode(model, source, 3, 0.6, extra, compact=compact, min_length=longest)
    np.testing.assert_array_equal(greedy.lengths.numpy(), limits)
    np.testing.assert_array_equal(beam.lengths.numpy(), np.tile(np.array(limits)[:, None], 3))
    for ids in (greedy.ids.numpy(), beam.ids.numpy()):
        assert not np.any(ids == EOS_ID)
    for row, limit in enumerate(limits):  # a token at every position up to the limit
        assert np.all(greedy.ids[row, :limit].numpy() != PAD_ID)
        assert np.all(beam.ids[row, :, :limit].numpy() != PAD_ID)


def test_min_length_zero_as_a_tensor_changes_nothing(model):
    source, zero = padded(SOURCES), tf.constant(0)
    pairs = [
        (greedy_decode(model, source, 6), greedy_decode(model, source, 6, min_length=zero)),
        (
            beam_decode(model, source, 3, 0.6, 6),
            beam_decode(model, source, 3, 0.6, 6, min_length=zero),
        ),
    ]
    for default, masked in pairs:
        np.testing.assert_array_equal(masked.ids, default.ids)
        np.testing.assert_array_equal(masked.lengths, default.lengths)
        np.testing.assert_allclose(masked.log_probs, default.log_probs, atol=1e-6)


def test_cached_decoding_equals_uncached(model):
    source = padded(SOURCES)
    for cached, uncached in [
        (greedy_decode(model, source, 6), greedy_decode(model, source, 6, cached=False)),
        (beam_decode(model, source, 3, 0.6, 6), beam_decode(model, source, 3, 0.6, 6, False)),
    ]:
        np.testing.assert_array_equal(cached.ids.numpy(), uncached.ids.numpy())
        np.testing.assert_allclose(cached.log_probs, uncached.log_probs, atol=1e-5)


def test_each_sentence_of_a_batch_decodes_as_if_alone(model):
    together = beam_decode(model, padded(SOURCES), beam_size=4, alpha=0.6, extra_length=8)
    for index, source in enumerate(SOURCES):
        alone = beam_decode(model, padded([source]), beam_size=4, alpha=0.6, extra_length=8)
        width = alone.ids.shape[-1]
        np.testing.assert_array_equal(together.ids[index, :, :width], alone.ids[0])
        assert np.all(together.ids[index, :, width:].numpy() == PAD_ID)
        np.testing.assert_allclose(together.scores[index], alone.scores[0], atol=1e-5)


def sequence_log_probs(model, source, sequences):
    """log P(Y | source) of each sequence by one full forward pass (the full log-softmax, then
    PAD and BOS ruled out)."""
    width = max(map(len, sequences))
    target_out = padded([list(s) for s in sequences])
    target_in = padded([[BOS_ID, *s[:-1]] for s in sequences])
    sources = np.repeat(source, len(sequences), axis=0)
    log_probs = tf.nn.log_softmax(model((sources, target_in))).numpy()
    log_probs[..., [PAD_ID, BOS_ID]] = NEG_INF
    picked = np.take_along_axis(log_probs, target_out[..., None], axis=-1)[..., 0]
    lengths = np.array([len(s) for s in sequences])
    return (picked * (np.arange(width) < lengths[:, None])).sum(1), lengths


@pytest.mark.parametrize(
    "alpha, penalty", [(0.0, "gnmt"), (0.6, "gnmt"), (2.0, "gnmt"), (1.0, "length")]
)
def test_beam_as_wide_as_the_search_space_finds_the_brute_force_best(alpha, penalty):
    """GNMT's penalty ((5 + |Y|) / 6)^α, or |Y|^α (`penalty="length"`, transformers')."""
    tf.keras.utils.set_random_seed(3)
    # Outputs {EOS, 3, 4, 5}; at most 3 tokens; sharpened weights make the choice matter.
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=6))
    model.set_weights([w * 3 for w in model.get_weights()])
    source = np.array([[3, 4, 2]], np.int32)  # extra_length 0: at most 3 output tokens
    words = [3, 4, 5]
    sequences = [
        (*prefix, EOS_ID) for n in range(3) for prefix in itertools.product(words, repeat=n)
    ] + list(itertools.product(words, repeat=3))  # ended by EOS, or by the length limit
    log_probs, lengths = sequence_log_probs(model, source, sequences)
    scores = log_probs / (((5 + lengths) / 6) if penalty == "gnmt" else lengths) ** alpha

    result = beam_decode(model, source, 64, alpha, extra_length=0, penalty=penalty)
    ranked = np.argsort(-scores)
    found = result.ids[0].numpy()
    for rank in range(5):  # the best hypotheses, in order
        expected = sequences[ranked[rank]]
        assert tuple(found[rank, : len(expected)]) == expected
        np.testing.assert_allclose(result.scores[0, rank], scores[ranked[rank]], atol=1e-4)
        np.testing.assert_allclose(result.log_probs[0, rank], log_probs[ranked[rank]], atol=1e-4)
        assert result.lengths[0, rank] == len(expected)


def fixed_distribution(probabilities, calls):
    """A `symbols_to_logits_fn` with the same next-token distribution at every step."""
    logits = np.log(np.maximum(np.array(probabilities, np.float32), 1e-30))

    def symbols_to_logits(ids, step, cache):
        calls.append(int(step))
        return tf.tile(logits[None, :], [tf.shape(ids)[0], 1]), cache

    return symbols_to_logits


def test_search_terminates_early_when_no_alive_hypothesis_can_win():
    # EOS (id 2) almost surely first. Step 0 finishes [EOS] (log p ≈ 0); step 1 fills the beam
    # with [3, EOS] (≈ 2 log 0.0005 = -15.2, the worst finished); every alive hypothesis then has
    # log p ≤ 2 log 0.0005 and can only fall, so with α = 0 no third step can change the result.
    calls = []
    fn = fixed_distribution([0, 0, 0.999, 0.0005, 0.0005], calls)
    result = beam_search(fn, tf.ones([2], tf.int32), (), 2, alpha=0.0, max_decode_length=40)
    assert calls == [0, 1]
    assert result.ids[0, 0, 0] == EOS_ID and result.lengths[0, 0] == 1
    # With α = 0.6 longer hypotheses are divided by up to lp(40) ≈ 3.35, so the bound holds
    # later: after step 3 (-30.4 / 3.35 < -7.6 / lp(2)), not step 1, and still long before 40.
    calls.clear()
    beam_search(fn, tf.ones([2], tf.int32), (), 2, alpha=0.6, max_decode_length=40)
    assert calls == [0, 1, 2, 3]


def test_a_search_for_the_best_alone_stops_once_it_is_final_and_finds_the_same_best():
    # As above with α = 0.6: [EOS] (score ≈ 0) is the best finished after step 0, and no alive
    # hypothesis (log p ≈ -7.6, at best -7.6 / lp(40) ≈ -2.3) can beat it; the full search runs
    # until two hypotheses are final.
    calls = []
    fn = fixed_distribution([0, 0, 0.999, 0.0005, 0.0005], calls)
    best = beam_search(fn, tf.ones([2], tf.int32), (), 2, 0.6, 40, exact_hypotheses=1)
    assert calls == [0]
    full = beam_search(fn, tf.ones([2], tf.int32), (), 2, 0.6, 40)
    assert len(calls) == 5
    np.testing.assert_array_equal(best.ids[:, 0], full.ids[:, 0])
    np.testing.assert_array_equal(best.scores[:, 0], full.scores[:, 0])


def test_search_runs_to_each_sentence_limit_when_eos_never_comes():
    calls = []
    fn = fixed_distribution([0, 0, 0, 0.5, 0.5], calls)
    limits = tf.constant([3, 7])
    result = beam_search(fn, tf.ones([2], tf.int32), (), 2, 0.6, 10, max_lengths=limits)
    assert len(calls) == 7
    np.testing.assert_array_equal(result.lengths.numpy(), [[3, 3], [7, 7]])
    assert np.all(result.ids[0, :, 3:].numpy() == PAD_ID)


def test_max_output_length_is_input_length_plus_extra():
    source = padded(SOURCES)
    np.testing.assert_array_equal(max_output_lengths(source, 50, 256).numpy(), [54, 52, 58])
    np.testing.assert_array_equal(max_output_lengths(source, 50, 55).numpy(), [54, 52, 55])


def test_decoded_lengths_stay_within_the_limits(model):
    result = beam_decode(model, padded(SOURCES), beam_size=2, alpha=0.6, extra_length=3)
    limits = np.array([len(s) + 3 for s in SOURCES])
    assert np.all(result.lengths.numpy() <= limits[:, None])
    assert result.ids.shape[-1] == 8 + 3


@pytest.mark.slow
def test_xla_compiled_search_gives_the_same_translations(model):
    source = tf.constant(padded(SOURCES))

    def search(source_ids):
        result = beam_decode(model, source_ids, beam_size=3, alpha=0.6, extra_length=6)
        greedy = greedy_decode(model, source_ids, extra_length=6)
        return result.ids, result.scores, greedy.ids

    plain = search(source)
    compiled = tf.function(search, jit_compile=True)(source)
    np.testing.assert_array_equal(compiled[0], plain[0])
    np.testing.assert_allclose(compiled[1], plain[1], atol=1e-4)
    np.testing.assert_array_equal(compiled[2], plain[2])


def test_cache_grown_by_blocks_gives_the_one_loop_results(model):
    # Sentence limits of 41 to 59 tokens and hypotheses of 1 to 59 in one batch: the cache grows
    # through four blocks, and sentences stop in different ones. XLA, the fast path, against
    # one loop over the whole preallocated cache (`cache_blocks=False`, the TFLite export's).
    source = tf.constant(padded([*SOURCES, [*range(3, 21), EOS_ID], [EOS_ID]]))

    def search(source_ids, cache_blocks):
        result = beam_decode(
            model, source_ids, beam_size=3, alpha=0.6, extra_length=40, cache_blocks=cache_blocks
        )
        return result.ids, result.scores, result.lengths

    def loops(cache_blocks):
        graph = tf.function(search).get_concrete_function(source, cache_blocks).graph
        return sum(op.type in ("While", "StatelessWhile") for op in graph.get_operations())

    assert 3 * beam_search_module.CACHE_BLOCK < 59
    assert loops(False) == 1 < loops(True)
    grown = tf.function(search, jit_compile=True)(source, True)
    preallocated = tf.function(search)(source, False)
    assert set(np.ravel(preallocated[2])) >= {1, 59}
    np.testing.assert_array_equal(grown[0], preallocated[0])
    np.testing.assert_allclose(grown[1], preallocated[1], atol=1e-4)


def decoder_rows(model, monkeypatch):
    """A variable that counts the hypothesis rows `model.decode_step` computes."""
    rows = tf.Variable(0)
    decode_step = model.decode_step

    def counted(token_ids, *args):
        rows.assign_add(tf.shape(token_ids)[0])
        return decode_step(token_ids, *args)

    monkeypatch.setattr(model, "decode_step", counted)
    return rows


def test_a_compacted_batch_drops_each_sentence_when_done_with_the_same_results(model, monkeypatch):
    # Sentence limits of 21 to 39 tokens: sentences close at different steps, in two blocks.
    sources = [*SOURCES, [*range(3, 21), EOS_ID], [EOS_ID]]
    rows = decoder_rows(model, monkeypatch)

    def search(source_ids, compact):
        return beam_decode(model, source_ids, 3, 0.6, 20, compact=compact)

    searched = {}
    for compact in (False, True):
        rows.assign(0)
        searched[compact] = tf.function(search)(tf.constant(padded(sources)), compact)
        searched[compact, "rows"] = int(rows.numpy())
        # The search's own count of its hypothesis-steps is the decoder's.
        assert hypothesis_steps(searched[compact], 3) == searched[compact, "rows"]
    for full, compacted in zip(searched[False][:4], searched[True][:4], strict=True):
        np.testing.assert_allclose(full, compacted, atol=1e-5)  # steps aside
    rows.assign(0)
    best = beam_decode(model, padded(sources), 3, 0.6, 20, exact_hypotheses=1)
    np.testing.assert_array_equal(best.ids[:, 0], searched[False][0][:, 0])
    np.testing.assert_allclose(best.scores[:, 0], searched[False][1][:, 0], atol=1e-5)
    assert int(rows.numpy()) <= searched[False, "rows"]
    alone = []
    for source in sources:  # each sentence runs until it can no longer improve
        rows.assign(0)
        search(padded([source]), compact=False)
        alone.append(int(rows.numpy()))
    assert searched[True, "rows"] == sum(alone) < searched[False, "rows"]


def test_greedy_decoding_counts_the_steps_it_ran(model, monkeypatch):
    rows = decoder_rows(model, monkeypatch)
    result = greedy_decode(model, padded(SOURCES), 6)
    # Every sentence runs until the last has ended; that one ended at its last token.
    np.testing.assert_array_equal(result.steps, [max(result.lengths.numpy())] * len(SOURCES))
    assert hypothesis_steps(result, 1) == int(rows.numpy())


def calls_and_their_ancestors(graph):
    """The function-call ops of a graph, each with the ops it depends on."""
    ancestors = {}

    def walk(op):
        if op.name not in ancestors:
            ancestors[op.name] = set()
            for parent in [t.op for t in op.inputs] + list(op.control_inputs):
                ancestors[op.name] |= {parent.name} | walk(parent)
        return ancestors[op.name]

    calls = [o for o in graph.get_operations() if o.type.endswith("PartitionedCall")]
    return {call.name: walk(call) for call in calls}


def test_slices_decoded_side_by_side_equal_the_whole_batch_and_are_independent(model):
    sources = tf.constant(padded(SOURCES * 2 + SOURCES[:1]))  # 7 rows: slices of 3, 2, 2

    def search(source_ids):
        result = beam_decode(model, source_ids, beam_size=3, alpha=0.6, extra_length=6)
        return result.ids, result.scores

    compiled = tf.function(search, jit_compile=True)
    side_by_side = tf.function(
        lambda source_ids: decode_side_by_side(compiled, source_ids, slices=3)
    )
    ids, scores = side_by_side(sources)
    whole_ids, whole_scores = search(sources)
    np.testing.assert_array_equal(ids, whole_ids)
    np.testing.assert_allclose(scores, whole_scores, atol=1e-4)
    # Three searches, none waiting on another's result: the executor may run them at once.
    calls = calls_and_their_ancestors(side_by_side.get_concrete_function(sources).graph)
    assert len(calls) == 3
    assert all(not (calls.keys() & ancestors) for ancestors in calls.values())


def test_one_slice_per_core_of_at_least_the_minimum_rows():
    cores = len(os.sched_getaffinity(0))
    assert side_by_side_slices(1000 * MIN_SLICE_ROWS) == cores
    assert side_by_side_slices(2 * MIN_SLICE_ROWS) == min(cores, 2)
    assert side_by_side_slices(MIN_SLICE_ROWS - 1) == side_by_side_slices(None) == 1
    assert side_by_side_slices(3, requested=5) == 3 and side_by_side_slices(None, 5) == 1
