"""OpenDocument text (.odt) by odfpy: each paragraph and heading (`text:p`, `text:h`) is a
paragraph, its text nodes its runs (inside `text:span` and `text:a` too), so a span's style stays
on the words aligned to its own. A run of spaces written as `text:s` is read as those spaces;
a tab or line break ends a sentence."""

import io

from odf import opendocument
from odf.element import Text
from odf.namespaces import TEXTNS

from keras_transformer.server.documents import checks
from keras_transformer.server.documents.document import Document, of_runs

EXTENSIONS = (".odt",)
MEDIA_TYPE = "application/vnd.oasis.opendocument.text"
PARAGRAPHS = {(TEXTNS, "p"), (TEXTNS, "h")}
SPACES = (TEXTNS, "s")
BREAKS = {(TEXTNS, "tab"), (TEXTNS, "line-break")}


def read(data: bytes, settings) -> Document:
    return read_opendocument(data, settings, ".odt", MEDIA_TYPE, lambda document: document.text)


def read_opendocument(data: bytes, settings, suffix, media_type, body) -> Document:
    """An OpenDocument file of `media_type`, its paragraphs those under `body(document)`."""
    checks.archive(data, suffix, settings, mimetype=media_type.encode())
    document = opendocument.load(io.BytesIO(data))
    runs = [
        nodes
        for paragraph in _elements(body(document))
        if paragraph.qname in PARAGRAPHS
        for nodes in _text_nodes(paragraph)
        if nodes
    ]
    return of_runs(runs, document.write, "data")


def _elements(element):
    """`element` and everything under it, in document order."""
    yield element
    for child in element.childNodes:
        if child.nodeType == child.ELEMENT_NODE:
            yield from _elements(child)


def _text_nodes(paragraph) -> list[list[Text]]:
    """The text nodes of a paragraph, not of the paragraphs inside it (a note's, a frame's),
    each `text:s` replaced by the spaces it stands for; cut where a tab or line break
    (`text:tab`, `text:line-break`) parts them, which a sentence never crosses."""
    parts = [[]]
    for child in list(paragraph.childNodes):
        if child.nodeType == child.TEXT_NODE:
            parts[-1].append(child)
        elif child.qname == SPACES:
            spaces = Text(" " * int(child.getAttribute("c") or 1))
            paragraph.insertBefore(spaces, child)
            paragraph.removeChild(child)
            parts[-1].append(spaces)
        elif child.qname in BREAKS:
            parts.append([])
        elif child.qname not in PARAGRAPHS:
            inner = _text_nodes(child)
            parts[-1] += inner[0]
            parts += inner[1:]
    return parts
