"""LibreTranslate's HTTP API on the REST port, so that the apps that speak it (Mastodon's post
translation, browser extensions, `libretranslatepy`) translate with the served models.

It follows LibreTranslate's own `libretranslate/app.py`: its routes, parameters, replies, error
texts and codes, and its CORS (Starlette's middleware, on every reply of these routes to a
cross-origin request, errors included).

- `POST /translate`: `q` (a string, or a list in JSON bodies), `source` (a code, or `auto`),
  `target`, `format` (`text` or `html`), `alternatives` (how many other translations),
  `api_key` → `{"translatedText", "alternatives", "detectedLanguage"}`: `translatedText` a list
  when `q` is one; `alternatives` when asked for: the n-best of the search, without repeats or
  the translation itself, `[]` for HTML; `detectedLanguage` `{confidence, language}` when
  `source` is `auto` (one for each text of a list).
- `GET /languages` → `[{code, name, targets}]`, from the models the server has available: a
  model's `model_info.json` names its source and target languages, or the target tokens of a
  multilingual model (each sentence is then led by the target's token, `>>fra<<`). It also
  takes the body that `libretranslatepy` sends with it.
- `POST /detect`: `q` → `[{confidence, language}]`, over the languages the models translate from.
- `POST /translate_file`: multipart `file`, `source`, `target`, `api_key` →
  `{"translatedFileUrl"}`, where `GET /download_file/{name}` gives the translated document
  until it expires (`file_translation`; docs/DOCUMENTS.md).
- `GET /frontend/settings`: the settings LibreTranslate's page reads, from this server's;
  `POST /suggest`: refused (403) after the access check, as LibreTranslate refuses it with
  suggestions off; `GET /health`: `{"status": "ok"}`.
- `OPTIONS` on each: the CORS preflight;
- `GET /spec`: the API's OpenAPI contract (`openapi`), where LibreTranslate publishes its own.

Bodies are JSON, or forms (`application/x-www-form-urlencoded`, `multipart/form-data` parsed by
python-multipart) with the query string's parameters, read within the server's body limits.
Errors are `{"error": ...}` (`errors.ServingError`): 400 for bad or missing input, 403 for an
unknown API key, 429 over a rate limit (`api_keys`, counted by `limits` in memory or in Redis),
405 for another method, 413 and 415 for a document too large or of another format. The access
check and the translation run in the server's worker threads, off the event loop.

Each text is split into sentences (`documents.sentences`), and all the sentences of a request
are translated by one `translate_options` call, batched by the server with other requests to
the same model, then joined back with the text's own spacing. HTML and documents are
paragraphs of runs (`documents.html_text`, `documents.formats`): each sentence is translated
whole across its runs and put back into them by the word alignment that the `attention`
signature gives (`alignment`, `ModelSentences`). A sentence whose subwords (`source_lengths`)
exceed the model's `max_length` is split at its clauses, then at spaces, rather than cut by the
model; a word longer than that is refused. A request of more sentences than the server's
`max_sentences_per_request` is refused; a document's go in requests of that many.
"""

import json
import logging
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs

from starlette import routing
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response

from keras_transformer.errors import ConfigError
from keras_transformer.search_settings import SearchSettings
from keras_transformer.server.apis import openapi
from keras_transformer.server.apis.alignment import alignment_layer, word_links
from keras_transformer.server.apis.api_keys import ApiKey, RateLimits, read_api_keys
from keras_transformer.server.apis.file_translation import (
    DOWNLOAD_PATH,
    FileTranslation,
    file_parameters,
)
from keras_transformer.server.apis.http import answered, json_reply, multipart_form, read_body
from keras_transformer.server.apis.language_id import (
    DetectorMissing,
    LanguageIdentifier,
    language_name,
    public_code,
)
from keras_transformer.server.documents import document, formats, html_text, sentences
from keras_transformer.server.documents.runs import Layout, Links
from keras_transformer.server.documents.sentences import Piece
from keras_transformer.server.errors import bad_request, forbidden, too_many_requests

logger = logging.getLogger(__name__)

METHODS = {
    "/translate": "POST",
    "/languages": "GET",
    "/detect": "POST",
    "/translate_file": "POST",
    "/suggest": "POST",
    "/frontend/settings": "GET",
    "/health": "GET",
}

# LibreTranslate's (its after_request): any origin may call the API from a browser.
CORS = {
    "allow_origins": ["*"],
    "allow_headers": ["Authorization", "Content-Type"],
    "expose_headers": ["Authorization"],
    "allow_methods": ["GET", "POST"],
    "max_age": 60 * 60 * 24 * 20,
}


class LibreTranslateCors(CORSMiddleware):
    """Starlette's CORS with LibreTranslate's preflight reply: its headers and status, and an
    empty body (Starlette's says "OK"), as Flask answers an OPTIONS request."""

    def preflight_response(self, request_headers) -> Response:
        reply = super().preflight_response(request_headers)
        kept = {
            k: v for k, v in reply.headers.items() if k not in ("content-length", "content-type")
        }
        return Response(b"", reply.status_code, kept, media_type="text/plain")


# The search of an export that records none in its model info: §6.1's beam 4, α 0.6, extra
# length 50. An export records its `serving_default`'s (an imported checkpoint's own, say).
SEARCH = SearchSettings()
# The beam sizes of the exported `translate_options` (saved_model.REQUEST_BEAM_SIZES) that hold
# the alternatives: §6.1's 4, or 8 for more than 3.
LARGEST_BEAM = 8
MAX_ALTERNATIVES = LARGEST_BEAM - 1


@dataclass(frozen=True)
class LibreTranslateSettings:
    """The LibreTranslate API's settings; `keras-transformer serve`'s flags are made from them.
    Limits are LibreTranslate's: -1 is none."""

    libretranslate: bool = field(
        default=True,
        metadata={
            "help": "LibreTranslate's API (/translate, /languages, /detect)",
            "negatable": True,
        },
    )
    api_keys: Path | None = field(
        default=None,
        metadata={
            "help": "API keys file: a key a line, optionally followed by its requests a minute "
            "and its character limit (docs/SERVING.md); a request with another key is refused",
            "metavar": "FILE",
        },
    )
    require_api_key: bool = field(
        default=False, metadata={"help": "refuse LibreTranslate requests without an API key"}
    )
    req_limit: int = field(
        default=-1,
        metadata={"help": "LibreTranslate requests a minute of a client without a key (-1: any)"},
    )
    char_limit: int = field(
        default=-1, metadata={"help": "characters of one LibreTranslate text (-1: any)"}
    )
    batch_limit: int = field(
        default=-1, metadata={"help": "texts of one LibreTranslate q list (-1: any)"}
    )
    frontend_timeout: int = field(
        default=500,
        metadata={
            "help": "milliseconds a page waits after typing before it translates "
            "(LibreTranslate's frontendTimeout, in /frontend/settings)"
        },
    )
    rate_limit_storage: str = field(
        default="memory://",
        metadata={
            "help": "where request counts are kept: memory:// (this process) or "
            "redis://HOST:PORT (one count shared by the replicas using it)",
            "metavar": "URL",
        },
    )

    def __post_init__(self):
        if self.frontend_timeout < 0:
            raise ConfigError(f"frontend_timeout {self.frontend_timeout} is below 0")
        for name in ("req_limit", "char_limit", "batch_limit"):
            if getattr(self, name) < -1:
                raise ConfigError(f"{name} {getattr(self, name)} is below -1 (no limit)")
        if self.require_api_key and self.api_keys is None:
            raise ConfigError("require_api_key needs api_keys, the file of the keys accepted")


@dataclass(frozen=True)
class Route:
    """Where a language pair is translated: the model, and the token that leads a source to a
    multilingual model's target (or None), its longest source in subwords, and the search its
    export's `serving_default` makes."""

    model: str
    token: str | None
    max_length: int
    search: SearchSettings = SEARCH

    def model_input(self, sentence: str) -> str:
        return f"{self.token} {sentence}" if self.token else sentence


def routes(served_models) -> dict[tuple[str, str], Route]:
    """{(source, target) public codes: Route} of the models whose exports name their languages;
    the first model by name serves a pair that several serve."""
    found = {}
    for model in served_models:
        info = model.serving.info
        if not info.get("source_language"):
            continue
        tokens = info.get("target_language_tokens") or {}
        if not tokens and info.get("target_language"):
            tokens = {info["target_language"]: None}
        source = public_code(info["source_language"])
        for target, token in tokens.items():
            search = SearchSettings(**info["search"]) if "search" in info else SEARCH
            route = Route(model.name, token, info["max_length"], search)
            found.setdefault((source, public_code(target)), route)
    return found


def requested_code(code: str, codes) -> str | None:
    """The public code among `codes` that a request's `code` names ("EN", "eng", "zh"), or None."""
    try:
        wanted = public_code(code)
    except ValueError:  # not a language tag at all
        return None
    return next((known for known in codes if known.lower() == wanted.lower()), None)


def filter_unique(texts, translation) -> list[str]:
    """`texts` without repeats, empty ones or `translation` (LibreTranslate's filter_unique)."""
    seen = {translation, ""}
    return [text for text in texts if not (text in seen or seen.add(text))]


class LibreTranslate:
    """LibreTranslate's API over `server` (a `ModelServer`): `routes()` for its application."""

    def __init__(
        self, server, settings: LibreTranslateSettings = LibreTranslateSettings(), clock=None
    ):
        self.server = server
        self.settings = settings
        self.files = FileTranslation(self, server.settings.documents, clock or time.monotonic)
        # None: no keys file, and a key given is not looked at (LibreTranslate without --api-keys)
        self.api_keys = read_api_keys(settings.api_keys) if settings.api_keys else None
        self.limiter = RateLimits(settings.rate_limit_storage)
        self.identifier = LanguageIdentifier()
        try:  # without the serving extra's language names, fail here, not on a request
            language_name("en")
        except ModuleNotFoundError as error:
            raise ConfigError(f"{error}, or set libretranslate off") from None

    @classmethod
    def add_to(cls, server, settings: LibreTranslateSettings, clock=None):
        """Serves the API on `server`'s REST port, unless `settings.libretranslate` is off; a
        setting that cannot be used (a rate-limit storage that cannot be reached, say) stops
        the server and raises ConfigError. `clock` (`time.monotonic`) times the downloads."""
        if not settings.libretranslate:
            return
        try:
            api = cls(server, settings, clock)
            server.add_routes(
                api.routes(), openapi.libretranslate_paths(), on_stop=api.files.downloads.close
            )
        except ConfigError:
            server.stop()
            raise

    def routes(self) -> list[routing.Route]:
        """A route for each path, every method, and the downloads of translated files, behind
        LibreTranslate's CORS (its preflight answered by the middleware); and `/spec`, its
        OpenAPI contract."""
        endpoint = answered(self._answer, lambda error: f"Cannot translate text: {error}")
        app = LibreTranslateCors(routing.request_response(endpoint), **CORS)
        download = answered(self.files.download)
        download_app = LibreTranslateCors(routing.request_response(download), **CORS)
        return [
            *(routing.Route(path, app) for path in METHODS),
            routing.Route(DOWNLOAD_PATH, download_app),
            openapi.spec_route(),
        ]

    async def _answer(self, request: Request) -> Response:
        method = METHODS[request.url.path]
        allow = {"Allow": f"{method}, OPTIONS"}
        if request.method == "OPTIONS":
            return Response(b"", HTTPStatus.OK, allow, media_type="text/plain")
        if request.method != method:
            return json_reply({"error": "Method Not Allowed"}, HTTPStatus.METHOD_NOT_ALLOWED, allow)
        path = request.url.path
        if path == "/health":
            return json_reply({"status": "ok"})
        if path == "/languages":  # not counted, as LibreTranslate's is not
            return json_reply(await self.server.call(self.languages))
        if path == "/frontend/settings":  # nor this
            return json_reply(await self.server.call(self.frontend_settings))
        client = request.client.host if request.client else ""
        network = self.server.settings.network
        if path == "/translate_file":
            params, upload = await file_parameters(request, network)
            base_url = str(request.base_url)
            reply = await self.server.call(self.files.translate, params, upload, client, base_url)
            return json_reply(reply)
        params, is_json = await parameters(request, network)
        return json_reply(await self.server.call(self.answer, path, params, is_json, client))

    def answer(self, path, params, is_json, client):
        """The reply of `/detect`, `/translate` or `/suggest` to `params`, in a worker thread,
        after the access check."""
        key = self.access(params, client)
        if path == "/suggest":  # as LibreTranslate answers when suggestions are off
            raise forbidden("Suggestions are disabled on this server.")
        if path == "/detect":
            return self.detect(params)
        return self.translate(params, is_json, key)

    # -- access: API keys and rate limits ------------------------------------------------------

    def access(self, params, client) -> ApiKey:
        """The limits of the request's API key (the server's without one); refuses an unknown
        key (403), a missing one where keys are required (400), and a request over its rate
        limit (429)."""
        looked_at = self.api_keys is not None and params.get("api_key")
        given = str(params["api_key"]) if looked_at else None
        if given is not None and given not in self.api_keys:
            raise forbidden("Invalid API key")
        if given is None and self.settings.require_api_key:
            raise bad_request("Please contact the server operator to get an API key")
        key = self.api_keys[given] if given is not None else ApiKey()
        limit = key.req_limit if key.req_limit >= 0 else self.settings.req_limit
        counted = given if given is not None else client
        if not self.limiter.allow(counted, limit):
            raise too_many_requests(f"Slowdown: {limit} per 1 minute")
        return key

    # -- the routes ----------------------------------------------------------------------------

    def languages(self) -> list[dict]:
        pairs = routes(self.server.models.available())
        codes = sorted({code for pair in pairs for code in pair})
        return [
            {
                "code": code,
                "name": language_name(code),
                "targets": sorted(target for source, target in pairs if source == code),
            }
            for code in codes
        ]

    def frontend_settings(self) -> dict:
        """LibreTranslate's `/frontend/settings`, from this server's settings and models: the
        page's defaults are detection (or the first source) and the first target."""
        pairs = sorted(routes(self.server.models.available()))
        files = self.files.settings.files_translation
        target = pairs[0][1] if pairs else "en"
        return {
            "charLimit": self.settings.char_limit,
            "frontendTimeout": self.settings.frontend_timeout,
            "apiKeys": self.api_keys is not None,
            "keyRequired": self.settings.require_api_key,
            "suggestions": False,
            "filesTranslation": files,
            "supportedFilesFormat": list(formats.EXTENSIONS) if files else [],
            "language": {
                "source": {"code": "auto", "name": "Auto Detect"},
                "target": {"code": target, "name": language_name(target)},
            },
        }

    def detect(self, params) -> list[dict]:
        q = params.get("q")
        if not q:
            raise bad_request("Invalid request: missing q parameter")
        texts = text_list(q)
        ranked = self._rank("\n".join(texts), routes(self.server.models.available()))
        likely = [candidate for candidate in ranked[:3] if candidate["confidence"] > 0]
        return likely or ranked[:1]

    def _rank(self, text, pairs) -> list[dict]:
        sources = sorted({source for source, _ in pairs})
        if not sources:
            raise bad_request("Invalid request: no model is available to detect a language for")
        try:
            return self.identifier.rank(text, sources)
        except DetectorMissing as error:
            raise bad_request(str(error)) from None

    def translate(self, params, is_json, key: ApiKey) -> dict:
        q, source, target = (params.get(name) for name in ("q", "source", "target"))
        for name, value in (("q", q), ("source", source), ("target", target)):
            if not value:
                raise bad_request(f"Invalid request: missing {name} parameter")
        try:
            alternatives = max(0, int(params.get("alternatives") or 0))
        except (TypeError, ValueError):
            raise bad_request("Invalid request: alternatives parameter is not a number") from None
        if alternatives > MAX_ALTERNATIVES:
            raise bad_request(
                f"Invalid request: alternatives parameter must be <= {MAX_ALTERNATIVES}"
            )
        texts = text_list(q)
        if not is_json:  # a form's line ends as LibreTranslate counts them: LF only
            texts = ["\n".join(text.splitlines()) for text in texts]
        self._check_sizes(texts, isinstance(q, list), key)
        route, detected = self.pair_route(source, target, texts)
        text_format = params.get("format") or "text"
        if text_format not in ("text", "html"):
            raise bad_request(f"{text_format} format is not supported")
        translated, other = self._translated(route, texts, text_format == "html", alternatives)
        one = not isinstance(q, list)  # a list q has a list of each
        result = {"translatedText": translated[0] if one else translated}
        if detected is not None:
            result["detectedLanguage"] = detected if one else [detected] * len(texts)
        if alternatives:
            result["alternatives"] = other[0] if one else other
        return result

    def pair_route(self, source, target, texts) -> tuple[Route, dict | None]:
        """The route of a request's languages, and the language detected (`source: auto`)."""
        pairs = routes(self.server.models.available())
        detected = None
        if source == "auto":
            detected = self._rank("\n".join(texts), pairs)[0]
            source_code = detected["language"]
        else:
            source_code = requested_code(str(source), {s for s, _ in pairs})
            if source_code is None:
                raise bad_request(f"{str(source).lower()} is not supported")
        target_code = requested_code(str(target), {code for pair in pairs for code in pair})
        if target_code is None:
            raise bad_request(f"{str(target).lower()} is not supported")
        route = pairs.get((source_code, target_code))
        if route is None:
            raise bad_request(
                f"{language_name(target_code)} ({target_code}) is not available as a target "
                f"language from {language_name(source_code)} ({source_code})"
            )
        return route, detected

    def _check_sizes(self, texts, is_list, key: ApiKey):
        if is_list and 0 <= self.settings.batch_limit < len(texts):
            raise bad_request(
                f"Invalid request: request ({len(texts)}) exceeds text limit "
                f"({self.settings.batch_limit})"
            )
        char_limit = key.char_limit if key.char_limit >= 0 else self.settings.char_limit
        for text in texts:
            if 0 <= char_limit < len(text):
                raise bad_request(
                    f"Invalid request: request ({len(text)}) exceeds text limit ({char_limit})"
                )

    # -- translation ---------------------------------------------------------------------------

    def _translated(self, route: Route, texts, html, alternatives) -> tuple[list, list]:
        """(translation of each text, its alternatives: none for HTML)."""
        if html:
            return self._translated_html(route, texts), [[] for _ in texts]
        documents = self._fitted(route, [sentences.split(text) for text in texts])
        units = [piece.text for pieces in documents for piece in pieces if piece.translate]
        search = route.search
        beam = search.beam_size if alternatives < search.beam_size else LARGEST_BEAM
        best, n_best = self._search(route, units, beam) if units else ([], [])
        translations, others, start = [], [], 0
        for pieces in documents:
            end = start + sum(piece.translate for piece in pieces)
            translation = sentences.join(pieces, best[start:end])
            sentence_n_best = list(zip(best[start:end], n_best[start:end], strict=True))
            candidates = [
                sentences.join(
                    pieces, (hypotheses[k] or first for first, hypotheses in sentence_n_best)
                )
                for k in range(1, alternatives + 1)
            ]
            translations.append(translation)
            others.append(filter_unique(candidates, translation))
            start = end
        return translations, others

    def _translated_html(self, route: Route, texts) -> list[str]:
        """Each HTML text translated a sentence at a time, its inline tags put back around
        the words aligned to theirs (`html_text`)."""
        pages = [html_text.read(text) for text in texts]
        paragraphs = [runs for page in pages for runs in page.paragraphs]
        translated = document.translated_runs(Layout(paragraphs), self.model_sentences(route))
        results, start = [], 0
        for page in pages:
            end = start + len(page.paragraphs)
            results.append(page.write(translated[start:end]))
            start = end
        return results

    def model_sentences(self, route: Route, chunked: bool = False) -> "ModelSentences":
        """The sentences of `route`'s model, translated and aligned (`ModelSentences`)."""
        return ModelSentences(self, route, chunked)

    def _fitted(self, route: Route, documents: list[list[Piece]]) -> list[list[Piece]]:
        """`documents` with every sentence longer than the model's `max_length` subwords split
        at its clauses, or else at the space nearest its middle, until all fit."""
        while True:
            units = [piece.text for pieces in documents for piece in pieces if piece.translate]
            if not units:
                return documents
            lengths = iter(self._predict(route, "source_lengths", units)["source_lengths"])
            fitted, changed = [], False
            for pieces in documents:
                fitted.append([])
                for piece in pieces:
                    if piece.translate and next(lengths) > route.max_length:
                        fitted[-1] += self._shorter(piece.text, route.max_length)
                        changed = True
                    else:
                        fitted[-1].append(piece)
            if not changed:
                return fitted
            documents = fitted

    @staticmethod
    def _shorter(sentence, max_length) -> list[Piece]:
        parts = sentences.clauses(sentence)
        if len(parts) == 1:
            parts = sentences.halves(sentence)
        if len(parts) == 1:
            raise bad_request(
                f"Invalid request: {sentence[:50]!r} is longer than the {max_length} subwords "
                "the model translates at once, and has no space to split it at"
            )
        return parts

    def _search(self, route: Route, units, beam) -> tuple[list[str], list[list[str]]]:
        """The best translation of each sentence, and its n-best list."""
        outputs = self._predict(
            route,
            "translate_options",
            units,
            beam_size=beam,
            alpha=route.search.alpha,
            extra_length=route.search.extra_length,
        )
        best = [text.decode("utf-8") for text in outputs["translations"]]
        n_best = [[text.decode("utf-8") for text in row] for row in outputs["n_best_translations"]]
        return best, n_best

    def _predict(self, route: Route, signature, units, **options) -> dict:
        limit = self.server.limits.max_sentences_per_request
        if len(units) > limit:
            raise bad_request(
                f"Invalid request: the texts hold {len(units)} sentences, over the server's "
                f"limit of {limit} a request (max_sentences_per_request)"
            )
        inputs = {"text": [route.model_input(unit) for unit in units], **options}

        def to_arrays(servable, signature_name):
            return servable.arrays(signature_name, inputs, self.server.limits)

        return self.server.predict(
            "libretranslate",
            route.model,
            None,
            None,
            signature,
            to_arrays,
            self.server.rest_deadline(),
        )


class ModelSentences:
    """Sentences translated and aligned by a route's model, through the server's batching
    (`document.SentenceTranslator`): translated as `/translate` translates them (a sentence
    longer than the model takes is split at its clauses, and then has no alignment), in
    requests of at most `max_sentences_per_request` sentences when `chunked` (a document),
    else refused beyond it; aligned by the `attention` signature where the export has one
    (`alignment`)."""

    def __init__(self, api: LibreTranslate, route: Route, chunked: bool = False):
        self.api = api
        self.route = route
        self.chunk = api.server.limits.max_sentences_per_request if chunked else None
        self._split: set[str] = set()  # the sentences translated in parts

    def _chunks(self, *lists):
        size = self.chunk or max(1, len(lists[0]))
        for start in range(0, len(lists[0]), size):
            yield [values[start : start + size] for values in lists]

    def translate(self, units) -> list[str]:
        translations = []
        for (chunk,) in self._chunks(list(units)):
            fitted = self.api._fitted(self.route, [[Piece(unit, True)] for unit in chunk])
            parts = [piece.text for pieces in fitted for piece in pieces if piece.translate]
            best, _ = self.api._search(self.route, parts, self.route.search.beam_size)
            start = 0
            for unit, pieces in zip(chunk, fitted, strict=True):
                end = start + sum(piece.translate for piece in pieces)
                translations.append(sentences.join(pieces, best[start:end]))
                if end - start > 1:
                    self._split.add(unit)
                start = end
        return translations

    def alignments(self, units, translations) -> list[Links | None]:
        servable = self.api.server.metadata_servable(self.route.model)
        if "attention" not in servable.signatures:
            return [None] * len(units)
        skip = len(self.route.token.split()) if self.route.token else 0
        links = []
        for chunk, chunk_translations in self._chunks(list(units), list(translations)):
            outputs = self.api._predict(
                self.route, "attention", chunk, translation=chunk_translations
            )
            cross = outputs["encoder_decoder_attention"]
            layer = alignment_layer(cross.shape[1])
            for k, (unit, translation) in enumerate(zip(chunk, chunk_translations, strict=True)):
                if unit in self._split:
                    links.append(None)
                    continue
                links.append(
                    word_links(
                        [piece.decode("utf-8") for piece in outputs["source_pieces"][k]],
                        [piece.decode("utf-8") for piece in outputs["target_pieces"][k]],
                        cross[k, layer].mean(axis=0),
                        unit,
                        translation,
                        skip,
                    )
                )
        return links


def text_list(q) -> list[str]:
    """`q` as a list of texts: a string, or a list of strings."""
    texts = q if isinstance(q, list) else [q]
    if not all(isinstance(text, str) for text in texts):
        raise bad_request("Invalid request: q must be a string or a list of strings")
    return texts


async def parameters(request: Request, network) -> tuple[dict, bool]:
    """(the request's parameters, whether its body is JSON): a JSON body's object, or the
    query string's parameters and a form body's fields; the body read within `network`'s
    limits (`http.read_body`)."""
    body = await read_body(request, network.max_body_bytes, network.socket_timeout_s)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            value = json.loads(body)
        except (ValueError, RecursionError) as error:
            raise bad_request(f"Failed to decode JSON object: {error}") from None
        if not isinstance(value, dict):
            raise bad_request("Invalid JSON format")
        return value, True
    values = {}
    if content_type == "application/x-www-form-urlencoded":
        values = form_fields(body)
    elif content_type == "multipart/form-data":
        values = await multipart_fields(request.headers, body)
    return values | dict(request.query_params), False


def form_fields(body: bytes) -> dict:
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, errors="strict")
    except ValueError as error:
        raise bad_request(f"Invalid request: the form body is not UTF-8 ({error})") from None
    return {name: value[0] for name, value in fields.items()}


async def multipart_fields(headers, body: bytes) -> dict:
    """The text fields of a multipart/form-data body; files are left out."""
    form = await multipart_form(headers, body, max_files=0)
    fields = {}
    for name, value in form.multi_items():
        if isinstance(value, str):
            fields.setdefault(name, value)
    return fields
