"""OpenDocument text (.odt) by odfpy: each paragraph and heading (`text:p`, `text:h`) is a
paragraph, its text nodes its runs (inside `text:span` and `text:a` too), so a span's style stays
on the words aligned to its own. A run of spaces written as `text:s` is read as those spaces."""

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


def read(data: bytes, settings) -> Document:
    checks.archive(data, ".odt", settings, mimetype=MEDIA_TYPE.encode())
    document = opendocument.load(io.BytesIO(data))
    runs = [
        _text_nodes(paragraph)
        for paragraph in _elements(document.text)
        if paragraph.qname in PARAGRAPHS
    ]
    return of_runs(runs, document.write, "data")


def _elements(element):
    """`element` and everything under it, in document order."""
    yield element
    for child in element.childNodes:
        if child.nodeType == child.ELEMENT_NODE:
            yield from _elements(child)


def _text_nodes(paragraph) -> list[Text]:
    """The text nodes of a paragraph, not of the paragraphs inside it (a note's, a frame's),
    each `text:s` replaced by the spaces it stands for."""
    nodes = []
    for child in list(paragraph.childNodes):
        if child.nodeType == child.TEXT_NODE:
            nodes.append(child)
        elif child.qname == SPACES:
            spaces = Text(" " * int(child.getAttribute("c") or 1))
            paragraph.insertBefore(spaces, child)
            paragraph.removeChild(child)
            nodes.append(spaces)
        elif child.qname not in PARAGRAPHS:
            nodes += _text_nodes(child)
    return nodes
