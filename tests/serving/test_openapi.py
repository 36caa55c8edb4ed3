"""The HTTP APIs' OpenAPI contract (/openapi.json, LibreTranslate's /spec, the /docs page)
against a real server: the documents are valid OpenAPI (openapi-spec-validator), every route the
server serves is documented, and every documented route answers each documented status with a
reply of the documented media type and schema (a real request for each)."""

import http.client
import json
import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate
from starlette.routing import Route

from keras_transformer.server.apis.libretranslate import LibreTranslate, LibreTranslateSettings
from keras_transformer.server.models.lifecycle import ServedModel
from keras_transformer.server.models.model_manager import ModelManager
from keras_transformer.server.page.api_docs import DOCS_PATH, api_docs
from keras_transformer.server.server import ModelServer
from serving_clients import server_settings

pytestmark = pytest.mark.slow  # exports and serves a model

NAME = "m30k-ende"
MAX_BODY = 16 * 1024
SERVABLES = {
    "/v1/models/{name}": f"/v1/models/{NAME}",
    "/v1/models/{name}/versions/{version}": f"/v1/models/{NAME}/versions/1",
    "/v1/models/{name}/labels/{label}": f"/v1/models/{NAME}/labels/stable",
}
PREDICT_BODY = {"instances": ["A dog."]}
TRANSLATE_BODY = {"q": "A dog.", "source": "en", "target": "de", "api_key": "good-key"}


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (nothing here builds a model)."""


@pytest.fixture(scope="module")
def server(exported, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "api_keys"
    keys.write_text(
        "good-key\ntranslate-key 1\ndetect-key 1\ntranslate_file-key 1\nsuggest-key 1\n"
    )
    models = ModelManager([ServedModel(NAME, exported, labels={"stable": 1})])
    settings = server_settings(max_body_bytes=MAX_BODY, socket_timeout_s=1.0)
    server = ModelServer(models, settings)
    LibreTranslate.add_to(server, LibreTranslateSettings(api_keys=keys))
    server.add_routes(api_docs().routes())  # as serve adds it, with the page
    server.start()
    yield server
    server.stop()


def request(server, method, path, body=None, headers=None, stall_after=None):
    """(status, media type, body bytes) of a request; a JSON `body` given as a value; with
    `stall_after` bytes, the body declares its full length but only those bytes are sent."""
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=120)
    data = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    json_type = {"Content-Type": "application/json"} if body is not None else {}
    headers = {"Content-Length": str(len(data))} | json_type | (headers or {})
    try:
        connection.putrequest(method, path)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders(data[:stall_after] if stall_after is not None else data)
        reply = connection.getresponse()
        media_type = (reply.getheader("Content-Type") or "").split(";")[0]
        return reply.status, media_type, reply.read()
    finally:
        connection.close()


def too_large(path):
    """A request whose declared body is one byte over the limit (no byte of it sent)."""
    return lambda server: request(
        server, "POST", path, b"", {"Content-Length": str(MAX_BODY + 1)}, stall_after=0
    )


def stalled(path):
    return lambda server: request(server, "POST", path, {"q": "x" * 50}, stall_after=3)


def twice(method, path, body):
    """The second of two requests (over a rate limit of one a minute)."""

    def call(server):
        request(server, method, path, body)
        return request(server, method, path, body)

    return call


def plain(method, path, body=None, headers=None):
    return lambda server: request(server, method, path, body, headers)


def _servable_cases() -> dict:
    cases = {}
    for template, path in SERVABLES.items():
        unknown = {
            404: path.replace(NAME, "no-such-model"),
            400: path.replace("versions/1", "versions/" + "9" * 30).replace("stable", "beta"),
        }
        for suffix in ("", "/metadata"):
            cases[template + suffix, "get", 200] = plain("GET", path + suffix)
            cases[template + suffix, "get", 404] = plain("GET", unknown[404] + suffix)
            if template != "/v1/models/{name}":
                cases[template + suffix, "get", 400] = plain("GET", unknown[400] + suffix)
        predict = template + ":predict"
        cases[predict, "post", 200] = plain("POST", path + ":predict", PREDICT_BODY)
        cases[predict, "post", 400] = plain("POST", path + ":predict", b"{not json")
        cases[predict, "post", 404] = plain("POST", unknown[404] + ":predict", PREDICT_BODY)
        cases[predict, "post", 408] = stalled(path + ":predict")
        cases[predict, "post", 413] = too_large(path + ":predict")
    return cases


BOUNDARY = "keras-transformer-test"
FILE_FIELDS = {"source": "en", "target": "de", "api_key": "good-key"}


def multipart(fields, filename="a.txt", content=b"A dog runs.") -> tuple[bytes, dict]:
    """(body, headers) of a multipart/form-data request of `fields` and one file."""
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    parts.append(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        f"Content-Type: application/octet-stream\r\n\r\n".encode()
        + content
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    return b"".join(parts), {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


def file_request(fields=FILE_FIELDS, filename="a.txt"):
    body, headers = multipart(fields, filename)
    return plain("POST", "/translate_file", body, headers)


def download(server):
    """A document's translation, downloaded from the URL /translate_file gave."""
    _, _, reply = file_request()(server)
    return request(server, "GET", urlsplit(json.loads(reply)["translatedFileUrl"]).path)


def _libretranslate_cases() -> dict:
    cases = {}
    bodies = {"/translate": TRANSLATE_BODY, "/detect": {"q": "A dog runs.", "api_key": "good-key"}}
    for path, body in bodies.items():
        key = path.strip("/") + "-key"
        cases[path, "post", 200] = plain("POST", path, body)
        cases[path, "post", 400] = plain("POST", path, {"api_key": "good-key"})
        cases[path, "post", 403] = plain("POST", path, body | {"api_key": "no-such-key"})
        cases[path, "post", 408] = stalled(path)
        cases[path, "post", 413] = too_large(path)
        cases[path, "post", 429] = twice("POST", path, body | {"api_key": key})
    path = "/translate_file"
    cases[path, "post", 200] = file_request()
    cases[path, "post", 400] = file_request({"source": "en", "api_key": "good-key"})
    cases[path, "post", 403] = file_request(FILE_FIELDS | {"api_key": "no-such-key"})
    cases[path, "post", 408] = stalled(path)
    cases[path, "post", 413] = too_large(path)
    cases[path, "post", 415] = file_request(filename="a.pdf")
    cases[path, "post", 429] = lambda server: (
        file_request(FILE_FIELDS | {"api_key": "translate_file-key"})(server),
        file_request(FILE_FIELDS | {"api_key": "translate_file-key"})(server),
    )[1]
    cases["/download_file/{name}", "get", 200] = download
    cases["/download_file/{name}", "get", 404] = plain("GET", "/download_file/no-such-file")
    suggestion = {"q": "A dog.", "s": "Ein Hund.", "source": "en", "target": "de"}
    cases["/suggest", "post", 400] = plain("POST", "/suggest", b"{not json")
    cases["/suggest", "post", 403] = plain("POST", "/suggest", suggestion)
    cases["/suggest", "post", 408] = stalled("/suggest")
    cases["/suggest", "post", 413] = too_large("/suggest")
    cases["/suggest", "post", 429] = twice(
        "POST", "/suggest", suggestion | {"api_key": "suggest-key"}
    )
    preflight = {"Origin": "https://example.org", "Access-Control-Request-Method": "POST"}
    for path in (*LIBRETRANSLATE_POSTS, "/languages", "/frontend/settings", "/health"):
        cases[path, "options", 200] = plain("OPTIONS", path, headers=preflight)
    for path in ("/languages", "/frontend/settings", "/health", "/spec"):
        cases[path, "get", 200] = plain("GET", path)
    return cases


LIBRETRANSLATE_POSTS = ("/translate", "/detect", "/translate_file", "/suggest")


# A request for each documented route and status: {(path, method, status): call(server)}.
CASES = {
    **_servable_cases(),
    **_libretranslate_cases(),
    ("/v1/models", "get", 200): plain("GET", "/v1/models"),
    ("/v1/models/", "get", 200): plain("GET", "/v1/models/"),
    ("/monitoring/prometheus/metrics", "get", 200): plain("GET", "/monitoring/prometheus/metrics"),
    ("/openapi.json", "get", 200): plain("GET", "/openapi.json"),
}


def contract(server, path="/openapi.json") -> dict:
    status, media_type, body = request(server, "GET", path)
    assert (status, media_type) == (200, "application/json")
    return json.loads(body)


def documented(document) -> set:
    return {
        (path, method, int(status))
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        for status in operation["responses"]
        if status != "default"
    }


def test_the_documents_are_valid_openapi_and_spec_is_libretranslates_part(server):
    document = contract(server)
    validate(document)
    spec = contract(server, "/spec")
    validate(spec)
    assert set(spec["paths"]) == {
        *LIBRETRANSLATE_POSTS,
        "/languages",
        "/frontend/settings",
        "/health",
        "/download_file/{name}",
        "/spec",
    }
    assert all(document["paths"][path] == spec["paths"][path] for path in spec["paths"])


def test_every_route_served_is_documented(server):
    page = set(api_docs().files)
    served = {
        re.sub(r"{(\w+):\w+}", r"{\1}", route.path)
        for route in server.app.routes
        if isinstance(route, Route) and route.path not in page
    }
    assert served == set(contract(server)["paths"])


def test_every_documented_route_answers_each_status_as_documented(server):
    document = contract(server)
    assert documented(document) == set(CASES)
    for (path, method, status), call in CASES.items():
        answered, media_type, body = call(server)
        assert answered == status, (path, method, status, body[:200])
        content = document["paths"][path][method]["responses"][str(status)]["content"]
        documented_types = {name.split(";")[0]: name for name in content}
        assert media_type in documented_types, (path, method, status, media_type)
        schema = content[documented_types[media_type]]["schema"]
        value = json.loads(body) if media_type == "application/json" else body.decode()
        validator = OAS30Validator({**schema, "components": document["components"]})
        errors = [error.message for error in validator.iter_errors(value)]
        assert not errors, (path, method, status, errors, value)


class _Sources(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        self.found += [value for name, value in attrs if name in ("src", "href")]


def test_the_docs_page_loads_only_files_of_the_server_itself(server):
    status, media_type, page = request(server, "GET", DOCS_PATH)
    assert (status, media_type) == (200, "text/html")
    sources = _Sources()
    sources.feed(page.decode())
    assert sources.found and all(source.startswith(DOCS_PATH + "/") for source in sources.found)
    for source in sources.found:
        status, _, content = request(server, "GET", source)
        assert status == 200 and content, source
    _, _, script = request(server, "GET", f"{DOCS_PATH}/docs.js")
    assert b'"/openapi.json"' in script
