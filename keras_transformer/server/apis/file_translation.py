"""LibreTranslate's document translation, on its API: `POST /translate_file` (multipart `file`,
`source`, `target`, `api_key`) → `{"translatedFileUrl"}`, and `GET /download_file/{name}`, the
translated document at that URL until it expires (docs/DOCUMENTS.md).

A request passes the API's access check (its keys and rate limits) first, then each limit in
turn, refused in words before any sentence is translated: the file's presence, name and
extension (415 for a format not translated, 413 over `max_file_bytes`), then its content
(`documents.checks`, through `documents.formats.read`) and its sentences (`max_file_sentences`).
Its sentences go to the pair's model as `/translate`'s do (`LibreTranslate.model_sentences`),
in requests of at most `max_sentences_per_request`, and are put back into their runs aligned
(`documents.document`). The translation waits in `documents.downloads` under an unguessable
name, and is downloaded under the client's file name with the target's code
(`letter_de.docx`, as LibreTranslate names it).
"""

from http import HTTPStatus
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from keras_transformer.server.apis.http import json_reply, multipart_form, read_body
from keras_transformer.server.documents import document, formats
from keras_transformer.server.documents.checks import extension, refuse_macro_extension
from keras_transformer.server.documents.downloads import Downloads
from keras_transformer.server.documents.settings import DocumentSettings
from keras_transformer.server.errors import (
    bad_request,
    forbidden,
    not_found,
    too_large,
    unsupported_media_type,
)

DOWNLOAD_PATH = "/download_file/{name}"  # LibreTranslate's
DETECTION_PARAGRAPHS = 50  # a document's first paragraphs tell its language (`source: auto`)


class FileTranslation:
    """`/translate_file` and its downloads on a LibreTranslate API (`api`: its `access` check,
    its `pair_route`s and `model_sentences`), as `settings` limit them; `clock` times the
    downloads."""

    def __init__(self, api, settings: DocumentSettings, clock):
        self.api = api
        self.settings = settings
        self.downloads = Downloads(settings.download_expiry_s, clock)

    def translate(self, params, upload, client, base_url) -> dict:
        """`/translate_file`'s reply to `params` and `upload` (the file's name and bytes, or
        None), in a worker thread."""
        self.api.access(params, client)
        if not self.settings.files_translation:
            raise forbidden("Files translation are disabled on this server.")
        for name, value in (("file", upload), ("source", params.get("source"))):
            if not value:
                raise bad_request(f"Invalid request: missing {name} parameter")
        if not params.get("target"):
            raise bad_request("Invalid request: missing target parameter")
        filename, data = upload
        suffix = self._checked_suffix(filename, len(data))
        read = formats.read(suffix, data, self.settings)
        sample = ["".join(runs) for runs in read.paragraphs[:DETECTION_PARAGRAPHS]]
        route, _ = self.api.pair_route(params["source"], params["target"], sample)
        sentences = self.api.model_sentences(route, chunked=True)
        translated = document.translate(read, sentences, self.settings.max_file_sentences)
        name = self.downloads.store(
            translated,
            download_name(filename, params["target"]),
            formats.BY_EXTENSION[suffix].MEDIA_TYPE,
        )
        return {"translatedFileUrl": f"{base_url}download_file/{name}"}

    def _checked_suffix(self, filename: str, size: int) -> str:
        """The extension of a file the server translates, of at most `max_file_bytes`."""
        if not filename:
            raise bad_request("Invalid request: empty file")
        suffix = extension(filename)
        refuse_macro_extension(suffix)
        if suffix not in formats.BY_EXTENSION:
            raise unsupported_media_type(
                f"Invalid request: file format not supported ({suffix or 'no extension'}; "
                f"supported: {', '.join(formats.EXTENSIONS)})"
            )
        if size > self.settings.max_file_bytes:
            raise too_large(
                f"Invalid request: the file has {size} bytes, over the server's limit of "
                f"{self.settings.max_file_bytes} (max_file_bytes)"
            )
        return suffix

    async def download(self, request: Request) -> Response:
        """A translated document, by the name `translate` gave it, until it expires."""
        if request.method not in ("GET", "HEAD"):
            allow = {"Allow": "GET, HEAD, OPTIONS"}
            return json_reply({"error": "Method Not Allowed"}, HTTPStatus.METHOD_NOT_ALLOWED, allow)
        found = self.downloads.fetch(request.path_params["name"])
        if found is None:
            raise not_found("Not Found: no such file, or it has expired")
        stored, data = found
        return Response(data, media_type=stored.media_type, headers=download_headers(stored))


def download_headers(stored) -> dict:
    """A download's headers: an attachment, never rendered as a page of this origin (an
    uploaded HTML file's scripts would run there): sandboxed, its type not sniffed."""
    return {
        "Content-Disposition": content_disposition(stored.filename),
        "Content-Security-Policy": "sandbox",
        "X-Content-Type-Options": "nosniff",
    }


def download_name(filename: str, target: str) -> str:
    """The name a translation is downloaded under: the client's file name (without its
    folders), with the target's code before its extension, as LibreTranslate names it."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}_{target}.{suffix}" if dot and stem else f"{name}_{target}"


def content_disposition(filename: str) -> str:
    """An attachment's header with its name (RFC 6266): an ASCII fallback and the UTF-8 one."""
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


async def file_parameters(request: Request, network) -> tuple[dict, tuple[str, bytes] | None]:
    """The fields of a multipart/form-data body with its one file: (fields and the query
    string's parameters, (the file's name, its bytes) or None); read within `network`'s
    limits."""
    body = await read_body(request, network.max_body_bytes, network.socket_timeout_s)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "multipart/form-data":
        raise bad_request("Invalid request: a file is sent as multipart/form-data")
    form = await multipart_form(request.headers, body, max_files=1)
    fields, upload = {}, None
    for name, value in form.multi_items():
        if isinstance(value, str):
            fields.setdefault(name, value)
        elif name == "file":
            upload = (value.filename or "", await value.read())
    await form.close()
    return fields | dict(request.query_params), upload
