"""English constituency parsing with the translation model and its trainer (§6.3, Table 4).

"We trained a 4-layer transformer with d_model = 1024 on the Wall Street Journal (WSJ) portion
of the Penn Treebank, about 40K training sentences. [...] During inference, we increased the
maximum output length to input length + 300. We used a beam size of 21 and α = 0.3 for both WSJ
only and the semi-supervised setting." That search is `search_settings.PARSING_SEARCH`.

Nothing here is a second model: the Transformer and the `train` command are the translation
ones, on `pipelines.ptb` (sentences in, linearized trees out). What parsing adds is at the output.
Each decoded string is repaired into a well-formed tree of the sentence's words
(`pipelines.ptb.repair`, after `pipelines.ptb.align_leaves` for a lexicalized output), the share
of strings that needed it is reported as the repair rate, and the trees are scored with EVALB's
labeled brackets (`keras_transformer.parsing.evalb`).

Example:
>>> scores = parse_scores(
...     ["Ms. Haag plays Elianti ."],
...     ["(S (NP XX XX ) (VP XX XX ) ) )"],
...     ["(S (NP XX XX ) (VP XX (NP XX ) ) . )"])
>>> round(scores["f1"], 2), scores["repaired"]
(85.71, 1)
"""

import sys

from keras_transformer.parsing.evalb import corpus_score
from pipelines.ptb import align_leaves, delinearize, repair


def hypothesis_trees(sentences, hypotheses):
    """Decoded strings → (trees of the sentences' words, how many strings were repaired)."""
    trees, repaired = [], 0
    for sentence, hypothesis in zip(sentences, hypotheses, strict=True):
        tree, changed = repaired_tree(sentence, hypothesis)
        trees.append(tree)
        repaired += changed
    return trees, repaired


def repaired_tree(sentence, hypothesis):
    """A decoded string → (the repaired tree over the sentence's words, whether it changed)."""
    words = sentence.split()
    aligned = align_leaves(hypothesis, words)
    linearized, changed = repair(aligned, len(words))
    return delinearize(linearized, words), changed or aligned != " ".join(hypothesis.split())


def present(sentence, hypothesis) -> str:
    """A decoded string → the repaired tree over the sentence's words, on one line; an empty
    line stays empty (a tree needs a word)."""
    if not sentence.split():
        return ""
    return repaired_tree(sentence, hypothesis)[0].pformat(margin=sys.maxsize)


def parse_scores(sentences, hypotheses, references) -> dict:
    """EVALB precision, recall, F1 and complete match of decoded strings against linearized gold
    trees, with the repair count and rate (percent of sentences)."""
    golds = [delinearize(r, s.split()) for s, r in zip(sentences, references, strict=True)]
    trees, repaired = hypothesis_trees(sentences, hypotheses)
    scores = corpus_score(golds, trees)
    scores.update(repaired=repaired, repair_rate=100 * repaired / max(len(trees), 1))
    return scores


def summary(scores) -> str:
    return (
        f"F1 {scores['f1']:.2f} (precision {scores['precision']:.2f}, recall "
        f"{scores['recall']:.2f}), complete match {scores['complete_match']:.1f}%, repaired "
        f"{scores['repaired']}/{scores['sentences']} ({scores['repair_rate']:.1f}%)"
    )
