"""The PCFG baseline (§6.3): the CKY search finds NLTK's Viterbi parse, unknown words get a
signature's rules, and every sentence gets a tree of its words."""

import math

import nltk
import pytest

from keras_transformer.parsing.pcfg import PCFGParser, signature


@pytest.fixture(scope="module")
def short_trees(ptb_splits):
    return [t for t in ptb_splits["train"] if len(t.leaves()) <= 12][:60]


def lexicon_entry(parser, word):
    if word in parser.vocabulary:
        return word
    return signature(word) if signature(word) in parser.lexicon else "UNK"


def test_cky_finds_nltk_viterbi_parse_and_probability(short_trees):
    parser = PCFGParser.train(short_trees)
    viterbi = nltk.ViterbiParser(parser.grammar)
    for gold in short_trees[:4]:
        ours, log_prob = parser.viterbi(gold.leaves())
        # NLTK's parser knows no signatures: it gets the words as the lexicon reads them.
        theirs = next(iter(viterbi.parse([lexicon_entry(parser, w) for w in gold.leaves()])))
        assert log_prob == pytest.approx(math.log(theirs.prob()))
        theirs = nltk.Tree.convert(theirs[0])  # below TOP
        for position, word in zip(theirs.treepositions("leaves"), gold.leaves(), strict=True):
            theirs[position] = word
        assert theirs == ours


def test_unseen_words_parse_and_hopeless_sentences_get_a_flat_tree(short_trees):
    parser = PCFGParser.train(short_trees)
    assert parser.backoff is not None and parser.backoff.backoff is None
    sentence = "Zorblat Inc. said it expects quixotic gains .".split()
    tree, level = parser.parse_or_flat(sentence)
    assert tree.leaves() == sentence and level >= 0 and tree.label() != "TOP"
    tree, level = parser.parse_or_flat([".", ".", "."])  # no training tree ends like that
    assert (" ".join(str(tree).split()), level) == ("(S (XX .) (XX .) (XX .))", -1)


def test_signatures_keep_shape_and_suffix():
    assert [signature(w) for w in ("Zorblat", "1989-90", "quixotic", "running", "x")] == [
        "UNK-CAP",
        "UNK-NUM-DASH",
        "UNK-ic",
        "UNK-ing",
        "UNK",
    ]
