"""Searching only well-formed trees of the input's words (lexicalized parsing target)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.decoding.search import beam_decode, greedy_decode, greedy_search
from keras_transformer.decoding.tree_constraint import WellFormedTrees
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID

OPEN_S, OPEN_NP, CLOSE = 5, 6, 4
TREES = WellFormedTrees(open_ids=[OPEN_S, OPEN_NP], close_id=CLOSE)
# Sentences of different lengths in one padded batch; 7 is a word here even where repeated.
SOURCES = [[17, 40, 9, 2], [7, 2], [8, 33, 21, 7, 7, 46, 12, 2]]


def padded(rows):
    width = max(map(len, rows))
    return np.array([row + [PAD_ID] * (width - len(row)) for row in rows], np.int32)


def words(source):
    return [token for token in source if token not in (PAD_ID, BOS_ID, EOS_ID)]


@pytest.mark.parametrize(
    "ids, well_formed",
    [
        ([OPEN_S, 9, OPEN_NP, 8, CLOSE, CLOSE, EOS_ID, PAD_ID], True),
        ([OPEN_S, 9, OPEN_NP, 8, CLOSE, CLOSE], True),  # no EOS: cut at the length limit
        ([OPEN_S, 9, OPEN_NP, 8, CLOSE, EOS_ID], False),  # a bracket left open
        ([OPEN_S, 9, OPEN_NP, CLOSE, 8, CLOSE, EOS_ID], False),  # an empty constituent
        ([OPEN_S, 9, CLOSE, OPEN_S, 8, CLOSE, EOS_ID], False),  # two roots
        ([OPEN_S, 8, 9, CLOSE, EOS_ID], False),  # the words out of order
        ([OPEN_S, 9, CLOSE, 8, EOS_ID], False),  # a word outside the root
        ([EOS_ID], False),
    ],
)
def test_is_well_formed_on_hand_written_sequences(ids, well_formed):
    assert TREES.is_well_formed(ids, words=[9, 8]) is well_formed


def test_brackets_are_found_in_a_parser_vocabulary():
    class Vocabulary:
        path, vocab_size = "words.model", 8

        def pieces(self, ids):
            return ["<pad>", "<s>", "</s>", "<unk>", "▁)", "▁(NP", "▁the", "▁(S"][: len(ids)]

    trees = WellFormedTrees.from_tokenizer(Vocabulary())
    assert (trees.open_ids, trees.close_id) == ([5, 7], 4)


def scripted(preference):
    """A step function whose logits rank tokens by `preference` (first = most likely)."""
    logits = np.full([50], -10.0, np.float32)
    logits[preference] = np.arange(len(preference), 0, -1)

    def symbols_to_logits(ids, step, cache):
        return tf.tile(logits[None, :], [tf.shape(ids)[0], 1]), cache

    return symbols_to_logits


def test_each_step_allows_exactly_what_keeps_a_tree_within_the_length_limit():
    # A model that would rather end, then close, then open than write a word: the constraint
    # lets it open while the limit of 7 tokens leaves room, and forces the rest, by hand:
    # (S (S, then no room to open: word 9, close (S, word 8, close the root, EOS.
    step_fn, cache = TREES(scripted([EOS_ID, CLOSE, OPEN_S]), (), [[9, 8, EOS_ID]], [7])
    result = greedy_search(step_fn, tf.constant([BOS_ID]), cache, 7, tf.constant([7]))
    expected = [OPEN_S, OPEN_S, 9, CLOSE, 8, CLOSE, EOS_ID]
    assert result.ids.numpy().tolist() == [expected]
    # Without it, the same model ends at once.
    free = greedy_search(scripted([EOS_ID]), tf.constant([BOS_ID]), (), 7, tf.constant([7]))
    assert free.ids.numpy().tolist()[0][0] == EOS_ID


def test_a_model_that_would_write_another_word_writes_the_next_input_word():
    # Word 30 is not in the sentence: the leaf it stands for is the next input word.
    step_fn, cache = TREES(scripted([30, OPEN_S]), (), [[9, 8, EOS_ID]], [20])
    result = greedy_search(step_fn, tf.constant([BOS_ID]), cache, 20, tf.constant([20]))
    assert result.ids.numpy().tolist()[0][:5] == [OPEN_S, 9, 8, CLOSE, EOS_ID]


@pytest.fixture(scope="module")
def model():
    tf.keras.utils.set_random_seed(11)
    return Transformer(TransformerConfig.preset("tiny", vocab_size=50))


def test_an_untrained_model_searches_only_trees_of_its_words(model):
    source = padded(SOURCES)
    greedy = greedy_decode(model, source, extra_length=12, constraint=TREES)
    beam = beam_decode(model, source, beam_size=3, alpha=0.6, extra_length=12, constraint=TREES)
    for index, row in enumerate(SOURCES):
        assert TREES.is_well_formed(greedy.ids[index].numpy().tolist(), words(row))
        for hypothesis in beam.ids[index].numpy().tolist():
            assert TREES.is_well_formed(hypothesis, words(row))
    unconstrained = greedy_decode(model, source, extra_length=12).ids.numpy().tolist()
    assert not any(
        TREES.is_well_formed(ids, words(row))
        for ids, row in zip(unconstrained, SOURCES, strict=True)
    )


def test_constrained_cached_decoding_equals_uncached_and_compacted(model):
    source = padded(SOURCES)
    for search in (
        lambda cached: greedy_decode(model, source, 12, cached, constraint=TREES),
        lambda cached: beam_decode(model, source, 3, 0.6, 12, cached, constraint=TREES),
    ):
        cached, uncached = search(True), search(False)
        np.testing.assert_array_equal(cached.ids.numpy(), uncached.ids.numpy())
        np.testing.assert_allclose(cached.log_probs, uncached.log_probs, atol=1e-5)
    compacted = tf.function(
        lambda source: beam_decode(model, source, 3, 0.6, 12, constraint=TREES, compact=True)
    )(tf.constant(source))
    np.testing.assert_array_equal(compacted.ids.numpy(), cached.ids.numpy())
    np.testing.assert_allclose(compacted.log_probs, cached.log_probs, atol=1e-5)


@pytest.mark.slow
def test_constrained_search_compiles_with_xla(model):
    source = padded(SOURCES)

    @tf.function(jit_compile=True)
    def search(source):
        return beam_decode(model, source, 3, 0.6, 12, constraint=TREES).ids

    eager = beam_decode(model, source, 3, 0.6, 12, constraint=TREES).ids
    np.testing.assert_array_equal(search(tf.constant(source)).numpy(), eager.numpy())
