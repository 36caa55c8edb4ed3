"""Paragraphs as sentences and the spacing between them, split for translation and joined back.

The model translates sentences (§6.1: it was trained on sentence pairs, and its source is cut at
`max_length`), while LibreTranslate's API takes paragraphs. A text becomes a list of `Piece`s:
the sentences, which are translated, and the text between them (spaces, line breaks), which is
kept. Joining the pieces, each sentence replaced by its translation, gives the text back with
its own spacing.

A sentence ends at `.`, `!`, `?` or `…` (and any closing quotes or brackets) before a space and a
word that does not start in lower case ("e.g. this" stays one sentence), at `。`, `！` or `？`,
and at a line break. A sentence still too long for the model is split further by `clauses`
(after `,`, `;` or `:`), then by `halves` (at the space nearest its middle).

Example:
>>> pieces = split("Hello there.  How are you?\\nFine!")
>>> [piece.text for piece in pieces if piece.translate]
['Hello there.', 'How are you?', 'Fine!']
>>> join(pieces, ["Hallo.", "Wie geht's?", "Gut!"])
"Hallo.  Wie geht's?\\nGut!"
"""

import re
from collections.abc import Iterable
from typing import NamedTuple

# A sentence: from its first non-space character up to its end (lazy), where an end is closing
# punctuation before a space and a word not in lower case, East Asian closing punctuation, a line
# break, or the end of the text (the spaces before those two are not the sentence's).
SENTENCE = re.compile(
    r"\S.*?(?:"
    r"""[.!?…]+["'”’»)\]]*(?=\s+[^\sa-z]|\s*\Z)"""
    r"""|[。！？]+["'”’」』)]*"""
    r"|(?=[ \t]*\n)|(?=\s*\Z))",
    re.DOTALL,
)
CLAUSE = re.compile(r"\S.*?(?:[,;:，；：](?=\s)|(?=\s*\Z))", re.DOTALL)


class Piece(NamedTuple):
    """A part of a text: a sentence to translate (`translate`), or the text between two."""

    text: str
    translate: bool


def _pieces(text: str, pattern: re.Pattern) -> list[Piece]:
    """`text` cut at each match of `pattern` (the parts to translate), the rest kept."""
    pieces, end = [], 0
    for match in pattern.finditer(text):
        if match.start() > end:
            pieces.append(Piece(text[end : match.start()], False))
        pieces.append(Piece(match.group(), True))
        end = match.end()
    if end < len(text):
        pieces.append(Piece(text[end:], False))
    return pieces


def split(text: str) -> list[Piece]:
    """The sentences of `text` and the spacing between them, in order."""
    return _pieces(text, SENTENCE)


def clauses(sentence: str) -> list[Piece]:
    """A sentence cut after each clause mark followed by a space."""
    return _pieces(sentence, CLAUSE)


def halves(sentence: str) -> list[Piece]:
    """A sentence (no space at either end) cut at the space nearest its middle; a single word
    stays whole."""
    gaps = list(re.finditer(r"\s+", sentence))
    if not gaps:
        return [Piece(sentence, True)]
    gap = min(gaps, key=lambda match: abs(match.start() - len(sentence) // 2))
    return [
        Piece(sentence[: gap.start()], True),
        Piece(gap.group(), False),
        Piece(sentence[gap.end() :], True),
    ]


def join(pieces: Iterable[Piece], translations: Iterable[str]) -> str:
    """The text of `pieces`, each one to translate replaced by the next of `translations`."""
    translations = iter(translations)
    return "".join(next(translations) if piece.translate else piece.text for piece in pieces)
