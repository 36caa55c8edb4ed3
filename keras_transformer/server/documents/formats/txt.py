"""Plain text (.txt, UTF-8): one paragraph of one run, whose sentences and line breaks
`sentences` finds and keeps."""

from keras_transformer.server.documents import checks
from keras_transformer.server.documents.document import Document

EXTENSIONS = (".txt",)
MEDIA_TYPE = "text/plain; charset=utf-8"


def read(data: bytes, settings) -> Document:
    content = checks.text(data, ".txt")
    return Document([[content]], lambda paragraphs: paragraphs[0][0].encode("utf-8"))
