"""E-books (.epub): ebooklib reads the package (its container, OPF manifest and spine) and names
its XHTML documents; each is translated as HTML (`html_text`), and the book is written back as
it came, member by member, with only those documents changed (ebooklib's own writer would
regenerate the navigation and heads)."""

import io
import posixpath
import zipfile

from ebooklib import ITEM_DOCUMENT, epub

from keras_transformer.server.documents import checks, html_text
from keras_transformer.server.documents.document import Document
from keras_transformer.server.errors import bad_request

EXTENSIONS = (".epub",)
MEDIA_TYPE = "application/epub+zip"


def read(data: bytes, settings) -> Document:
    packed = checks.archive(data, ".epub", settings, mimetype=MEDIA_TYPE.encode())
    reader = epub.EpubReader(io.BytesIO(data))
    try:
        book = reader.load()
    except (epub.EpubException, KeyError, ValueError, AttributeError) as error:
        raise bad_request(f"Invalid request: the .epub file cannot be read ({error})") from None
    names = {
        posixpath.normpath(posixpath.join(reader.opf_dir, item.file_name))
        for item in book.get_items_of_type(ITEM_DOCUMENT)
    }
    pages = {
        name: html_text.read(checks.text(packed.read(name), ".xhtml"))
        for name in packed.namelist()
        if name in names
    }
    counts = [len(page.paragraphs) for page in pages.values()]

    def write(translated) -> bytes:
        out, start = io.BytesIO(), 0
        written = {}
        for (name, page), count in zip(pages.items(), counts, strict=True):
            written[name] = page.write(translated[start : start + count]).encode("utf-8")
            start += count
        with zipfile.ZipFile(out, "w") as copy:
            for member in packed.infolist():
                copy.writestr(member, written.get(member.filename) or packed.read(member))
        return out.getvalue()

    return Document([runs for page in pages.values() for runs in page.paragraphs], write)
