"""HTML pages (.html, .htm, UTF-8), through `html_text`: the markup kept, inline tags put back
around the words aligned to theirs."""

from keras_transformer.server.documents import checks, html_text
from keras_transformer.server.documents.document import Document

EXTENSIONS = (".html", ".htm")
MEDIA_TYPE = "text/html; charset=utf-8"


def read(data: bytes, settings) -> Document:
    page = html_text.read(checks.text(data, ".html"))
    return Document(page.paragraphs, lambda paragraphs: page.write(paragraphs).encode("utf-8"))
