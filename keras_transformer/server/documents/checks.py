"""A document checked before any library opens it: what it is, and that it is safe to read.

Every refusal says why, with its status, before any translation:

- a name without one of the formats' extensions, or a macro-enabled one (`.docm`, `.pptm`, ...):
  415;
- content that is not what the extension says (a zip named `.txt`, a `.docx` without
  `word/document.xml`, an `.odt` whose `mimetype` is another): 415;
- a zip-based document (.docx, .odt, .odp, .pptx, .epub) whose members, as its central directory
  declares them (Python's `zipfile` never unpacks more than a member declares), unpack to more
  than `max_unpacked_bytes`, or to more than `max_compression_ratio` times the file (a zip
  bomb): 413, before a member is unpacked; a member holding more than it declares is cut at its
  declared size, fails its CRC and is refused as broken (400);
- macros: a VBA project (`vbaProject.bin`), a macro-enabled content type, or OpenDocument's
  `Basic/` and `Scripts/`: 415, so that none is carried into a translation (none is ever run);
- XML that declares entities (the "billion laughs") or refers to external ones (XXE): 400. Each
  XML member is parsed first by `defusedxml`, which refuses them rather than expand or fetch
  them, so the libraries that read the document after never meet one;
- text that is not UTF-8, or is binary: 400 and 415.
"""

import io
import zipfile
from pathlib import PurePosixPath

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import ParseError, fromstring

from keras_transformer.server.documents.settings import DocumentSettings
from keras_transformer.server.errors import bad_request, too_large, unsupported_media_type

ZIP_MAGIC = b"PK\x03\x04"
# Magic numbers of binary files that a text format is not.
BINARY_MAGIC = {
    ZIP_MAGIC: "a zip archive",
    b"%PDF": "a PDF file",
    b"\xd0\xcf\x11\xe0": "an OLE2 (old Office) file",
    b"\x7fELF": "an executable",
}
MACRO_EXTENSIONS = frozenset({".docm", ".dotm", ".pptm", ".potm", ".ppsm", ".xlsm", ".odb"})
MACRO_MEMBERS = ("vbaproject.bin", "vbadata.xml")
MACRO_FOLDERS = ("Basic/", "Scripts/")
XML_SUFFIXES = frozenset({".xml", ".rels", ".opf", ".ncx"})
# XHTML may be malformed as XML (an e-book's `&nbsp;`) and is read as HTML; only its entities
# are refused.
XHTML_SUFFIXES = frozenset({".xhtml", ".html", ".htm", ".svg"})
MAX_MEMBERS = 10_000


def extension(filename: str) -> str:
    """The lower-cased extension of a client's file name (its last part after / or \\)."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return PurePosixPath(name).suffix.lower()


def refuse_macro_extension(suffix: str):
    if suffix in MACRO_EXTENSIONS:
        raise unsupported_media_type(
            f"Invalid request: {suffix} files hold macros, which this server never runs or "
            "passes on: save the document without them (.docx, .pptx, .odt)"
        )


def text(data: bytes, suffix: str) -> str:
    """A text format's content (UTF-8, a BOM allowed), refused when binary or not UTF-8."""
    for magic, what in BINARY_MAGIC.items():
        if data.startswith(magic):
            raise mislabelled(suffix, what)
    if b"\0" in data:
        raise mislabelled(suffix, "binary data")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise bad_request(
            f"Invalid request: the {suffix} file is not UTF-8 text ({error.reason} at byte "
            f"{error.start})"
        ) from None


def mislabelled(suffix: str, what: str):
    return unsupported_media_type(f"Invalid request: the {suffix} file is {what}, not {suffix}")


def archive(
    data: bytes, suffix: str, settings: DocumentSettings, member=None, mimetype=None
) -> zipfile.ZipFile:
    """A zip-based document, checked (the module docstring) without unpacking more than its
    XML members; it must hold `member`, or a `mimetype` member of that content (OpenDocument,
    EPUB)."""
    if not data.startswith(ZIP_MAGIC):
        raise unsupported_media_type(
            f"Invalid request: the {suffix} file is not a zip archive, as {suffix} files are"
        )
    try:
        packed = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as error:
        raise bad_request(f"Invalid request: the {suffix} file is a broken zip ({error})") from None
    members = packed.infolist()
    if len(members) > MAX_MEMBERS:
        raise too_large(f"Invalid request: the {suffix} file holds {len(members)} files")
    unpacked = sum(member.file_size for member in members)
    if unpacked > settings.max_unpacked_bytes:
        raise too_large(
            f"Invalid request: the {suffix} file unpacks to {unpacked} bytes, over the "
            f"server's limit of {settings.max_unpacked_bytes} (max_unpacked_bytes)"
        )
    if unpacked > settings.max_compression_ratio * len(data):
        raise too_large(
            f"Invalid request: the {suffix} file unpacks to {unpacked} bytes from {len(data)}, "
            f"more than {settings.max_compression_ratio} times its size (max_compression_ratio)"
            ": a zip bomb"
        )
    _refuse_macros(packed, suffix)
    for info in members:
        member_suffix = PurePosixPath(info.filename).suffix.lower()
        if member_suffix in XML_SUFFIXES | XHTML_SUFFIXES:
            _check_xml(packed, info.filename, suffix, strict=member_suffix in XML_SUFFIXES)
    if member is not None:
        _require_member(packed, member, suffix)
    if mimetype is not None:
        _require_mimetype(packed, mimetype, suffix)
    return packed


def _refuse_macros(packed: zipfile.ZipFile, suffix: str):
    for name in packed.namelist():
        if name.lower().rsplit("/", 1)[-1] in MACRO_MEMBERS or name.startswith(MACRO_FOLDERS):
            raise unsupported_media_type(
                f"Invalid request: the {suffix} file holds macros ({name}), which this server "
                "never runs or passes on: save the document without them"
            )
    if "[Content_Types].xml" in packed.namelist():
        types = packed.read("[Content_Types].xml")
        if b"macroEnabled" in types or b"vbaProject" in types:
            raise unsupported_media_type(
                f"Invalid request: the {suffix} file is macro-enabled ([Content_Types].xml), "
                "and its macros are never run or passed on: save the document without them"
            )


def _check_xml(packed: zipfile.ZipFile, name: str, suffix: str, strict: bool):
    try:
        fromstring(packed.read(name), forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as error:
        raise bad_request(
            f"Invalid request: {name} in the {suffix} file declares or refers to XML entities "
            f"({type(error).__name__}), which are never expanded or fetched"
        ) from None
    except ParseError as error:
        if strict:
            raise bad_request(
                f"Invalid request: {name} in the {suffix} file is broken XML ({error})"
            ) from None
    except (zipfile.BadZipFile, ValueError) as error:
        raise bad_request(
            f"Invalid request: {name} in the {suffix} file is broken ({error})"
        ) from None


def _require_member(packed: zipfile.ZipFile, name: str, suffix: str):
    if name not in packed.namelist():
        raise mislabelled(suffix, f"a zip without {name}")


def _require_mimetype(packed: zipfile.ZipFile, mimetype: bytes, suffix: str):
    """An OpenDocument or EPUB file: its `mimetype` member names its type."""
    _require_member(packed, "mimetype", suffix)
    found = packed.read("mimetype").strip()
    if found != mimetype:
        raise mislabelled(suffix, f"of type {found.decode('ascii', 'replace')[:80]}")
