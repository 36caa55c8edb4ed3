"""Paragraphs held in runs (a .docx paragraph's runs, the text between an HTML sentence's inline
tags), translated sentence by sentence and put back into the same runs.

A paragraph is a list of runs, each a text with formatting of its own that the caller keeps (a
run's bold, the tags around it). `Layout` joins each paragraph's runs, splits the text into
sentences (`sentences.split`), and lists the sentences to translate (`units`), each with the
fragments of runs it spans: a sentence is translated whole, as plain text, whatever runs it
crosses. `Layout.put_back` gives each paragraph's runs back with every sentence replaced by its
translation, spread over the runs it came from (`spread`), the text between sentences staying
in its own run.

`spread` places each target word in the run of the source words it is aligned to (Pharaoh
links `i-j`, from the model's attention: `libretranslate`), keeping the runs in their order:
of the assignments of target words to runs that never go back to an earlier run, it takes one
that agrees with the most links (an unaligned word agrees with any run), moving on to a later
run as late as it can. A sentence's closing punctuation stays in the run that held the
source's, when that run comes after the last word's. Without links (a
sentence the model translated in parts, or an export without the `attention` signature), the
target words are spread in proportion: a word goes to the run at the same relative place in
the source. Runs in the middle that no target word lands in are left empty.

Example:
>>> spread(["A ", "dog", " runs."], "Ein Hund rennt.", [(0, 0), (1, 1), (2, 2)])
['Ein ', 'Hund', ' rennt.']
>>> layout = Layout([["A ", "dog", " runs. It barks."]])
>>> layout.units
['A dog runs.', 'It barks.']
>>> layout.put_back(["Ein Hund rennt.", "Er bellt."], [[(0, 0), (1, 1), (2, 2)], None])
[['Ein ', 'Hund', ' rennt. Er bellt.']]
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

from keras_transformer.server.documents import sentences

WORD = re.compile(r"\S+")
# A sentence's closing punctuation, kept in the run it closes in the source
# ("A <i>cat</i>." keeps its period out of the italics).
FINAL_MARK = re.compile(r"[.!?…。！？]+\s*\Z")

Links = Sequence[tuple[int, int]]  # (source word, target word) pairs, 0-based


@dataclass(frozen=True)
class _Part:
    """A sentence (`unit` its index) or the text between two (`unit` None), and the part of each
    run it spans: (run index, text)."""

    unit: int | None
    pieces: tuple[tuple[int, str], ...]


class Layout:
    """The sentences of paragraphs held in runs (`paragraphs[p][r]`: the text of run r of
    paragraph p), to translate (`units`) and put back into the runs (`put_back`)."""

    def __init__(self, paragraphs: Sequence[Sequence[str]]):
        self.units: list[str] = []
        self.spanning: list[int] = []  # the units that span more than one run
        self._runs = [len(runs) for runs in paragraphs]
        self._parts = [self._split(runs) for runs in paragraphs]

    def _split(self, runs) -> list[_Part]:
        starts = [0]
        for run in runs:
            starts.append(starts[-1] + len(run))
        text, parts, start = "".join(runs), [], 0
        for piece in sentences.split(text):
            end = start + len(piece.text)
            pieces = tuple(
                (r, text[max(start, starts[r]) : min(end, starts[r + 1])])
                for r in range(len(runs))
                if max(start, starts[r]) < min(end, starts[r + 1])
            )
            unit = None
            if piece.translate:
                unit = len(self.units)
                self.units.append(piece.text)
                if len(pieces) > 1:
                    self.spanning.append(unit)
            parts.append(_Part(unit, pieces))
            start = end
        return parts

    def put_back(
        self, translations: Sequence[str], links: Sequence[Links | None]
    ) -> list[list[str]]:
        """Each paragraph's runs with each sentence replaced by its translation, spread over its
        runs by its `links` (None: in proportion)."""
        result = []
        for count, parts in zip(self._runs, self._parts, strict=True):
            runs = [""] * count
            for part in parts:
                texts = [text for _, text in part.pieces]
                if part.unit is not None:
                    texts = spread(texts, translations[part.unit], links[part.unit])
                for (r, _), text in zip(part.pieces, texts, strict=True):
                    runs[r] += text
            result.append(runs)
        return result


def spread(pieces: Sequence[str], translation: str, links: Links | None) -> list[str]:
    """`translation` of the sentence `"".join(pieces)` cut into as many pieces, each target word
    in the piece its source words are in (the module docstring)."""
    if len(pieces) == 1:
        return [translation]
    targets = list(WORD.finditer(translation))
    if not targets:
        return [translation] + [""] * (len(pieces) - 1)
    source = "".join(pieces)
    piece_of_char = [p for p, piece in enumerate(pieces) for _ in piece]
    if links is None:
        places = [
            piece_of_char[
                min(
                    len(source) - 1, int((w.start() + w.end()) / 2 / len(translation) * len(source))
                )
            ]
            for w in targets
        ]
    else:
        words = [piece_of_char[w.start()] for w in WORD.finditer(source)]
        wanted = [set() for _ in targets]
        for i, j in links:
            if i < len(words) and j < len(targets):
                wanted[j].add(words[i])
        places = _monotone(wanted, len(pieces))
    mark, mark_piece = FINAL_MARK.search(translation), piece_of_char[len(source.rstrip()) - 1]
    if mark and FINAL_MARK.search(source) and mark_piece > places[-1]:
        core = translation[: mark.start()].rstrip()
        core_words = list(WORD.finditer(core))
        out = _cut(pieces, core, core_words, places[: len(core_words)] or [places[0]])
        out[mark_piece] += translation[len(core) :]
        return out
    return _cut(pieces, translation, targets, places)


def _monotone(wanted: list[set[int]], count: int) -> list[int]:
    """The non-decreasing piece of each target word that disagrees with the fewest `wanted`
    pieces (an empty set agrees with any), by dynamic programming over (word, piece); of
    equal ones, the one that moves on to later pieces last (crossed links, as an adjective
    after its noun, leave the earlier words in the earlier pieces)."""
    inf = len(wanted) + 1
    cost = [[0 if not want or p in want else 1 for p in range(count)] for want in wanted]
    best, came_from = [cost[0][:]], []
    for j in range(1, len(wanted)):
        row, back, low, low_at = [], [], inf, 0
        for p in range(count):
            if best[-1][p] < low:  # the cheapest piece so far; of equals, the first
                low, low_at = best[-1][p], p
            row.append(low + cost[j][p])
            back.append(low_at)
        best.append(row)
        came_from.append(back)
    place = min(range(count), key=lambda p: (best[-1][p], p))
    places = [place]
    for back in reversed(came_from):
        place = back[place]
        places.append(place)
    return places[::-1]


def _cut(pieces, translation, targets, places) -> list[str]:
    """The translation's words in their pieces; the spaces between two words of different
    pieces go where the source had them: with the earlier piece if it ends in a space, else
    with the later."""
    out = [""] * len(pieces)
    out[places[0]] += translation[: targets[0].start() if targets else len(translation)]
    for k, word in enumerate(targets):
        out[places[k]] += word.group()
        end = targets[k + 1].start() if k + 1 < len(targets) else len(translation)
        gap = translation[word.end() : end]
        if (
            k + 1 < len(targets)
            and places[k + 1] != places[k]
            and not pieces[places[k]][-1:].isspace()
        ):
            out[places[k + 1]] += gap
        else:
            out[places[k]] += gap
    return out
