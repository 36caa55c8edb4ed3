"""LibreTranslate's HTTP API on the REST port, so that the apps that speak it (Mastodon's post
translation, browser extensions, `libretranslatepy`) translate with the served models.

It follows LibreTranslate's own `libretranslate/app.py`: its routes, parameters, replies, error
texts and codes, and its CORS headers on every reply of these routes, errors included.

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
- `OPTIONS` on each: the CORS preflight.

Bodies are JSON, or forms (`application/x-www-form-urlencoded`, `multipart/form-data`) with the
query string's parameters. Errors are `{"error": ...}`: 400 for bad or missing input, 403 for an
unknown API key, 429 over a rate limit (`api_keys`), 405 for another method.

Each text is split into sentences (`sentences`; HTML into the sentences of its text nodes,
`html_text`), and all the sentences of a request are translated by one `translate_options` call,
batched by the server with other requests to the same model, then joined back with the text's
own spacing and markup. A sentence whose subwords (`source_lengths`) exceed the model's
`max_length` is split at its clauses, then at spaces, rather than cut by the model; a word longer
than that is refused. A request of more sentences than the server's `max_sentences` is refused.
"""

import json
import logging
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesParser
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs

from keras_transformer.errors import ConfigError
from keras_transformer.search_settings import SearchSettings
from keras_transformer.serving import html_text, sentences
from keras_transformer.serving.api_keys import ApiKey, RateLimiter, read_api_keys
from keras_transformer.serving.errors import ServingError
from keras_transformer.serving.language_id import (
    DetectorMissing,
    LanguageIdentifier,
    language_name,
    public_code,
)
from keras_transformer.serving.rest import Reply, Request
from keras_transformer.serving.sentences import Piece

logger = logging.getLogger(__name__)

METHODS = {"/translate": "POST", "/languages": "GET", "/detect": "POST"}

# LibreTranslate's (its after_request): any origin may call the API from a browser.
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "Authorization, Content-Type",
    "Access-Control-Expose-Headers": "Authorization",
    "Access-Control-Allow-Methods": "GET, POST",
    "Access-Control-Allow-Credentials": "true",
    "Access-Control-Max-Age": str(60 * 60 * 24 * 20),
}

SEARCH = SearchSettings()  # §6.1's beam 4, α 0.6, extra length 50
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

    def __post_init__(self):
        for name in ("req_limit", "char_limit", "batch_limit"):
            if getattr(self, name) < -1:
                raise ConfigError(f"{name} {getattr(self, name)} is below -1 (no limit)")
        if self.require_api_key and self.api_keys is None:
            raise ConfigError("require_api_key needs api_keys, the file of the keys accepted")


class LibreTranslateError(Exception):
    """A request refused with LibreTranslate's status and error text."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


def invalid(message) -> LibreTranslateError:
    return LibreTranslateError(HTTPStatus.BAD_REQUEST, message)


@dataclass(frozen=True)
class Route:
    """Where a language pair is translated: the model, and the token that leads a source to a
    multilingual model's target (or None), and its longest source in subwords."""

    model: str
    token: str | None
    max_length: int

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
            route = Route(model.name, token, info["max_length"])
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
    """LibreTranslate's API as an app of `server` (a `ModelServer`): `app(request)` answers
    the requests of its routes with a `rest.Reply`, and None to the others."""

    def __init__(self, server, settings: LibreTranslateSettings = LibreTranslateSettings()):
        self.server = server
        self.settings = settings
        # None: no keys file, and a key given is not looked at (LibreTranslate without --api-keys)
        self.api_keys = read_api_keys(settings.api_keys) if settings.api_keys else None
        self.limiter = RateLimiter()
        self.identifier = LanguageIdentifier()
        try:  # without the serving extra's language names, fail here, not on a request
            language_name("en")
        except ModuleNotFoundError as error:
            raise ConfigError(f"{error}, or set libretranslate off") from None

    @classmethod
    def add_to(cls, server, settings: LibreTranslateSettings):
        """Serves the API on `server`'s REST port, unless `settings.libretranslate` is off; a
        setting that cannot be used stops the server and raises ConfigError."""
        if not settings.libretranslate:
            return
        try:
            server.apps.append(cls(server, settings))
        except ConfigError:
            server.stop()
            raise

    def __call__(self, request: Request) -> Reply | None:
        method = METHODS.get(request.path)
        if method is None:
            return None
        try:
            reply = self._answer(request, method)
        except (LibreTranslateError, ServingError) as error:
            reply = Reply.json({"error": str(error)}, error.status)
        except Exception as error:  # still an answer a browser page can read
            logger.exception("LibreTranslate request failed")
            message = f"Cannot translate text: {error}"
            reply = Reply.json({"error": message}, HTTPStatus.INTERNAL_SERVER_ERROR)
        reply.headers.update(CORS_HEADERS)
        return reply

    def _answer(self, request: Request, method: str) -> Reply:
        allow = {"Allow": f"{method}, OPTIONS"}
        if request.method == "OPTIONS":
            return Reply(HTTPStatus.OK, b"", "text/plain", allow)
        if request.method != method:
            return Reply.json({"error": "Method Not Allowed"}, HTTPStatus.METHOD_NOT_ALLOWED, allow)
        if request.path == "/languages":  # not counted, as LibreTranslate's is not
            return Reply.json(self.languages())
        params, is_json = parameters(request)
        key = self._access(params, request.client)
        if request.path == "/detect":
            return Reply.json(self.detect(params))
        return Reply.json(self.translate(params, is_json, key))

    # -- access: API keys and rate limits ------------------------------------------------------

    def _access(self, params, client) -> ApiKey:
        """The limits of the request's API key (the server's without one); refuses an unknown
        key (403), a missing one where keys are required (400), and a request over its rate
        limit (429)."""
        looked_at = self.api_keys is not None and params.get("api_key")
        given = str(params["api_key"]) if looked_at else None
        if given is not None and given not in self.api_keys:
            raise LibreTranslateError(HTTPStatus.FORBIDDEN, "Invalid API key")
        if given is None and self.settings.require_api_key:
            raise invalid("Please contact the server operator to get an API key")
        key = self.api_keys[given] if given is not None else ApiKey()
        limit = key.req_limit if key.req_limit >= 0 else self.settings.req_limit
        counted = given if given is not None else client
        if not self.limiter.allow(counted, limit):
            raise LibreTranslateError(
                HTTPStatus.TOO_MANY_REQUESTS, f"Slowdown: {limit} per 1 minute"
            )
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

    def detect(self, params) -> list[dict]:
        q = params.get("q")
        if not q:
            raise invalid("Invalid request: missing q parameter")
        texts = text_list(q)
        ranked = self._rank("\n".join(texts), routes(self.server.models.available()))
        likely = [candidate for candidate in ranked[:3] if candidate["confidence"] > 0]
        return likely or ranked[:1]

    def _rank(self, text, pairs) -> list[dict]:
        sources = sorted({source for source, _ in pairs})
        if not sources:
            raise invalid("Invalid request: no model is available to detect a language for")
        try:
            return self.identifier.rank(text, sources)
        except DetectorMissing as error:
            raise invalid(str(error)) from None

    def translate(self, params, is_json, key: ApiKey) -> dict:
        q, source, target = (params.get(name) for name in ("q", "source", "target"))
        for name, value in (("q", q), ("source", source), ("target", target)):
            if not value:
                raise invalid(f"Invalid request: missing {name} parameter")
        try:
            alternatives = max(0, int(params.get("alternatives") or 0))
        except (TypeError, ValueError):
            raise invalid("Invalid request: alternatives parameter is not a number") from None
        if alternatives > MAX_ALTERNATIVES:
            raise invalid(f"Invalid request: alternatives parameter must be <= {MAX_ALTERNATIVES}")
        texts = text_list(q)
        if not is_json:  # a form's line ends as LibreTranslate counts them: LF only
            texts = ["\n".join(text.splitlines()) for text in texts]
        self._check_sizes(texts, isinstance(q, list), key)
        route, detected = self._route(source, target, texts)
        text_format = params.get("format") or "text"
        if text_format not in ("text", "html"):
            raise invalid(f"{text_format} format is not supported")
        translated, other = self._translated(route, texts, text_format == "html", alternatives)
        one = not isinstance(q, list)  # a list q has a list of each
        result = {"translatedText": translated[0] if one else translated}
        if detected is not None:
            result["detectedLanguage"] = detected if one else [detected] * len(texts)
        if alternatives:
            result["alternatives"] = other[0] if one else other
        return result

    def _route(self, source, target, texts) -> tuple[Route, dict | None]:
        """The route of a request's languages, and the language detected (`source: auto`)."""
        pairs = routes(self.server.models.available())
        detected = None
        if source == "auto":
            detected = self._rank("\n".join(texts), pairs)[0]
            source_code = detected["language"]
        else:
            source_code = requested_code(str(source), {s for s, _ in pairs})
            if source_code is None:
                raise invalid(f"{str(source).lower()} is not supported")
        target_code = requested_code(str(target), {code for pair in pairs for code in pair})
        if target_code is None:
            raise invalid(f"{str(target).lower()} is not supported")
        route = pairs.get((source_code, target_code))
        if route is None:
            raise invalid(
                f"{language_name(target_code)} ({target_code}) is not available as a target "
                f"language from {language_name(source_code)} ({source_code})"
            )
        return route, detected

    def _check_sizes(self, texts, is_list, key: ApiKey):
        if is_list and 0 <= self.settings.batch_limit < len(texts):
            raise invalid(
                f"Invalid request: request ({len(texts)}) exceeds text limit "
                f"({self.settings.batch_limit})"
            )
        char_limit = key.char_limit if key.char_limit >= 0 else self.settings.char_limit
        for text in texts:
            if 0 <= char_limit < len(text):
                raise invalid(
                    f"Invalid request: request ({len(text)}) exceeds text limit ({char_limit})"
                )

    # -- translation ---------------------------------------------------------------------------

    def _translated(self, route: Route, texts, html, alternatives) -> tuple[list, list]:
        """(translation of each text, its alternatives)."""
        splitter = html_text if html else sentences
        documents = self._fitted(route, [splitter.split(text) for text in texts])
        units = [piece.text for pieces in documents for piece in pieces if piece.translate]
        beam = SEARCH.beam_size if alternatives < SEARCH.beam_size else LARGEST_BEAM
        best, n_best = self._search(route, units, beam) if units else ([], [])
        translations, others, start = [], [], 0
        for pieces in documents:
            end = start + sum(piece.translate for piece in pieces)
            translation = splitter.join(pieces, best[start:end])
            sentence_n_best = list(zip(best[start:end], n_best[start:end], strict=True))
            candidates = [
                splitter.join(
                    pieces, (hypotheses[k] or first for first, hypotheses in sentence_n_best)
                )
                for k in range(1, alternatives + 1)
            ]
            translations.append(translation)
            others.append([] if html else filter_unique(candidates, translation))
            start = end
        return translations, others

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
            raise invalid(
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
            alpha=SEARCH.alpha,
            extra_length=SEARCH.extra_length,
        )
        best = [text.decode("utf-8") for text in outputs["translations"]]
        n_best = [[text.decode("utf-8") for text in row] for row in outputs["n_best_translations"]]
        return best, n_best

    def _predict(self, route: Route, signature, units, **options) -> dict:
        limit = self.server.limits.max_sentences
        if len(units) > limit:
            raise invalid(
                f"Invalid request: the texts hold {len(units)} sentences, over the server's "
                f"limit of {limit} a request (max_sentences)"
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


def text_list(q) -> list[str]:
    """`q` as a list of texts: a string, or a list of strings."""
    texts = q if isinstance(q, list) else [q]
    if not all(isinstance(text, str) for text in texts):
        raise invalid("Invalid request: q must be a string or a list of strings")
    return texts


def parameters(request: Request) -> tuple[dict, bool]:
    """(the request's parameters, whether its body is JSON): a JSON body's object, or the
    query string's parameters and a form body's fields."""
    body = request.body()
    content_type = request.headers.get_content_type()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            value = json.loads(body)
        except (ValueError, RecursionError) as error:
            raise invalid(f"Failed to decode JSON object: {error}") from None
        if not isinstance(value, dict):
            raise invalid("Invalid JSON format")
        return value, True
    values = {}
    if content_type == "application/x-www-form-urlencoded":
        values = form_fields(body)
    elif content_type == "multipart/form-data":
        values = multipart_fields(request.headers.get("Content-Type", ""), body)
    return values | {name: value[0] for name, value in request.query.items()}, False


def form_fields(body: bytes) -> dict:
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, errors="strict")
    except ValueError as error:
        raise invalid(f"Invalid request: the form body is not UTF-8 ({error})") from None
    return {name: value[0] for name, value in fields.items()}


def multipart_fields(content_type: str, body: bytes) -> dict:
    """The text fields of a multipart/form-data body (RFC 7578); files are left out."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    message = BytesParser(policy=policy.HTTP).parsebytes(head + body)
    if not message.is_multipart() or message.defects:
        raise invalid("Invalid request: malformed multipart/form-data body")
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name and part.get_filename() is None:
            try:
                fields.setdefault(name, part.get_content())
            except (LookupError, ValueError) as error:
                raise invalid(f"Invalid request: form field {name!r}: {error}") from None
    return fields
