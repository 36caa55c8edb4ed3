"""The LibreTranslate API's text handling, without a model: sentences and HTML paragraphs split
and joined back, API key files, rate limits, language codes and names, request bodies."""

import dataclasses
import html
import sys
import types

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from keras_transformer.errors import ConfigError
from keras_transformer.search_settings import SearchSettings
from keras_transformer.server.apis.api_keys import ApiKey, RateLimits, read_api_keys
from keras_transformer.server.apis.http import answered, json_reply
from keras_transformer.server.apis.language_id import (
    DetectorMissing,
    LanguageIdentifier,
    public_code,
)
from keras_transformer.server.apis.libretranslate import (
    LibreTranslate,
    LibreTranslateSettings,
    filter_unique,
    parameters,
    requested_code,
    routes,
)
from keras_transformer.server.documents import html_text, sentences
from keras_transformer.server.documents.runs import Layout
from keras_transformer.server.documents.settings import DocumentSettings
from keras_transformer.server.settings import Network, ServerSettings


def sentences_of(pieces):
    return [piece.text for piece in pieces if piece.translate]


def upper_cased(module, text):
    """`text` split and joined back with each sentence in capitals: which parts were taken as
    sentences, in place."""
    pieces = module.split(text)
    return module.join(pieces, (sentence.upper() for sentence in sentences_of(pieces)))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("A dog runs.", ["A dog runs."]),
        ("A dog runs. Two men play!  Why?", ["A dog runs.", "Two men play!", "Why?"]),
        ("  Leading and trailing.  \n", ["Leading and trailing."]),
        ("Line one\nline two\n\nline three", ["Line one", "line two", "line three"]),
        ('He said "Stop!" Then he left.', ['He said "Stop!"', "Then he left."]),
        (
            "It costs 3.50 euros, e.g. this one. Next.",
            ["It costs 3.50 euros, e.g. this one.", "Next."],
        ),
        ("犬が走る。猫が寝る。", ["犬が走る。", "猫が寝る。"]),
        ("", []),
        ("   \n ", []),
    ],
)
def test_sentences_split_and_join_back_with_their_spacing(text, expected):
    pieces = sentences.split(text)
    assert sentences_of(pieces) == expected
    assert sentences.join(pieces, sentences_of(pieces)) == text


def test_a_translation_keeps_the_spacing_between_sentences():
    text = "  A dog runs.   A cat sleeps.\n\nThe end.\n"
    assert upper_cased(sentences, text) == "  A DOG RUNS.   A CAT SLEEPS.\n\nTHE END.\n"


def test_long_sentences_split_at_clauses_then_at_the_middle_space():
    assert sentences_of(sentences.clauses("One dog, two cats; three birds: none")) == [
        "One dog,",
        "two cats;",
        "three birds:",
        "none",
    ]
    assert sentences_of(sentences.clauses("no clause marks")) == ["no clause marks"]
    halves = sentences.halves("a b c d e f")
    assert sentences_of(halves) == ["a b c", "d e f"]
    assert sentences.join(halves, sentences_of(halves)) == "a b c d e f"
    assert sentences_of(sentences.halves("word")) == ["word"]


@pytest.mark.parametrize(
    "fragment, expected",
    [
        ("<p>A dog runs. <b>It barks!</b></p>", ["A dog runs.", "It barks!"]),
        ("<p>A <b>dog</b> runs.</p>", ["A dog runs."]),
        ('<p>See <a href="/x">the <em>docs</em></a> now.</p>', ["See the docs now."]),
        ("<p>Unclosed <i>tags. <div>and more", ["Unclosed tags.", "and more"]),
        ("<li>One</li><li>Two<br>Three</li>", ["One", "Two", "Three"]),
        ("</b></i>Only closing tags.", ["Only closing tags."]),
        ("<p class='x' data-a=\"1 > 0\">Text</p>", ["Text"]),
        ("<!-- a comment --><p>After it.</p>", ["After it."]),
        ("<script>if (a < b) run();</script><p>Prose.</p>", ["Prose."]),
        ("<p>Run <code>ls</code> now.</p>", ["Run", "now."]),
        ("<p>Tom &amp; Jerry</p>", ["Tom & Jerry"]),
        ("a < b, <p", ["a < b,"]),
        ('Open <a href="x', ["Open"]),
        ("<!-- never closed", []),
    ],
)
def test_html_sentences_run_across_inline_tags_and_stop_at_block_ones(fragment, expected):
    page = html_text.read(fragment)
    assert Layout(page.paragraphs).units == expected
    assert html.unescape(page.write(page.paragraphs)) == html.unescape(fragment)


def test_html_writes_back_its_markup_and_escapes_translations():
    fragment = "<div><p>A dog runs. <b>It barks &amp; jumps.</b></p><br>Unclosed <i>end"
    page = html_text.read(fragment)
    upper = [[run.upper() for run in runs] for runs in page.paragraphs]
    assert page.write(upper) == (
        "<div><p>A DOG RUNS. <b>IT BARKS &amp; JUMPS.</b></p><br>UNCLOSED <i>END"
    )
    assert html_text.read("<p>x</p>").write([["a <b> & c"]]) == "<p>a &lt;b&gt; &amp; c</p>"


def test_api_keys_file(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# keys\nalpha\nbeta 120   # a comment\n\ngamma 5 300\n")
    assert read_api_keys(path) == {
        "alpha": ApiKey(),
        "beta": ApiKey(req_limit=120),
        "gamma": ApiKey(req_limit=5, char_limit=300),
    }
    path.write_text("alpha\nbeta many\n")
    with pytest.raises(ConfigError, match="line 2: expected KEY"):
        read_api_keys(path)
    path.write_text("alpha\nalpha 3\n")
    with pytest.raises(ConfigError, match="line 2: key 'alpha' is repeated"):
        read_api_keys(path)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_api_keys(tmp_path / "missing")


def test_rate_limits_count_a_minute_per_key(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("limits.storage.memory.time", types.SimpleNamespace(time=lambda: now[0]))
    limiter = RateLimits("memory://")
    assert [limiter.allow("a", 2) for _ in range(3)] == [True, True, False]
    assert limiter.allow("b", 2)  # another key has its own count
    assert all(limiter.allow("c", -1) for _ in range(100))  # -1: no limit
    now[0] = 59.0
    assert not limiter.allow("a", 2)
    now[0] = 60.5  # the first two requests of "a" have left the window
    assert limiter.allow("a", 2) and limiter.allow("a", 2) and not limiter.allow("a", 2)


def test_language_codes_as_libretranslate_writes_them():
    assert [public_code(code) for code in ("en", "eng", "deu", "fra", "zh", "zt", "pb")] == [
        "en",
        "en",
        "de",
        "fr",
        "zh-Hans",
        "zh-Hant",
        "pt-BR",
    ]
    codes = {"en", "de", "zh-Hans"}
    assert requested_code("EN", codes) == "en"
    assert requested_code("eng", codes) == "en"
    assert requested_code("zh", codes) == "zh-Hans"
    assert requested_code("zz", codes) is None
    assert requested_code("!!", codes) is None


def test_detection_ranks_only_the_languages_asked_for():
    ranked = LanguageIdentifier().rank("Ein Hund läuft durch den Park.", ["en", "de"])
    assert [candidate["language"] for candidate in ranked] == ["de", "en"]
    assert sum(candidate["confidence"] for candidate in ranked) == pytest.approx(100, abs=1)


def test_without_the_detect_extra_detection_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "py3langid", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "py3langid.langid", None)
    with pytest.raises(DetectorMissing, match=r"keras-transformer\[detect\]"):
        LanguageIdentifier().rank("A dog runs.", ["en"])


def test_each_route_searches_as_its_export_records():
    """An export's model_info.json records its `serving_default` search (an imported
    checkpoint's own); one without it is searched with §6.1's."""

    def served(name, source, **info):
        info = {"source_language": source, "target_language": "de", "max_length": 64, **info}
        return types.SimpleNamespace(name=name, serving=types.SimpleNamespace(info=info))

    imported = SearchSettings(alpha=1.0, penalty="length")
    opus = served("opus", "en", search=dataclasses.asdict(imported))
    found = routes([opus, served("older", "fr")])
    assert found[("en", "de")].search == imported
    assert found[("fr", "de")].search == SearchSettings()


def test_alternatives_are_unique_and_leave_out_the_translation():
    assert filter_unique(["b", "a", "", "b", "c"], "a") == ["b", "c"]


def parsed(body: bytes, content_type=None, query="") -> tuple[int, object]:
    """(status, JSON reply) of an application answering a POST with `parameters(request)`."""

    async def endpoint(request):
        return json_reply(list(await parameters(request, Network())))

    app = Starlette(routes=[Route("/translate", answered(endpoint), methods=["POST"])])
    headers = {"Content-Type": content_type} if content_type else {}
    reply = TestClient(app).post(f"/translate{query}", content=body, headers=headers)
    return reply.status_code, reply.json()


def test_parameters_of_json_form_and_multipart_bodies():
    assert parsed(b'{"q": ["a", "b"]}', "application/json") == (200, [{"q": ["a", "b"]}, True])
    form = parsed(b"q=Hello+w%C3%B6rld&source=en&q=second", "application/x-www-form-urlencoded")
    assert form == (200, [{"q": "Hello wörld", "source": "en"}, False])
    multipart = (
        b'--XyZ\r\nContent-Disposition: form-data; name="q"\r\n\r\nA dog runs.\r\n'
        b'--XyZ\r\nContent-Disposition: form-data; name="target"\r\n\r\nde\r\n--XyZ--\r\n'
    )
    assert parsed(multipart, "multipart/form-data; boundary=XyZ") == (
        200,
        [{"q": "A dog runs.", "target": "de"}, False],
    )
    query = parsed(b"", None, "?q=from+the+query")
    assert query == (200, [{"q": "from the query"}, False])


@pytest.mark.parametrize(
    "body, content_type, message",
    [
        (b'{"q": "a"', "application/json", "Failed to decode JSON object"),
        (b'["q"]', "application/json", "Invalid JSON format"),
        (b"\xff\xfe\x00", "application/json", "Failed to decode JSON object"),
        (b"q=%ff%fe", "application/x-www-form-urlencoded", "not UTF-8"),
        (b"no boundary here", "multipart/form-data; boundary=XyZ", "malformed multipart"),
    ],
)
def test_malformed_bodies_are_refused_in_words(body, content_type, message):
    status, reply = parsed(body, content_type)
    assert status == 400 and message in reply["error"]


class NoModels:
    """A server with no model, enough for refusals: its settings, and calls run in place."""

    settings = ServerSettings()

    async def call(self, function, *args):
        return function(*args)


def refusal(api, body) -> tuple:
    """(status, error) of `api`'s answer to a JSON POST /detect of `body`."""
    reply = TestClient(Starlette(routes=api.routes())).post("/detect", json=body)
    return reply.status_code, reply.json()["error"]


def test_api_keys_and_rate_limits_are_checked_before_anything_else(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# no key yet\n")
    app = LibreTranslate(NoModels(), LibreTranslateSettings(api_keys=keys))
    assert refusal(app, {"q": "Hi", "api_key": "any"}) == (403, "Invalid API key")
    keys.write_text("good 1\n")
    app = LibreTranslate(NoModels(), LibreTranslateSettings(api_keys=keys, require_api_key=True))
    assert refusal(app, {"q": "Hi"}) == (
        400,
        "Please contact the server operator to get an API key",
    )
    # Let through, then refused for what follows the access check; then over its limit.
    assert refusal(app, {"api_key": "good"}) == (400, "Invalid request: missing q parameter")
    assert refusal(app, {"api_key": "good"}) == (429, "Slowdown: 1 per 1 minute")
    with pytest.raises(ConfigError, match="require_api_key needs api_keys"):
        LibreTranslateSettings(require_api_key=True)
    with pytest.raises(ConfigError, match="req_limit -2 is below -1"):
        LibreTranslateSettings(req_limit=-2)


class FilesOff(NoModels):
    settings = ServerSettings(documents=DocumentSettings(files_translation=False))


def test_files_translation_off_refuses_files_as_libretranslate_does():
    app = TestClient(Starlette(routes=LibreTranslate(FilesOff()).routes()))
    form = {"source": "en", "target": "de"}
    reply = app.post("/translate_file", data=form, files={"file": ("a.txt", b"Hi.")})
    assert (reply.status_code, reply.json()) == (
        403,
        {"error": "Files translation are disabled on this server."},
    )
