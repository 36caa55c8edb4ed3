"""The HTTP APIs' contract as an OpenAPI 3.0 document.

- `GET /openapi.json`: every route of the APIs the server serves (TF Serving's REST API, the
  metrics and `/v1/models`; LibreTranslate's API when it is on): parameters, bodies, replies and
  error replies, each with its JSON schema;
- `GET /spec`: LibreTranslate's part alone, where its clients look for it (with its API).

`page.api_docs` browses it at `/docs`.

OpenAPI 3.0 rather than 3.1: the Swagger UI that `swagger-ui-bundle` ships renders 3.0. Every
error is `{"error": ...}` (`errors.ServingError`); a status not listed for a route (500 on an
unexpected failure, 503 from a full queue or while draining, 504 past the deadline) is its
`default` reply, except that uvicorn itself answers 503 in plain text beyond `max_connections`.
"""

import json

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from keras_transformer.server.documents import formats

OPENAPI_PATH, SPEC_PATH = "/openapi.json", "/spec"
VERSION = "3.0.3"


def _json(schema) -> dict:
    return {"application/json": {"schema": schema}}


def _ref(name) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _error(reason) -> dict:
    return {"description": reason, "content": _json(_ref("Error"))}


def _replies(ok: dict, **errors) -> dict:
    """A route's replies: 200 `ok`, `errors` by status (`e400="why"`), and any other error as
    `default`."""
    replies = {"200": ok}
    replies |= {name.removeprefix("e"): _error(reason) for name, reason in errors.items()}
    replies["default"] = _error("any other refusal or failure (500, 503, 504)")
    return replies


def _refusals(**errors) -> dict:
    """The replies of a route that refuses every request: `errors` by status, and `default`."""
    replies = {name.removeprefix("e"): _error(reason) for name, reason in errors.items()}
    replies["default"] = _error("any other refusal or failure (500, 503, 504)")
    return replies


def _ok(description, schema, media_type="application/json") -> dict:
    return {"description": description, "content": {media_type: {"schema": schema}}}


STRING, INTEGER, NUMBER = {"type": "string"}, {"type": "integer"}, {"type": "number"}
NULLABLE_STRING = {"type": "string", "nullable": True}
ANY = {}  # a JSON value of any type: a tensor's nested lists, or one value


def _object(required=(), **properties) -> dict:
    schema = {"type": "object", "properties": properties}
    return schema | ({"required": list(required)} if required else {})


def _array(items) -> dict:
    return {"type": "array", "items": items}


SCHEMAS = {
    "Error": _object(["error"], error=STRING),
    "ModelVersionStatus": _object(
        ["model_version_status"],
        model_version_status=_array(
            _object(
                ["version", "state", "status"],
                version={"type": "string", "description": "an int64, in decimal"},
                state={"type": "string", "enum": ["LOADING", "AVAILABLE", "UNLOADING", "END"]},
                status=_object(
                    ["error_code", "error_message"], error_code=STRING, error_message=STRING
                ),
            )
        ),
    ),
    "Metadata": _object(
        ["model_spec", "metadata"],
        model_spec=_object(["name", "version"], name=STRING, signature_name=STRING, version=STRING),
        metadata=_object(
            ["signature_def"],
            signature_def={"type": "object", "description": "the SignatureDefMap, as JSON"},
        ),
    ),
    "PredictRequest": {
        "type": "object",
        "description": 'exactly one of "instances" (the row format) or "inputs" (the columnar '
        'format); a string may be given as {"b64": ...}',
        "properties": {
            "signature_name": STRING,
            "instances": {"type": "array", "minItems": 1, "items": ANY},
            "inputs": ANY,
        },
    },
    "PredictReply": {
        "type": "object",
        "description": '"predictions" for the row format, "outputs" for the columnar one',
        "oneOf": [
            _object(["predictions"], predictions=ANY),
            _object(["outputs"], outputs=ANY),
        ],
    },
    "Models": _object(
        ["models"],
        models=_array(
            _object(
                ["name", "versions"],
                name=STRING,
                versions=_array(
                    _object(
                        ["version", "state", "labels", "weight_bytes"],
                        version=INTEGER,
                        state=STRING,
                        labels=_array(STRING),
                        weight_bytes=INTEGER,
                        source_language=NULLABLE_STRING,
                        target_language=NULLABLE_STRING,
                        target_language_tokens={
                            "type": "object",
                            "additionalProperties": STRING,
                        },
                        search=_object(
                            beam_size=INTEGER,
                            alpha=NUMBER,
                            penalty=STRING,
                            extra_length=INTEGER,
                            n_best=INTEGER,
                            min_length=INTEGER,
                        )
                        | {"nullable": True},
                    )
                ),
            )
        ),
    ),
    "TranslateRequest": _object(
        ["q", "source", "target"],
        q={"oneOf": [STRING, _array(STRING)], "description": "a text, or a list of texts"},
        source={"type": "string", "description": 'a language code, or "auto" to detect it'},
        target=STRING,
        format={"type": "string", "enum": ["text", "html"], "default": "text"},
        alternatives={"type": "integer", "minimum": 0, "default": 0},
        api_key=STRING,
    ),
    "Detection": _object(["confidence", "language"], confidence=NUMBER, language=STRING),
    "TranslateReply": _object(
        ["translatedText"],
        translatedText={"oneOf": [STRING, _array(STRING)], "description": "a list for a list q"},
        alternatives={"oneOf": [_array(STRING), _array(_array(STRING))]},
        detectedLanguage={"oneOf": [_ref("Detection"), _array(_ref("Detection"))]},
    ),
    "Languages": _array(
        _object(["code", "name", "targets"], code=STRING, name=STRING, targets=_array(STRING))
    ),
    "DetectRequest": _object(["q"], q={"oneOf": [STRING, _array(STRING)]}, api_key=STRING),
    "Detections": _array(_ref("Detection")),
    "TranslateFileRequest": _object(
        ["file", "source", "target"],
        file={"type": "string", "format": "binary", "description": "the document"},
        source={"type": "string", "description": 'a language code, or "auto" to detect it'},
        target=STRING,
        api_key=STRING,
    ),
    "TranslateFileReply": _object(
        ["translatedFileUrl"],
        translatedFileUrl={
            "type": "string",
            "description": "where the translation can be downloaded until it expires",
        },
    ),
    "SuggestRequest": _object(
        ["q", "s", "source", "target"], q=STRING, s=STRING, source=STRING, target=STRING
    ),
    "Language": _object(["code", "name"], code=STRING, name=STRING),
    "FrontendSettings": _object(
        [
            "charLimit",
            "frontendTimeout",
            "apiKeys",
            "keyRequired",
            "suggestions",
            "filesTranslation",
            "supportedFilesFormat",
            "language",
        ],
        charLimit={"type": "integer", "description": "characters of a text (-1: any)"},
        frontendTimeout={"type": "integer", "description": "milliseconds before translating"},
        apiKeys={"type": "boolean", "description": "whether API keys are looked at"},
        keyRequired={"type": "boolean", "description": "whether an API key is required"},
        suggestions={"type": "boolean", "description": "whether /suggest takes suggestions"},
        filesTranslation={"type": "boolean", "description": "whether /translate_file is on"},
        supportedFilesFormat=_array(STRING),
        language=_object(["source", "target"], source=_ref("Language"), target=_ref("Language")),
    ),
    "Health": _object(["status"], status=STRING),
}

# TF Serving's servable paths: the model's latest version, a version, or a version label.
SERVABLES = {
    "/v1/models/{name}": "the model's latest available version",
    "/v1/models/{name}/versions/{version}": "a version of the model",
    "/v1/models/{name}/labels/{label}": "a version by its label (the model config's)",
}


def _parameters(path) -> list[dict]:
    described = {
        "name": ("the model's name", STRING),
        "version": ("the version, an int64", {"type": "string", "pattern": "^[0-9]+$"}),
        "label": ("a version label of the model config", STRING),
    }
    return [
        {"name": name, "in": "path", "required": True, "description": why, "schema": schema}
        for name, (why, schema) in described.items()
        if "{" + name + "}" in path
    ]


def _servable_errors(path) -> dict:
    """The refusals of a servable path: an unknown model or version (404), and an unknown
    label or a version that is no int64 where the path names one (400)."""
    errors = {"e404": "no such model, or no such version of it"}
    if "{version}" in path:
        errors["e400"] = "a version that is no int64"
    if "{label}" in path:
        errors["e400"] = "a label the model config does not have"
    return errors


def tf_serving_paths() -> dict:
    """TF Serving's REST API, the metrics and `/v1/models` (`rest.TfServingRest`)."""
    models = {
        "get": {
            "summary": "every model and version, with its state, labels and languages",
            "responses": _replies(_ok("the models", _ref("Models"))),
        }
    }
    paths = {
        "/v1/models": models,
        "/v1/models/": models,
        "/monitoring/prometheus/metrics": {
            "get": {
                "summary": "the Prometheus metrics",
                "responses": _replies(
                    _ok("the exposition format", STRING, "text/plain; version=0.0.4")
                ),
            }
        },
    }
    for path, servable in SERVABLES.items():
        parameters, errors = _parameters(path), _servable_errors(path)
        paths[path] = _get(
            f"the state of {servable}",
            parameters,
            _replies(_ok("each version's state", _ref("ModelVersionStatus")), **errors),
        )
        paths[path + "/metadata"] = _get(
            f"the signatures of {servable}",
            parameters,
            _replies(_ok("the SignatureDefMap", _ref("Metadata")), **errors),
        )
        paths[path + ":predict"] = {
            "post": {
                "summary": f"outputs of a signature of {servable}",
                "parameters": parameters,
                "requestBody": {"required": True, "content": _json(_ref("PredictRequest"))},
                "responses": _replies(
                    _ok("the signature's outputs", _ref("PredictReply")),
                    **errors | {"e400": " or ".join(filter(None, [BAD_BODY, errors.get("e400")]))},
                    **BODY_REFUSALS,
                ),
            }
        }
    return paths


def _get(summary, parameters, responses) -> dict:
    return {"get": {"summary": summary, "parameters": parameters, "responses": responses}}


BAD_BODY = "a body that is no predict request, or inputs the signature does not take"

# The refusals of a body before it is read whole (`http.read_body`).
BODY_REFUSALS = {
    "e408": "the client stalled mid-body (the connection is closed)",
    "e413": "a body over max_body_bytes (the connection is closed)",
}

# LibreTranslate's refusals of a counted request (its access check and body).
ACCESS = {
    "e400": "missing or bad parameters, or a request over a limit",
    "e403": "an API key that is not in the keys file",
    "e429": "over the rate limit of the key or client",
    **BODY_REFUSALS,
}


def _bodies(schema_name) -> dict:
    """A LibreTranslate body: JSON, or a form (urlencoded or multipart) of the same fields."""
    form = {"schema": _ref(schema_name)}
    return {
        "required": True,
        "content": _json(_ref(schema_name))
        | {"application/x-www-form-urlencoded": form, "multipart/form-data": form},
    }


def _preflight(path) -> dict:
    return {
        "summary": f"the CORS preflight of {path}",
        "responses": {"200": _ok("the methods and headers allowed", STRING, "text/plain")},
    }


def libretranslate_paths() -> dict:
    """LibreTranslate's API (`libretranslate.LibreTranslate`)."""
    return {
        "/translate": {
            "post": {
                "summary": "translate a text, or a list of texts",
                "requestBody": _bodies("TranslateRequest"),
                "responses": _replies(_ok("the translation", _ref("TranslateReply")), **ACCESS),
            },
            "options": _preflight("/translate"),
        },
        "/languages": {
            "get": {
                "summary": "the languages the models translate, each with its targets",
                "responses": _replies(_ok("the languages", _ref("Languages"))),
            },
            "options": _preflight("/languages"),
        },
        "/detect": {
            "post": {
                "summary": "the likely languages of a text",
                "requestBody": _bodies("DetectRequest"),
                "responses": _replies(
                    _ok("the languages, likeliest first", _ref("Detections")), **ACCESS
                ),
            },
            "options": _preflight("/detect"),
        },
        "/translate_file": {
            "post": {
                "summary": "translate a document; its translation is downloaded from the URL "
                "given, until it expires",
                "requestBody": {
                    "required": True,
                    "content": {"multipart/form-data": {"schema": _ref("TranslateFileRequest")}},
                },
                "responses": _replies(
                    _ok("where to download the translation", _ref("TranslateFileReply")),
                    **ACCESS
                    | {
                        "e400": "missing or bad parameters, a broken document, XML entities, "
                        "or more sentences than max_file_sentences",
                        "e403": "an API key that is not in the keys file, or files translation off",
                        "e413": "a body over max_body_bytes, a file over max_file_bytes, or a "
                        "zip-based one unpacking beyond max_unpacked_bytes or "
                        "max_compression_ratio",
                        "e415": "a format not translated, a macro-enabled one, or content that "
                        "is not what the extension says",
                    },
                ),
            },
            "options": _preflight("/translate_file"),
        },
        "/download_file/{name}": {
            "get": {
                "summary": "a translated document, by the name /translate_file gave it",
                "parameters": [
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "description": "the last part of translatedFileUrl",
                        "schema": STRING,
                    }
                ],
                "responses": _replies(
                    {
                        "description": "the document, as an attachment named after the "
                        "original with the target's code",
                        "content": {
                            media_type: {"schema": {"type": "string", "format": "binary"}}
                            for media_type in (module.MEDIA_TYPE for module in formats.MODULES)
                        },
                    },
                    e404="no such file, or it has expired",
                ),
            }
        },
        "/suggest": {
            "post": {
                "summary": "a suggested translation: refused, as suggestions are off",
                "requestBody": _bodies("SuggestRequest"),
                "responses": _refusals(
                    **ACCESS
                    | {"e403": "suggestions are disabled, or an API key not in the keys file"}
                ),
            },
            "options": _preflight("/suggest"),
        },
        "/frontend/settings": {
            "get": {
                "summary": "the settings a page reads: limits, keys, formats, defaults",
                "responses": _replies(_ok("the settings", _ref("FrontendSettings"))),
            },
            "options": _preflight("/frontend/settings"),
        },
        "/health": {
            "get": {
                "summary": "whether the server answers",
                "responses": _replies(_ok("it does", _ref("Health"))),
            },
            "options": _preflight("/health"),
        },
        SPEC_PATH: _document_route("LibreTranslate's API alone"),
    }


def _document_route(what) -> dict:
    return {
        "get": {
            "summary": f"this contract: {what}",
            "responses": _replies(_ok("an OpenAPI 3.0 document", {"type": "object"})),
        }
    }


def document(paths: dict, title: str) -> dict:
    return {
        "openapi": VERSION,
        "info": {
            "title": title,
            "version": "1",
            "description": 'Errors are {"error": ...}; docs/SERVING.md tells the limits.',
        },
        "paths": paths,
        "components": {"schemas": SCHEMAS},
    }


class OpenApi:
    """The contract of the routes a server serves: `add(paths)` as each API is added;
    `routes()` serve it at `/openapi.json`."""

    def __init__(self):
        self.paths = {OPENAPI_PATH: _document_route("every route of the server's APIs")}

    def add(self, paths: dict):
        self.paths |= paths

    def document(self) -> dict:
        return document(self.paths, "keras-transformer serve")

    def routes(self) -> list[Route]:
        async def contract(request: Request) -> Response:
            return Response(json.dumps(self.document()), media_type="application/json")

        return [Route(OPENAPI_PATH, contract, methods=["GET"])]


def spec_route() -> Route:
    """LibreTranslate's `/spec`: its routes' part of the contract."""
    spec = json.dumps(document(libretranslate_paths(), "LibreTranslate API"))

    async def endpoint(request: Request) -> Response:
        return Response(spec, media_type="application/json")

    return Route(SPEC_PATH, endpoint, methods=["GET"])
