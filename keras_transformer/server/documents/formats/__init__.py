"""The document formats `/translate_file` translates, by extension: one module each, with its
`EXTENSIONS`, `MEDIA_TYPE` and `read(data, settings) -> document.Document`, which checks the
file (`checks`) before its library opens it; `read` picks the module."""

from keras_transformer.server.documents.document import Document
from keras_transformer.server.documents.formats import (
    docx,
    epub,
    html,
    odp,
    odt,
    pptx,
    srt,
    txt,
)
from keras_transformer.server.errors import ServingError, bad_request

MODULES = (txt, html, docx, odt, odp, pptx, epub, srt)
BY_EXTENSION = {extension: module for module in MODULES for extension in module.EXTENSIONS}
EXTENSIONS = [module.EXTENSIONS[0] for module in MODULES]


def read(suffix: str, data: bytes, settings) -> Document:
    """The document of extension `suffix` (one of `BY_EXTENSION`); one its library cannot read
    after the checks passed (a broken file) is refused (400), not answered 500."""
    try:
        return BY_EXTENSION[suffix].read(data, settings)
    except ServingError:
        raise
    except Exception as error:  # a library's own error on a malformed file, whatever its class
        raise bad_request(
            f"Invalid request: the {suffix} file cannot be read "
            f"({type(error).__name__}: {str(error)[:200]})"
        ) from None
