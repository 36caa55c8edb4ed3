"""Word documents (.docx) by python-docx: the paragraphs of the body, of its tables (nested ones
too), headers and footers; each paragraph's runs, hyperlinks' included, are its runs, so a run's
bold, italic and style stay on the words aligned to its own."""

import io

import docx
from docx.table import Table
from docx.text.hyperlink import Hyperlink

from keras_transformer.server.documents import checks
from keras_transformer.server.documents.document import Document, of_runs

EXTENSIONS = (".docx",)
MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def read(data: bytes, settings) -> Document:
    checks.archive(data, ".docx", settings, member="word/document.xml")
    document = docx.Document(io.BytesIO(data))
    paragraphs = list(_paragraphs(document))
    runs = [_runs(paragraph) for paragraph in paragraphs]
    return of_runs(runs, document.save)


def _paragraphs(document):
    """Every paragraph with text: the body's and its tables', then each section's header's and
    footer's."""
    yield from _blocks(document)
    for section in document.sections:
        for part in (section.header, section.footer):
            if not part.is_linked_to_previous:
                yield from _blocks(part)


def _blocks(container):
    for block in container.iter_inner_content():
        if isinstance(block, Table):
            # A merged cell is listed once for each grid column it spans: the same cell
            # element (python-docx has no public handle on it), translated once.
            cells = {id(cell._tc): cell for row in block.rows for cell in row.cells}
            for cell in cells.values():
                yield from _blocks(cell)
        else:
            yield block


def _runs(paragraph) -> list:
    runs = []
    for item in paragraph.iter_inner_content():
        runs += item.runs if isinstance(item, Hyperlink) else [item]
    return runs
