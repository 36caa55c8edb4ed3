"""The classical baseline for the parsing experiment (§6.3): a treebank PCFG and its Viterbi parses.

Table 4 compares the Transformer with parsers trained on the whole WSJ. On NLTK's 3,396-tree
sample the honest baseline is the textbook one, trained on the same split and scored by the same
scorer: a probabilistic context-free grammar read off the training trees with NLTK, and the most
probable tree of each sentence under it.

- Grammar. Each training tree is binarized by NLTK: unary chains collapsed into one label
  (`collapse_unary`, part-of-speech tags included: NP+NNP), then `chomsky_normal_form` with
  parent annotation (`vertical=1`: NP^<S>, Johnson, 1998) and second-order horizontal
  Markovization (`horizontal=2`, Klein & Manning, 2003). `nltk.induce_pcfg` turns the
  productions into relative-frequency probabilities; a TOP symbol rewrites to each tree's root.
- Back-off. Parent annotation splits the sample's few trees over more symbols, and some
  sentences have no derivation under it; those are parsed with the grammar one order of parent
  annotation lower (`backoff`), and a sentence no grammar derives gets a flat tree under S. On
  the validation split this scores better than flat trees instead of the back-off, than no
  parent annotation and than two orders of it (docs/RESULTS.md).
- Unknown words. Training words seen once are replaced by a word-shape signature (UNK-CAP-s,
  UNK-NUM, ...), so the grammar has a lexicon for words it has never seen; a signature it does
  not know falls back to plain UNK.
- Parsing. NLTK's `ViterbiParser` is far too slow under this grammar for the test split's
  sentences (its time grows with the cube of their length), so the same Viterbi search runs as
  CKY over a chart `[start, end, symbol]` of log probabilities, all spans of one width and all
  binary rules at once in numpy. tests/parsing/test_pcfg.py checks that both find the same tree and
  probability. The best tree is debinarized with `un_chomsky_normal_form`.

Example:
>>> from nltk import Tree
>>> trees = [Tree.fromstring("(S (NP (DT the) (NN dog)) (VP (VBZ barks)))"),
...          Tree.fromstring("(S (NP (DT a) (NN cat)) (VP (VBZ sleeps)))")] * 2
>>> print(PCFGParser.train(trees).parse("the cat barks".split()))
(S (NP (DT the) (NN cat)) (VP (VBZ barks)))
"""

import collections
import math

import nltk
import numpy as np

TOP = "TOP"
UNKNOWN = "UNK"
# Markers of the binarized labels; none of them occurs in a treebank label ("|" does: ADVP|PRT).
CHILD_MARK, PARENT_MARK, UNARY_MARK = "@", "^", "+"
FALLBACK_ROOT = "S"
CHART_ELEMENTS = 1 << 22  # floats of one scoring block: bounds memory on long sentences


def signature(word: str) -> str:
    """The unknown-word class of `word`: its shape and a common suffix, UNK-CAP-ing say."""
    features = [UNKNOWN]
    if any(c.isdigit() for c in word):
        features.append("NUM")
    elif word[:1].isupper():
        features.append("CAP")
    if "-" in word:
        features.append("DASH")
    lower = word.lower()
    for suffix in ("ing", "ed", "ly", "ion", "er", "est", "al", "ity", "ic", "ive", "s"):
        if lower.endswith(suffix) and len(lower) > len(suffix) + 1:
            features.append(suffix)
            break
    return "-".join(features)


def binarized(tree: nltk.Tree, horizontal=2, vertical=1) -> nltk.Tree:
    """A copy of `tree` in Chomsky normal form with the module's label markers."""
    tree = tree.copy(deep=True)
    tree.collapse_unary(collapsePOS=True, collapseRoot=True, joinChar=UNARY_MARK)
    tree.chomsky_normal_form(
        factor="right",
        horzMarkov=horizontal,
        vertMarkov=vertical,
        childChar=CHILD_MARK,
        parentChar=PARENT_MARK,
    )
    return tree


class PCFGParser:
    """Viterbi parses under a binarized treebank PCFG (see the module docstring).

    Args:
        grammar: an `nltk.PCFG` whose start symbol TOP rewrites to single roots and whose other
            productions are binary (A → B C) or lexical (A → word).
        vocabulary: the words the lexicon knows as themselves; others are read as signatures.
        backoff: the parser `parse_or_flat` asks for sentences this grammar cannot derive.
    """

    def __init__(self, grammar: nltk.PCFG, vocabulary, backoff: "PCFGParser | None" = None):
        self.grammar = grammar
        self.vocabulary = frozenset(vocabulary)
        self.backoff = backoff
        symbols = sorted({str(p.lhs()) for p in grammar.productions()} - {TOP})
        self.symbols = symbols
        index = {s: i for i, s in enumerate(symbols)}
        self.root_log_probs = np.full(len(symbols), -np.inf)
        binary, self.lexicon = [], collections.defaultdict(list)
        for production in grammar.productions():
            lhs, rhs = str(production.lhs()), production.rhs()
            log_prob = math.log(production.prob())
            if lhs == TOP:
                self.root_log_probs[index[str(rhs[0])]] = log_prob
            elif len(rhs) == 2:
                binary.append((index[lhs], index[str(rhs[0])], index[str(rhs[1])], log_prob))
            elif len(rhs) == 1 and isinstance(rhs[0], str):
                self.lexicon[rhs[0]].append((index[lhs], log_prob))
            else:
                raise ValueError(f"not a binarized grammar: {production}")
        binary.sort()
        lhs, left, right, log_probs = (np.array(column) for column in zip(*binary, strict=True))
        self.left, self.right, self.rule_log_probs = left, right, log_probs
        self.rule_lhs = lhs
        # Rules are sorted by their left-hand side: segment k holds the rules of parents[k].
        self.parents, self.segments, self.segment_of_rule = np.unique(
            lhs, return_index=True, return_inverse=True
        )

    @classmethod
    def train(cls, trees, horizontal=2, vertical=1, rare=1) -> "PCFGParser":
        """Induces the grammar from part-of-speech-tagged trees, and for `vertical` > 0 its
        back-off with one order of parent annotation less; words seen at most `rare` times
        train the signatures instead."""
        counts = collections.Counter(word for tree in trees for word in tree.leaves())
        vocabulary = {word for word, count in counts.items() if count > rare}
        productions = []
        for tree in trees:
            tree = binarized(tree, horizontal, vertical)
            for position in tree.treepositions("leaves"):
                if tree[position] not in vocabulary:
                    tree[position] = signature(tree[position])
            rules = tree.productions()
            productions += [nltk.Production(nltk.Nonterminal(TOP), [rules[0].lhs()]), *rules]
        # The last resort of an unknown word: any tag a rare word had, as often as it had it.
        productions += [
            nltk.Production(p.lhs(), [UNKNOWN])
            for p in productions
            if p.is_lexical() and p.rhs()[0].startswith(UNKNOWN)
        ]
        backoff = cls.train(trees, horizontal, vertical - 1, rare) if vertical > 0 else None
        return cls(nltk.induce_pcfg(nltk.Nonterminal(TOP), productions), vocabulary, backoff)

    def _lexical(self, word):
        if word in self.vocabulary:
            return self.lexicon[word]
        return self.lexicon.get(signature(word)) or self.lexicon[UNKNOWN]

    def chart(self, words):
        """CKY: best log probabilities `[start, end, symbol]` and backpointers (split, rule)."""
        n, count = len(words), len(self.symbols)
        best = np.full((n, n + 1, count), -np.inf)
        split = np.zeros((n, n + 1, count), np.int32)
        rule = np.zeros((n, n + 1, count), np.int32)
        for i, word in enumerate(words):
            symbols, log_probs = zip(*self._lexical(word), strict=True)
            best[i, i + 1, list(symbols)] = log_probs
        for width in range(2, n + 1):
            block = max(1, CHART_ELEMENTS // ((width - 1) * len(self.left)))
            for first in range(0, n - width + 1, block):
                starts = np.arange(first, min(first + block, n - width + 1))
                self._fill(best, split, rule, starts, width)
        return best, split, rule

    def _fill(self, best, split, rule, starts, width):
        middles = starts[:, None] + np.arange(1, width)[None, :]  # [starts, width - 1]
        left = best[starts[:, None], middles][..., self.left]  # [starts, width - 1, rules]
        right = best[middles, (starts + width)[:, None]][..., self.right]
        scores = left + right + self.rule_log_probs
        best_split = scores.argmax(axis=1)  # [starts, rules]
        rule_scores = np.take_along_axis(scores, best_split[:, None], axis=1)[:, 0]
        parent_scores = np.maximum.reduceat(rule_scores, self.segments, axis=1)
        rules = np.arange(len(self.left))
        is_best = rule_scores == parent_scores[:, self.segment_of_rule]
        # The first best rule of each parent: its index, where the others get len(rules).
        best_rule = np.minimum.reduceat(np.where(is_best, rules, len(rules)), self.segments, axis=1)
        ends = starts + width
        best[starts[:, None], ends[:, None], self.parents] = parent_scores
        rule[starts[:, None], ends[:, None], self.parents] = best_rule
        split[starts[:, None], ends[:, None], self.parents] = (
            starts[:, None] + 1 + np.take_along_axis(best_split, best_rule, axis=1)
        )

    def viterbi(self, words) -> tuple[nltk.Tree | None, float]:
        """The most probable binarized tree of `words` under TOP (TOP itself left out), and its
        log probability; (None, -inf) if the grammar derives no tree."""
        words = list(words)
        best, split, rule = self.chart(words)
        root_scores = best[0, len(words)] + self.root_log_probs
        root = int(root_scores.argmax())
        if not np.isfinite(root_scores[root]):
            return None, -np.inf
        return self._backtrace(words, split, rule, 0, len(words), root), float(root_scores[root])

    def parse(self, words) -> nltk.Tree | None:
        """The most probable tree of `words`, debinarized, or None if the grammar has none."""
        tree, _ = self.viterbi(words)
        if tree is not None:
            tree.un_chomsky_normal_form(
                expandUnary=True, childChar=CHILD_MARK, parentChar=PARENT_MARK, unaryChar=UNARY_MARK
            )
        return tree

    def parse_or_flat(self, words) -> tuple[nltk.Tree, int]:
        """The parse of the first grammar of the back-off chain that derives `words`, else a
        flat tree (S (XX w1) ...); and which grammar: 0 this one, 1 its back-off, ..., -1 none."""
        words = list(words)
        tree = self.parse(words)
        if tree is not None:
            return tree, 0
        if self.backoff is not None:
            tree, level = self.backoff.parse_or_flat(words)
            if level >= 0:
                return tree, level + 1
        return nltk.Tree(FALLBACK_ROOT, [nltk.Tree("XX", [w]) for w in words]), -1

    def _backtrace(self, words, split, rule, start, end, symbol) -> nltk.Tree:
        label = self.symbols[symbol]
        if end == start + 1:
            return nltk.Tree(label, [words[start]])
        r, middle = rule[start, end, symbol], split[start, end, symbol]
        return nltk.Tree(
            label,
            [
                self._backtrace(words, split, rule, start, middle, self.left[r]),
                self._backtrace(words, split, rule, middle, end, self.right[r]),
            ],
        )
