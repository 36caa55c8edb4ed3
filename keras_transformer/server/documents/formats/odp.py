"""OpenDocument presentations (.odp) by odfpy, read as `odt` reads text: each paragraph
(`text:p`, `text:h`) of every slide's frames and text boxes, its text nodes its runs. Slides,
frames and their places are kept."""

from keras_transformer.server.documents.document import Document
from keras_transformer.server.documents.formats.odt import read_opendocument

EXTENSIONS = (".odp",)
MEDIA_TYPE = "application/vnd.oasis.opendocument.presentation"


def read(data: bytes, settings) -> Document:
    return read_opendocument(
        data, settings, ".odp", MEDIA_TYPE, lambda document: document.presentation
    )
