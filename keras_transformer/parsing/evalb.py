"""Labeled bracket precision, recall and F1 as EVALB computes them with COLLINS.prm (§6.3, Table 4).

§6.3 reports the F1 of section 23 of the WSJ, which is EVALB's labeled bracket score (Sekine &
Collins, 1997) under the parameter file COLLINS.prm. This module is that scorer for `nltk.Tree`s:

- A bracket is the label and word span of each constituent above the part-of-speech level; the
  part-of-speech tags themselves are not brackets.
- Words whose tag is a DELETE_LABEL (-NONE- and the punctuation , : `` '' .) are removed before
  spans are counted, and brackets that then span no word are dropped.
- Brackets labeled with a DELETE_LABEL are dropped: TOP, the root wrapper of treebank files
  (ROOT and the unlabeled wrapper likewise; the root constituent itself, S say, counts, as in
  EVALB).
- Labels are read up to their first "-" or "=" (NP-SBJ-1 is NP); EQ_LABEL makes ADVP and PRT one
  label.
- Brackets are matched as multisets: two identical gold brackets need two test ones.
- Precision = matched / test brackets and recall = matched / gold brackets, both summed over the
  corpus; F1 is their harmonic mean; a complete match is a sentence whose brackets all match.

One difference from EVALB: punctuation is deleted by the gold tree's tags, on both sides (the
words of the two trees are checked to be the same), as if the gold tags were copied into the test
tree. EVALB deletes by each tree's own tags, so a parser that tags punctuation differently meets
a "length unmatch"; the sequence-to-sequence parser tags every non-punctuation word XX. Empty
elements (-NONE-) are left out of each tree by its own tags, as EVALB does.

Example:
>>> from nltk import Tree
>>> gold = Tree.fromstring("(S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))")
>>> test = Tree.fromstring("(S (NP (XX The)) (VP (XX dog) (XX barks)) (. .))")
>>> score = corpus_score([gold], [test])
>>> score["matched_brackets"], score["gold_brackets"], score["test_brackets"]
(1, 3, 3)
>>> round(score["f1"], 2)
33.33
"""

import collections
import dataclasses

import nltk

from pipelines.ptb import is_preterminal, strip_function_tags

# Root wrappers: TOP is COLLINS.prm's; ROOT and "" are other treebanks' names for the same.
WRAPPER_LABELS = frozenset({"TOP", "ROOT", ""})
EMPTY_ELEMENT = "-NONE-"


@dataclasses.dataclass(frozen=True)
class EvalbParameters:
    """The parts of an EVALB parameter file that decide labeled bracket scores.

    Attributes:
        delete_labels: DELETE_LABEL: preterminals whose words are removed, and brackets dropped.
        equivalent_labels: EQ_LABEL pairs, each counted as one label.
        strip_function_tags: read labels up to their first "-" or "=" (EVALB always does).
    """

    delete_labels: frozenset = frozenset(
        {EMPTY_ELEMENT, ",", ":", "``", "''", "."} | WRAPPER_LABELS
    )
    equivalent_labels: tuple = (("ADVP", "PRT"),)
    strip_function_tags: bool = True

    def label(self, label: str) -> str:
        if self.strip_function_tags:
            label = strip_function_tags(label)
        for first, second in self.equivalent_labels:
            if label == second:
                return first
        return label


COLLINS = EvalbParameters()


def _counted_flags(tree: nltk.Tree, counted) -> list[bool]:
    """Per word of `tree`: False for an empty element (-NONE-), else the next of `counted`."""
    counted = iter(counted)
    return [tag != EMPTY_ELEMENT and next(counted) for _, tag in tree.pos()]


def labeled_brackets(tree: nltk.Tree, kept, parameters: EvalbParameters = COLLINS):
    """The multiset of `(label, start, end)` brackets of `tree`, spans counting only the words
    with `kept[i]` true (a `collections.Counter`)."""
    kept_before = [0]
    for keep in kept:
        kept_before.append(kept_before[-1] + bool(keep))
    brackets = collections.Counter()

    def visit(node, first) -> int:  # the number of words under `node`, which starts at `first`
        if isinstance(node, str) or is_preterminal(node):
            return 1
        length = 0
        for child in node:
            length += visit(child, first + length)
        start, end = kept_before[first], kept_before[first + length]
        label = parameters.label(node.label())
        if end > start and label not in parameters.delete_labels:
            brackets[label, start, end] += 1
        return length

    if len(tree.leaves()) != len(kept):
        raise ValueError(f"{len(tree.leaves())} words for {len(kept)} kept flags")
    visit(tree, 0)
    return brackets


@dataclasses.dataclass
class BracketCounts:
    """Brackets of a sentence or a corpus: matched, in the gold trees, in the test trees."""

    matched: int = 0
    gold: int = 0
    test: int = 0
    sentences: int = 0
    complete: int = 0

    def __iadd__(self, other):
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self


def sentence_counts(gold, test, parameters: EvalbParameters = COLLINS) -> BracketCounts:
    """Bracket counts of one test tree against its gold tree: the same words in the same order,
    once each tree's empty elements (-NONE-) are left out."""
    gold_words = [(w, tag) for w, tag in gold.pos() if tag != EMPTY_ELEMENT]
    test_words = [w for w, tag in test.pos() if tag != EMPTY_ELEMENT]
    if [w for w, _ in gold_words] != test_words:
        raise ValueError(f"the trees' words differ: {[w for w, _ in gold_words]} / {test_words}")
    counted = [tag not in parameters.delete_labels for _, tag in gold_words]
    gold_brackets = labeled_brackets(gold, _counted_flags(gold, counted), parameters)
    test_brackets = labeled_brackets(test, _counted_flags(test, counted), parameters)
    counts = BracketCounts(
        matched=(gold_brackets & test_brackets).total(),
        gold=gold_brackets.total(),
        test=test_brackets.total(),
        sentences=1,
    )
    counts.complete = int(counts.matched == counts.gold == counts.test)
    return counts


def corpus_score(golds, tests, parameters: EvalbParameters = COLLINS) -> dict:
    """EVALB's corpus summary of aligned gold and test trees, percentages like EVALB's.

    Returns {"precision", "recall", "f1", "complete_match", "sentences", "matched_brackets",
    "gold_brackets", "test_brackets"}.
    """
    golds, tests = list(golds), list(tests)
    if len(golds) != len(tests):
        raise ValueError(f"{len(tests)} test trees for {len(golds)} gold trees")
    total = BracketCounts()
    for index, (gold, test) in enumerate(zip(golds, tests, strict=True)):
        try:
            total += sentence_counts(gold, test, parameters)
        except ValueError as error:
            raise ValueError(f"sentence {index + 1}: {error}") from None
    precision = 100 * total.matched / total.test if total.test else 0.0
    recall = 100 * total.matched / total.gold if total.gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "complete_match": 100 * total.complete / total.sentences if total.sentences else 0.0,
        "sentences": total.sentences,
        "matched_brackets": total.matched,
        "gold_brackets": total.gold,
        "test_brackets": total.test,
    }
