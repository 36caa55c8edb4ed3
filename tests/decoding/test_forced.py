"""Forced decoding and n-best output: scores equal the searches' own and an independent sum over
full-pass logits; alignments follow the attention they are read from."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.analysis.attention_plot import attention_maps
from keras_transformer.decoding.beam_search import length_penalty
from keras_transformer.decoding.ensemble import Ensemble
from keras_transformer.decoding.forced import (
    alignment_layer,
    forced_decode,
    pharaoh_alignment,
    subword_links,
)
from keras_transformer.decoding.search import beam_decode, greedy_decode, n_best_hypotheses
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID

SOURCES = np.array([[17, 40, 9, 2, 0, 0], [5, 2, 0, 0, 0, 0], [8, 33, 21, 7, 19, 2]], np.int32)


@pytest.fixture(scope="module")
def model():
    tf.keras.utils.set_random_seed(7)
    return Transformer(TransformerConfig.preset("tiny", vocab_size=50))


def test_forced_log_probs_of_every_beam_hypothesis_equal_the_searchs_own(model):
    result = beam_decode(model, SOURCES, beam_size=4, alpha=0.6, extra_length=6)
    for k in range(4):
        forced = forced_decode(model, SOURCES, result.ids[:, k])
        np.testing.assert_allclose(forced.log_probs, result.log_probs[:, k], atol=1e-4)
        np.testing.assert_array_equal(forced.lengths, result.lengths[:, k])
    greedy = greedy_decode(model, SOURCES, extra_length=6)
    np.testing.assert_allclose(
        forced_decode(model, SOURCES, greedy.ids).log_probs, greedy.log_probs, atol=1e-4
    )


def test_forced_log_probs_of_an_ensemble_equal_its_searchs_own(model):
    tf.keras.utils.set_random_seed(8)
    other = Transformer(TransformerConfig.preset("tiny", vocab_size=50, num_layers=1))
    ensemble = Ensemble([model, other])
    result = beam_decode(ensemble, SOURCES, beam_size=2, alpha=0.6, extra_length=4)
    for k in range(2):
        forced = forced_decode(ensemble, SOURCES, result.ids[:, k])
        np.testing.assert_allclose(forced.log_probs, result.log_probs[:, k], atol=1e-4)


def reference_log_prob(model, source, target):
    """log P(target | source) summed token by token from the full pass's logits in numpy, each
    position normalized over the whole vocabulary, as the searches normalize it (PAD and BOS,
    which they never generate, included)."""
    target_in = np.array([[BOS_ID, *target[:-1]]], np.int32)
    logits = model((source[None], target_in), training=False).numpy()[0].astype(np.float64)
    total = 0.0
    for position, token in enumerate(target):
        row = logits[position]
        assert token not in (PAD_ID, BOS_ID)
        total += row[token] - (row.max() + np.log(np.exp(row - row.max()).sum()))
    return total


def test_forced_log_probs_equal_an_independent_sum_over_full_pass_logits(model):
    targets = [[12, 13, 14, EOS_ID], [EOS_ID], [20, 21, 22, 23, 24, 25, 26, EOS_ID]]
    padded = np.zeros((3, 8), np.int32)
    for row, target in enumerate(targets):
        padded[row, : len(target)] = target
    forced = forced_decode(model, SOURCES, padded)
    expected = [reference_log_prob(model, s, t) for s, t in zip(SOURCES, targets, strict=True)]
    np.testing.assert_allclose(forced.log_probs, expected, atol=1e-4)
    np.testing.assert_array_equal(forced.lengths, [4, 1, 8])


def test_n_best_of_a_beam_of_one_is_greedy_scored_with_the_length_penalty(model):
    greedy = greedy_decode(model, SOURCES, extra_length=6)
    one = n_best_hypotheses(model, SOURCES, 1, 0.6, 6)
    np.testing.assert_array_equal(one.ids[:, 0], greedy.ids)
    np.testing.assert_allclose(one.log_probs[:, 0], greedy.log_probs)
    penalty = ((5 + greedy.lengths.numpy()) / 6) ** 0.6
    np.testing.assert_allclose(one.scores[:, 0], greedy.log_probs / penalty, rtol=1e-6)


def test_n_best_hypotheses_come_best_first_with_scores_log_p_over_lp(model):
    result = n_best_hypotheses(model, SOURCES, 4, 0.6, 6)
    scores = result.scores.numpy()
    assert np.all(np.diff(scores, axis=1) <= 0)
    np.testing.assert_allclose(
        scores, result.log_probs / length_penalty(result.lengths, 0.6), rtol=1e-6
    )


def test_forced_attention_is_the_penultimate_layers_heads_averaged(model):
    target = np.array([[12, 13, 14, EOS_ID]], np.int32)
    forced = forced_decode(model, SOURCES[:1], target, with_attention=True)
    layer = alignment_layer(model.config.num_layers)
    assert layer == model.config.num_layers - 2
    target_in = np.array([BOS_ID, 12, 13, 14], np.int32)
    _, cross = attention_maps(model, SOURCES[0], target_in, layer)
    np.testing.assert_allclose(forced.attention[0], cross.mean(axis=0), atol=1e-6)
    assert alignment_layer(1) == 0


def test_alignment_links_each_target_subword_to_its_most_attended_source_word():
    # Source "a bc d" as subwords a|b c|d + EOS; target "x yz" as x|y z + EOS.
    source, source_words = [10, 11, 12, 13, EOS_ID, PAD_ID], [0, 1, 1, 2]
    target, target_words = [20, 21, 22, EOS_ID], [0, 1, 1]
    attention = np.array(
        [
            [0.1, 0.1, 0.1, 0.2, 0.5, 0.0],  # x: EOS most, then d -> 2-0
            [0.6, 0.1, 0.1, 0.1, 0.1, 0.0],  # y: a -> 0-1
            [0.0, 0.1, 0.7, 0.1, 0.1, 0.0],  # z: c (of bc) -> 1-1
            [0.0, 0.0, 0.0, 0.0, 1.0, 0.0],  # EOS: not aligned
        ]
    )
    links = subword_links(attention, source, target)
    assert links == [(3, 0), (0, 1), (2, 2)]
    assert pharaoh_alignment(links, source_words, target_words) == "0-1 1-1 2-0"
    # Two subwords of a word aligned to one source word make one link.
    assert pharaoh_alignment([(1, 1), (2, 2)], source_words, target_words) == "1-1"
    assert subword_links(attention[:, 4:], [EOS_ID, PAD_ID], target) == []
