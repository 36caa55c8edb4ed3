"""What every document format gives: its paragraphs as runs of text, and a way to write the
document back with other runs; and the translation of a document through it.

A format module (`formats`) reads a file's bytes into a `Document`: `paragraphs[p][r]` is the
text of run r of paragraph p (a .docx run, an HTML text between inline tags, a subtitle), and
`write(paragraphs)` the file's bytes with those runs in their places, everything else (styles,
tables, slides, timings, markup) as it was. `translate` splits the paragraphs into sentences
(`runs.Layout`), refuses a document of more sentences than allowed before translating any, has
them translated by a `SentenceTranslator` (the server's, through the same model calls as
`/translate`) and puts the translations back into the runs, aligned.
"""

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from keras_transformer.server.documents.runs import Layout, Links
from keras_transformer.server.errors import bad_request


@dataclass
class Document:
    """A file's paragraphs of runs, and `write`, which gives its bytes with new runs."""

    paragraphs: list[list[str]]
    write: Callable[[list[list[str]]], bytes]


def of_runs(runs: Sequence[Sequence], save: Callable, attribute: str = "text") -> Document:
    """A `Document` over a library's run objects (`runs[p][r]`), whose text is their
    `attribute`, saved by `save(file)` once the new texts are set."""

    def write(paragraphs) -> bytes:
        for paragraph_runs, texts in zip(runs, paragraphs, strict=True):
            for run, text in zip(paragraph_runs, texts, strict=True):
                # A run left as it was is not rewritten: python-docx's setter would drop what
                # else it holds (a picture, a field's code).
                if getattr(run, attribute) != text:
                    setattr(run, attribute, text)
        out = io.BytesIO()
        save(out)
        return out.getvalue()

    return Document([[getattr(run, attribute) for run in paragraph] for paragraph in runs], write)


class SentenceTranslator(Protocol):
    """Translates sentences, and aligns their words to their translations' words."""

    def translate(self, units: Sequence[str]) -> list[str]:
        """The translation of each sentence."""

    def alignments(self, units: Sequence[str], translations: Sequence[str]) -> list[Links | None]:
        """Each pair's word alignment, or None where there is none to be had."""


def translate(document: Document, translator: SentenceTranslator, max_sentences: int) -> bytes:
    """The document's bytes with each sentence translated, in its runs; refused (400) beyond
    `max_sentences` sentences, before any is translated."""
    layout = Layout(document.paragraphs)
    if len(layout.units) > max_sentences:
        raise bad_request(
            f"Invalid request: the file holds {len(layout.units)} sentences, over the server's "
            f"limit of {max_sentences} a file (max_file_sentences)"
        )
    return document.write(translated_runs(layout, translator))


def translated_runs(layout: Layout, translator: SentenceTranslator) -> list[list[str]]:
    """The runs of `layout`'s paragraphs with each sentence translated, spread over the runs
    it spans by its alignment (`runs.spread`)."""
    translations = translator.translate(layout.units) if layout.units else []
    links: list[Links | None] = [None] * len(layout.units)
    if layout.spanning:
        found = translator.alignments(
            [layout.units[u] for u in layout.spanning],
            [translations[u] for u in layout.spanning],
        )
        for unit, unit_links in zip(layout.spanning, found, strict=True):
            links[unit] = unit_links
    return layout.put_back(translations, links)
