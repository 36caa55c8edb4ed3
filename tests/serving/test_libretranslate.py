"""LibreTranslate's API on a real server of two models, driven by the real `libretranslatepy`
client and by the request shapes of LibreTranslate's own API tests
(libretranslate/tests/test_api/*.py). Translations are checked against the same models'
`translate_options` signature through TF Serving's REST API on the same server."""

import html
import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
from libretranslatepy import LibreTranslateAPI

from keras_transformer.export.layout import MODEL_INFO
from keras_transformer.server.apis.libretranslate import LibreTranslate, LibreTranslateSettings
from keras_transformer.server.models.lifecycle import ServedModel
from keras_transformer.server.models.limits import Limits
from keras_transformer.server.models.model_manager import ModelManager
from keras_transformer.server.server import ModelServer
from serving_clients import predict_outputs, server_settings

pytestmark = pytest.mark.slow  # exports and serves two models

GERMAN, MULTILINGUAL = "m30k-ende", "m30k-en-multi"
LIMITS = Limits(max_sentences_per_request=8, max_source_length=400)


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (nothing here builds a model)."""


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "api_keys"
    path.write_text("# key, requests a minute, characters\ngood-key\nslow-key 1\nshort-key 10 12\n")
    return path


@pytest.fixture(scope="module")
def server(exported, multilingual, keys):
    models = ModelManager([ServedModel(GERMAN, exported), ServedModel(MULTILINGUAL, multilingual)])
    server = ModelServer(models, server_settings(LIMITS, max_body_bytes=64 * 1024))
    LibreTranslate.add_to(server, LibreTranslateSettings(api_keys=keys, batch_limit=6))
    server.start()
    yield server
    server.stop()


def url(server, path=""):
    return f"http://127.0.0.1:{server.rest_port}{path}"


def call(server, path, body=None, method=None, content_type="application/json", headers=None):
    """(status, headers, JSON reply): a JSON body given as a value, a form body as a dict with
    content_type "form", or raw bytes."""
    if isinstance(body, dict) and content_type == "form":
        data, content_type = (
            urllib.parse.urlencode(body).encode(),
            "application/x-www-form-urlencoded",
        )
    elif isinstance(body, bytes):
        data = body
    else:
        data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url(server, path), data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", content_type)
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            text = reply.read()
            return reply.status, reply.headers, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, error.headers, json.loads(error.read())


def options_output(server, model, texts, beam_size=4) -> dict:
    """`translate_options` of `model` on `texts` with §6.1's search, through TF Serving's API."""
    inputs = {"text": texts, "beam_size": beam_size, "alpha": 0.6, "extra_length": 50}
    return predict_outputs(server, model, "translate_options", inputs)


def translations(server, model, texts) -> list[str]:
    return options_output(server, model, texts)["translations"]


def test_libretranslatepy_translates_lists_languages_and_detects(server):
    client = LibreTranslateAPI(url(server), api_key="good-key")
    text = "A dog runs in the park.  Two men play football."
    first, second = translations(
        server, GERMAN, ["A dog runs in the park.", "Two men play football."]
    )
    assert client.translate(text, "en", "de") == f"{first}  {second}"
    french = translations(server, MULTILINGUAL, [">>fra<< A dog runs."])
    assert client.translate("A dog runs.", "en", "fr") == french[0]
    assert client.languages() == [
        {"code": "cs", "name": "Czech", "targets": []},
        {"code": "de", "name": "German", "targets": []},
        {"code": "en", "name": "English", "targets": ["cs", "de", "fr"]},
        {"code": "fr", "name": "French", "targets": []},
    ]
    assert client.detect("A dog runs in the park.") == [{"confidence": 100.0, "language": "en"}]


def test_libretranslate_api_test_shapes(server):
    """libretranslate/tests/test_api: the same requests, with our languages for theirs."""
    status, _, reply = call(
        server,
        "/translate",
        {"q": "Hello", "source": "en", "target": "de", "format": "text"},
        content_type="form",
    )
    assert status == 200 and reply == {"translatedText": translations(server, GERMAN, ["Hello"])[0]}
    status, _, reply = call(
        server,
        "/translate",
        {"q": ["Hello", "World"], "source": "en", "target": "de", "format": "text"},
    )
    assert status == 200 and reply["translatedText"] == translations(
        server, GERMAN, ["Hello", "World"]
    )
    body = {"q": "Hello", "source": "en", "target": "zz", "format": "text"}
    assert call(server, "/translate", body, content_type="form")[::2] == (
        400,
        {"error": "zz is not supported"},
    )
    body = {"source": "en", "target": "de", "format": "text"}
    assert call(server, "/translate", body, content_type="form")[::2] == (
        400,
        {"error": "Invalid request: missing q parameter"},
    )
    status, _, reply = call(server, "/detect", {"q": "Hello"}, content_type="form")
    assert status == 200 and {"confidence", "language"} <= set(reply[0])
    status, _, reply = call(server, "/detect", b"", content_type="form")
    assert status == 400 and "error" in reply
    assert call(server, "/detect")[0] == 405
    status, _, reply = call(server, "/languages")
    assert status == 200 and {"code", "name"} <= set(reply[0])
    assert call(server, "/languages", b"", content_type="form", method="POST")[0] == 405


def test_paragraphs_are_translated_by_sentence_and_joined_with_their_spacing(server):
    text = "A dog runs.\n\nTwo men play football!  A girl is eating."
    first, second, third = translations(
        server, GERMAN, ["A dog runs.", "Two men play football!", "A girl is eating."]
    )
    reply = call(server, "/translate", {"q": text, "source": "en", "target": "de"})[2]
    assert reply == {"translatedText": f"{first}\n\n{second}  {third}"}


def test_html_keeps_its_markup_even_unbalanced(server):
    """Block tags end sentences; a sentence across inline ones is translated whole, the tags
    put back between its words (where exactly: test_documents.py, test_document_runs.py)."""
    fragment = '<p class="a">A dog runs. <b>Two men play.</b></p><div>A girl <i>is eating'
    units = ["A dog runs.", "Two men play.", "A girl is eating"]
    a, b, c = (html.escape(text, quote=False) for text in translations(server, GERMAN, units))
    body = {"q": fragment, "source": "en", "target": "de", "format": "html", "alternatives": 2}
    status, _, reply = call(server, "/translate", body)
    assert status == 200 and reply["alternatives"] == []
    head = f'<p class="a">{a} <b>{b}</b></p><div>'
    assert reply["translatedText"].startswith(head) and reply["translatedText"].count("<i>") == 1
    assert reply["translatedText"].removeprefix(head).replace("<i>", "") == c


def test_alternatives_are_the_n_best_without_repeats(server):
    outputs = options_output(server, GERMAN, ["A dog runs."])
    best, n_best = outputs["translations"][0], outputs["n_best_translations"][0]
    expected = []
    for text in n_best[1:4]:
        if text and text != best and text not in expected:
            expected.append(text)
    body = {"q": "A dog runs.", "source": "en", "target": "de", "alternatives": 3}
    assert call(server, "/translate", body)[2] == {"translatedText": best, "alternatives": expected}
    body["q"] = ["A dog runs.", "A dog runs."]
    assert call(server, "/translate", body)[2] == {
        "translatedText": [best, best],
        "alternatives": [expected, expected],
    }
    body["alternatives"] = 8
    assert call(server, "/translate", body)[::2] == (
        400,
        {"error": "Invalid request: alternatives parameter must be <= 7"},
    )


def test_auto_source_answers_the_detected_language(server):
    body = {"q": "A dog runs.", "source": "auto", "target": "de"}
    reply = call(server, "/translate", body)[2]
    assert reply["detectedLanguage"] == {"confidence": 100.0, "language": "en"}
    assert reply["translatedText"] == translations(server, GERMAN, ["A dog runs."])[0]
    body["q"] = ["A dog runs.", "A cat sleeps."]
    assert (
        call(server, "/translate", body)[2]["detectedLanguage"]
        == [{"confidence": 100.0, "language": "en"}] * 2
    )


def test_a_sentence_over_max_length_is_split_at_its_clauses_not_cut(server, exported):
    parts = [
        "a dog runs in the park,",
        "a man plays with a ball,",
        "two girls eat in the street,",
        "a woman sits on a bench,",
        "and a boy swims in the lake.",
    ]
    sentence = "A " + " ".join(parts)[2:]
    parts[0] = "A " + parts[0][2:]
    body = {"signature_name": "source_lengths", "inputs": {"text": [sentence, *parts]}}
    lengths = call(server, f"/v1/models/{GERMAN}:predict", body)[2]["outputs"]
    max_length = json.loads((exported / "1" / MODEL_INFO).read_text())["max_length"]
    assert lengths[0] > max_length >= max(lengths[1:])  # what the test needs of the model
    reply = call(server, "/translate", {"q": sentence, "source": "en", "target": "de"})[2]
    assert reply == {"translatedText": " ".join(translations(server, GERMAN, parts))}
    status, _, reply = call(server, "/translate", {"q": "x" * 300, "source": "en", "target": "de"})
    assert status == 400 and "has no space to split it at" in reply["error"]


def test_cors_on_preflight_replies_and_errors(server):
    preflight = {"Origin": "http://elsewhere.example", "Access-Control-Request-Method": "POST"}
    for path in ("/translate", "/languages", "/detect"):
        status, headers, _ = call(server, path, method="OPTIONS", headers=preflight)
        assert status == 200 and headers["Access-Control-Allow-Origin"] == "*"
        assert "Content-Type" in headers["Access-Control-Allow-Headers"]
    body, origin = {"q": "Hi", "source": "en", "target": "zz"}, {"Origin": preflight["Origin"]}
    status, headers, _ = call(server, "/translate", body, headers=origin)
    assert status == 400 and headers["Access-Control-Allow-Origin"] == "*"


@pytest.mark.parametrize(
    "body, content_type, status, error",
    [
        (b'{"q": "A dog', "application/json", 400, "Failed to decode JSON object"),
        (b"[1, 2]", "application/json", 400, "Invalid JSON format"),
        (b"q=%ff&source=en&target=de", "application/x-www-form-urlencoded", 400, "not UTF-8"),
        (b"--x\r\nbroken", "multipart/form-data; boundary=y", 400, "malformed multipart"),
        (
            json.dumps({"q": ["Hi"] * 5000, "source": "en", "target": "de"}).encode(),
            "application/json",
            400,
            "request (5000) exceeds text limit (6)",
        ),
        (
            json.dumps({"q": ["A. B. C."] * 3, "source": "en", "target": "de"}).encode(),
            "application/json",
            400,
            "hold 9 sentences, over the server's limit of 8",
        ),
        (
            json.dumps({"q": [1, 2], "source": "en", "target": "de"}).encode(),
            "application/json",
            400,
            "q must be a string or a list of strings",
        ),
        (
            json.dumps({"q": "Hi", "source": "xx", "target": "de"}).encode(),
            "application/json",
            400,
            "xx is not supported",
        ),
        (
            json.dumps({"q": "Hi", "source": "en", "target": "en"}).encode(),
            "application/json",
            400,
            "English (en) is not available as a target language from English (en)",
        ),
        (
            json.dumps({"q": "Hi", "source": "en", "target": "de", "format": "pdf"}).encode(),
            "application/json",
            400,
            "pdf format is not supported",
        ),
        (
            json.dumps({"q": "Hi", "source": "en", "target": "de", "alternatives": "x"}).encode(),
            "application/json",
            400,
            "alternatives parameter is not a number",
        ),
        (
            json.dumps({"q": "Hi", "source": "en", "target": "de", "api_key": "nope"}).encode(),
            "application/json",
            403,
            "Invalid API key",
        ),
        (
            json.dumps(
                {"q": "Thirteen chars", "source": "en", "target": "de", "api_key": "short-key"}
            ).encode(),
            "application/json",
            400,
            "request (14) exceeds text limit (12)",
        ),
    ],
)
def test_bad_requests_answer_libretranslate_errors_and_the_server_stays_up(
    server, body, content_type, status, error
):
    answer = call(server, "/translate", body, content_type=content_type)
    assert answer[0] == status and error in answer[2]["error"]
    assert call(server, "/languages")[0] == 200


def test_a_key_over_its_rate_limit_is_told_to_slow_down(server):
    body = {"q": "A dog runs.", "api_key": "slow-key"}
    assert call(server, "/detect", body)[0] == 200
    assert call(server, "/detect", body)[::2] == (429, {"error": "Slowdown: 1 per 1 minute"})
    assert call(server, "/detect", {"q": "A dog runs.", "api_key": "good-key"})[0] == 200
