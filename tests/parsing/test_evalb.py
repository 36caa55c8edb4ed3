"""EVALB's labeled bracket score under COLLINS.prm (§6.3): hand-worked examples of each rule, and
the plain bracket counts of the independent PYEVALB scorer on real trees."""

import nltk
import pytest
from PYEVALB import parser as pyevalb_parser
from PYEVALB import scorer as pyevalb_scorer

from keras_transformer.parsing.evalb import (
    EvalbParameters,
    corpus_score,
    labeled_brackets,
    sentence_counts,
)


def tree(text):
    return nltk.Tree.fromstring(text)


def counts(gold, test, parameters=None):
    result = sentence_counts(tree(gold), tree(test), *([parameters] if parameters else []))
    return result.matched, result.gold, result.test


def test_labeled_spans_over_words_not_tags():
    gold = "(S (NP (DT The) (NN dog)) (VP (VBZ barks)))"
    # S 0-3, NP 0-2, VP 2-3 against S 0-3, NP 0-1, VP 1-3: only S matches.
    assert counts(gold, "(S (NP (XX The)) (VP (XX dog) (XX barks)))") == (1, 3, 3)
    # The same spans with another label do not match; tags are not brackets.
    assert counts(gold, "(S (VP (XX The) (XX dog)) (NP (XX barks)))") == (1, 3, 3)
    assert counts(gold, "(S (NP (NN The) (VB dog)) (VP (JJ barks)))") == (3, 3, 3)


def test_punctuation_is_left_out_of_spans_by_the_gold_tags():
    gold = "(S (NP (NNP John)) (VP (VBZ runs)) (. .))"
    # The "." attached inside the VP spans the same words once punctuation is deleted.
    assert counts(gold, "(S (NP (XX John)) (VP (XX runs) (XX .)))") == (3, 3, 3)
    assert counts(
        gold, "(S (NP (XX John)) (VP (XX runs) (XX .)))", EvalbParameters(frozenset())
    ) == (
        2,
        3,
        3,
    )
    # A constituent of punctuation alone spans no word and is dropped (EVALB's zero span).
    parenthetical = "(S (NP (NNP John)) (PRN (, ,) (: --)) (VP (VBZ runs)))"
    assert counts(parenthetical, "(S (NP (XX John)) (XX ,) (XX --) (VP (XX runs)))") == (3, 3, 3)


def test_root_wrappers_function_tags_and_traces_are_not_brackets():
    gold = "(S (NP-SBJ (NNP John)) (VP (VBZ runs)))"
    test = "(S (NP (XX John)) (VP (XX runs)))"
    assert counts(gold, test) == (3, 3, 3)
    for wrapper in ("TOP", "ROOT", ""):
        assert counts(f"({wrapper} {gold})", test) == (3, 3, 3)
    # The subject trace spans no word; EVALB keeps the root constituent itself.
    traced = "(S (NP-SBJ (-NONE- *)) (VP (VBZ runs)))"
    assert counts(traced, "(S (VP (XX runs)))") == (2, 2, 2)


def test_advp_and_prt_are_one_label():
    gold = "(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))"
    assert counts(gold, "(S (NP (XX He)) (VP (XX gave) (ADVP (XX up))))") == (4, 4, 4)
    assert counts(gold, "(S (NP (XX He)) (VP (XX gave) (ADJP (XX up))))") == (3, 4, 4)


def test_identical_brackets_are_matched_as_a_multiset():
    double = "(S (NP (NP (NN Rain))) (VP (VBZ falls)))"
    single = "(S (NP (NN Rain)) (VP (VBZ falls)))"
    assert counts(double, single) == (3, 4, 3)
    assert counts(single, double) == (3, 3, 4)
    assert counts(double, double) == (4, 4, 4)


def test_corpus_scores_sum_brackets_over_sentences():
    golds = [tree("(S (NP (DT The) (NN dog)) (VP (VBZ barks)))"), tree("(NP (NN Rain))")]
    tests = [tree("(S (NP (XX The)) (VP (XX dog) (XX barks)))"), tree("(NP (XX Rain))")]
    score = corpus_score(golds, tests)
    # 1 + 1 matched of 3 + 1 brackets each side: 50%, not the mean of 33% and 100%.
    assert (score["precision"], score["recall"], score["f1"]) == (50.0, 50.0, 50.0)
    assert (score["complete_match"], score["sentences"]) == (50.0, 2)
    with pytest.raises(ValueError, match="sentence 2: the trees' words differ"):
        corpus_score(golds, [tests[0], tree("(NP (XX Snow))")])


def perturbed(t):
    """Another parse of the same words: PPs flattened into their parents, ADJP called ADVP."""
    if isinstance(t[0], str):
        return t.copy()
    children = []
    for child in t:
        if isinstance(child, nltk.Tree) and child.label() == "PP":
            children.extend(perturbed(grandchild) for grandchild in child)
        else:
            children.append(perturbed(child))
    return nltk.Tree("ADVP" if t.label() == "ADJP" else t.label(), children)


def flat(t):
    return " ".join(str(t).split())


def test_bracket_counts_agree_with_pyevalb_on_real_trees(ptb_splits):
    """PYEVALB counts every labeled bracket, root included, deletes nothing and matches sets,
    so it is compared with the scorer's plain parameters on sentences without duplicates."""
    plain = EvalbParameters(delete_labels=frozenset(), equivalent_labels=())
    compared = 0
    for gold in ptb_splits["validation"]:
        test = perturbed(gold)
        ours = sentence_counts(gold, test, plain)
        theirs = pyevalb_scorer.Scorer().score_trees(
            pyevalb_parser.create_from_bracket_string(flat(gold)),
            pyevalb_parser.create_from_bracket_string(flat(test)),
        )
        everything = [True] * len(gold.leaves())
        brackets = [labeled_brackets(t, everything, plain) for t in (gold, test)]
        if any(max(b.values()) > 1 for b in brackets):
            continue  # a duplicate bracket: PYEVALB's sets and EVALB's multisets differ
        assert (ours.matched, ours.gold, ours.test) == (
            theirs.matched_brackets,
            theirs.gold_brackets,
            theirs.test_brackets,
        ), flat(gold)
        compared += 1
    assert compared > 250
