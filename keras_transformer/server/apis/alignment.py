"""Word alignments of a sentence and its translation, from an export's `attention` signature, as
`keras-transformer translate --alignments` takes them from the model (`decoding.forced`).

The signature gives each sentence's subwords (`source_pieces`, `target_pieces`: SentencePiece's,
a word's first piece led by "▁"; EOS "</s>", padding "") and the encoder-decoder attention of
every layer and head. The alignment layer's heads are averaged, and each target subword but
EOS is linked to the source subword, EOS, padding and a multilingual model's target token left
out, that it weighs most; the links are lifted to words (source word i and target word j are
linked when any of their subwords are), counted as `runs.WORD` counts them in the texts, and
given as Pharaoh pairs `(i, j)`. A sentence whose pieces do not make as many words as its text
has (a normalization that merged or split one) has no alignment: None.

Example:
>>> import numpy as np
>>> attention = np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8]])
>>> word_links(["▁A", "▁dog", "</s>"], ["▁Ein", "▁Hund", "</s>"], attention, "A dog", "Ein Hund")
[(0, 0), (1, 1)]
"""

from collections.abc import Sequence

import numpy as np

from keras_transformer.server.documents.runs import WORD

WORD_START = "▁"
NOT_WORDS = ("</s>", "")


def alignment_layer(num_layers: int) -> int:
    """The decoder layer whose attention aligns: the penultimate, or the only one
    (`decoding.forced.alignment_layer`, after Garg et al., 2019)."""
    return max(num_layers - 2, 0)


def _word_of_piece(pieces: Sequence[str], skip_words: int) -> list[int]:
    """The word of each piece (-1: EOS, padding, or one of the first `skip_words` words)."""
    words, word = [], -1
    for piece in pieces:
        if piece in NOT_WORDS:
            words.append(-1)
            continue
        if piece.startswith(WORD_START) or word < 0:
            word += 1
        words.append(word - skip_words if word >= skip_words else -1)
    return words


def word_links(
    source_pieces: Sequence[str],
    target_pieces: Sequence[str],
    attention,
    source: str,
    translation: str,
    skip_source_words: int = 0,
) -> list[tuple[int, int]] | None:
    """Pharaoh links of `source` (the sentence, without the `skip_source_words` words of a
    target token before it) and `translation`, from the alignment layer's attention
    `[target, source]` averaged over heads; None when the pieces do not match the words."""
    source_words = _word_of_piece(source_pieces, skip_source_words)
    target_words = _word_of_piece(target_pieces, 0)
    if max(source_words, default=-1) + 1 != len(WORD.findall(source)):
        return None
    if max(target_words, default=-1) + 1 != len(WORD.findall(translation)):
        return None
    attention = np.asarray(attention, dtype=np.float64)[: len(target_words), : len(source_words)]
    words = np.array(source_words)
    weights = np.where(words[None, :] >= 0, attention, -np.inf)
    links = {
        (source_words[int(np.argmax(weights[t]))], word)
        for t, word in enumerate(target_words)
        if word >= 0
    }
    return sorted(links)
