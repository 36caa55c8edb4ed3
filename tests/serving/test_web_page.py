"""The web page at / (server/page/web_page.py) in a real browser: headless Chromium (Debian's
`chromium` and `chromium-driver`) driven by selenium, over a `ModelServer` of the session's tiny
export served as three models (English into German; into French and Czech, multilingual; and a
copy that says it translates German into English, so that a swap has a way back). The page is
driven by keyboard where a person could, at desktop size and at 390×844, and checked against the
server's own answers: LibreTranslate's `/translate`, the `translate_options` and `attention`
signatures. Screenshots are saved under $KT_SCREENSHOT_DIR, or the test's temporary folder.

Without Chromium the browser tests skip, saying why, unless KT_REQUIRE_BROWSER=1 (as `.ci/run`
sets it), where they fail.
"""

import base64
import importlib.util
import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from keras_transformer.export.layout import MODEL_INFO
from keras_transformer.server.apis.libretranslate import LibreTranslate, LibreTranslateSettings
from keras_transformer.server.models.lifecycle import ServedModel
from keras_transformer.server.models.model_manager import ModelManager
from keras_transformer.server.page.api_docs import api_docs
from keras_transformer.server.page.web_page import FILES, WebPage
from keras_transformer.server.server import ModelServer
from serving_clients import predict_outputs, server_settings
from waiting import wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REQUIRE_BROWSER = "KT_REQUIRE_BROWSER"
SCREENSHOT_DIR = "KT_SCREENSHOT_DIR"

NAME, MULTILINGUAL, REVERSED = "m30k-ende", "opus-mt-en-mul", "reversed-deen"
SENTENCE = "A man in a blue shirt is riding a bike."
CHAR_LIMIT = 200
SEARCH = {"beam_size": 4, "alpha": 0.6, "extra_length": 50}  # the Inspect panel's: §6.1's
# The multilingual model's own, recorded in its model_info.json as an imported model's is.
OWN_SEARCH = {"beam_size": 2, "alpha": 1.0, "extra_length": 50}
SIZES = {
    "desktop": {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
    "phone": {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True},
}


def page_alone() -> TestClient:
    """A client of an application holding the page's routes and nothing else."""
    return TestClient(Starlette(routes=WebPage().routes()))


def test_the_page_files_only_by_get():
    page = page_alone()
    assert page.get("/").headers["Content-Type"] == "text/html; charset=utf-8"
    for script in ("app.js", "inspect.js", "files.js", "server.js"):
        content_type = page.get(f"/static/{script}").headers["Content-Type"]
        assert content_type == "text/javascript; charset=utf-8"
    assert page.get("/static/style.css").headers["Content-Type"] == "text/css; charset=utf-8"
    assert page.get("/static/favicon.svg").headers["Content-Type"] == "image/svg+xml"
    assert page.get("/static/web_page.py").status_code == 404  # the files, not the folder
    assert page.get("/v1/models").status_code == 404
    assert page.post("/", content=b"{}").status_code == 405


def test_every_file_allows_only_its_own_server():
    page = page_alone()
    for path in FILES:
        policy = page.get(path).headers["Content-Security-Policy"]
        assert "default-src 'self';" in policy
        assert "unsafe" not in policy and "*" not in policy and "http" not in policy


# -- in the browser ------------------------------------------------------------------------


def missing_browser() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} is missing (Debian's chromium and chromium-driver packages)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (requirements-dev.txt)"
    return None


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    """One headless Chromium for the module's tests, allowed the clipboard and to download into
    `downloads`; its console kept for the checks."""
    why = missing_browser()
    if why and os.environ.get(REQUIRE_BROWSER) == "1":
        pytest.fail(f"{why}, and {REQUIRE_BROWSER}=1 requires the browser test")
    if why:
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1280,900"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The driver named: Selenium Manager would download one, which fails offline.
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    permissions = ["clipboardReadWrite", "clipboardSanitizedWrite"]
    driver.execute_cdp_cmd("Browser.grantPermissions", {"permissions": permissions})
    driver.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def reversed_model(exported, tmp_path_factory):
    """A copy of `exported` whose model_info.json says it translates German into English."""
    base = tmp_path_factory.mktemp("reversed") / REVERSED
    shutil.copytree(exported, base)
    info_path = base / "1" / MODEL_INFO
    info = json.loads(info_path.read_text())
    info_path.write_text(json.dumps(info | {"source_language": "de", "target_language": "en"}))
    return base


@pytest.fixture(scope="module")
def multilingual_with_its_search(multilingual, tmp_path_factory):
    """A copy of `multilingual` whose model_info.json records a search of its own, as an
    imported model's export records its checkpoint's: the Inspect panel asks with it."""
    base = tmp_path_factory.mktemp("own-search") / MULTILINGUAL
    shutil.copytree(multilingual, base)
    info_path = base / "1" / MODEL_INFO
    info = json.loads(info_path.read_text())
    info_path.write_text(json.dumps(info | {"search": info["search"] | OWN_SEARCH}))
    return base


@pytest.fixture(scope="module")
def server(exported, multilingual_with_its_search, reversed_model):
    models = ModelManager(
        [
            ServedModel(NAME, exported),
            ServedModel(MULTILINGUAL, multilingual_with_its_search),
            ServedModel(REVERSED, reversed_model),
        ]
    )
    server = ModelServer(models, server_settings())
    server.start()
    LibreTranslate.add_to(server, LibreTranslateSettings(char_limit=CHAR_LIMIT))  # as `serve`
    server.add_routes(WebPage().routes() + api_docs().routes())  # as `serve` does
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    """Where screenshots go: $KT_SCREENSHOT_DIR, or the module's temporary folder."""
    folder = os.environ.get(SCREENSHOT_DIR)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return Path(folder)
    return tmp_path_factory.mktemp("screenshots")


def predict(server, signature_name, inputs, name=NAME) -> dict:
    """The outputs of `signature_name` for `inputs`, asked of the server as any client would."""
    return predict_outputs(server, name, signature_name, inputs)


def answer(server, **body) -> tuple[int, dict]:
    """(status, reply) of LibreTranslate's `/translate` to the JSON `body`, asked as any client
    would."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.rest_port}/translate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def translated(server, **body) -> dict:
    """The reply of `/translate` to `body`, which it translates."""
    status, reply = answer(server, **body)
    assert status == 200, reply
    return reply


def screenshot(driver, path: Path):
    """The whole page as a PNG, beyond the window's height too; its path printed."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"captureBeyondViewport": True, "clip": clip}
    )
    path.write_bytes(base64.b64decode(shot["data"]))
    print(f"screenshot: {path}")


def element(driver, css):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def elements(driver, css):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, css)


def load(driver, server, size="desktop", query="", error=""):
    """The page at `size`, its languages loaded, showing `error` (none by default)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", SIZES[size])
    driver.get(f"http://127.0.0.1:{server.rest_port}/{query}")
    wait_until(lambda: elements(driver, "#target-language option") or error_shown(driver))
    assert error_shown(driver) == error


def link(source, target, q) -> str:
    """The query of a link to the page's translation of `q`, as LibreTranslate's page has it."""
    return "?" + urlencode({"source": source, "target": target, "q": q})


def error_shown(driver) -> str:
    return " ".join(node.text for node in elements(driver, "[role=alert]")).strip()


def text_of(node) -> str:
    """The text as the page set it (selenium's `.text` trims and collapses spaces)."""
    return node.get_attribute("textContent")


def options_of(driver, css) -> list[str]:
    return [option.text for option in elements(driver, f"{css} option")]


def translation_shown(driver) -> str:
    return text_of(element(driver, "#translation"))


def wait_for_translation(driver, expected: str):
    wait_until(lambda: translation_shown(driver) == expected or error_shown(driver))
    assert error_shown(driver) == ""


def press(driver, css, *keys):
    """Focus `css` by script (as Tab would reach it) and press `keys` there."""
    node = element(driver, css)
    driver.execute_script("arguments[0].focus()", node)
    assert driver.switch_to.active_element == node
    driver.switch_to.active_element.send_keys(*keys)


def console_errors(driver) -> list[str]:
    """The console's errors since the last call: script errors, refused resources, failed loads
    (a missing favicon is one)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def scrolls_sideways(driver) -> bool:
    width, client_width = driver.execute_script(
        "const root = document.documentElement; return [root.scrollWidth, root.clientWidth]"
    )
    return width > client_width


# A heat map as the page drew it, read in one call rather than a WebDriver request per cell.
READ_MAP = """
const table = document.getElementById(arguments[0]);
const texts = (css) => [...table.querySelectorAll(css)].map((th) => th.textContent);
const rows = [...table.querySelectorAll("tbody tr")];
return [texts("th[scope=col]"), texts("th[scope=row]"),
        rows.map((row) => [...row.querySelectorAll("td")].map((td) => Number(td.dataset.weight)))];
"""


def map_of(driver, prefix):
    """(column labels, row labels, weights) of a heat map as the page draws it."""
    columns, rows, weights = driver.execute_script(READ_MAP, f"{prefix}-map")
    return columns, rows, np.array(weights)


def check_map(driver, prefix, columns, rows, weights):
    drawn_columns, drawn_rows, drawn_weights = map_of(driver, prefix)
    assert drawn_columns == columns
    assert drawn_rows == rows
    assert drawn_weights == pytest.approx(weights)


def unpadded(pieces):
    return pieces[: pieces.index("")] if "" in pieces else pieces


# The page's controls that have no name a screen reader could say: no <label>, no aria-label or
# aria-labelledby, no text of their own.
UNLABELLED = """
return [...document.querySelectorAll("button, select, textarea, input, summary, output")]
  .filter((control) => !(control.labels?.length || control.getAttribute("aria-label") ||
                         control.getAttribute("aria-labelledby") || control.textContent.trim()))
  .map((control) => control.outerHTML);
"""


def clipboard(driver) -> str:
    return driver.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], (e) => arguments[0](`${e}`))"
    )


@pytest.mark.slow  # a browser process
@pytest.mark.parametrize("size", SIZES)
def test_pick_a_pair_type_copy_and_inspect(browser, server, shots, size):
    from selenium.webdriver.common.keys import Keys

    console_errors(browser)  # the log so far: the previous tests'
    load(browser, server, size)
    assert browser.execute_script("return document.documentElement.lang") == "en"
    assert options_of(browser, "#source-language") == ["Detect the language", "English", "German"]
    # The pair by keyboard: Tab from the page's start reaches the tab, then the source.
    for _ in range(2):
        browser.switch_to.active_element.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("id") == "source-language"
    browser.switch_to.active_element.send_keys("English")
    assert options_of(browser, "#target-language") == ["Czech", "French", "German"]
    press(browser, "#target-language", "German")
    press(browser, "#source", SENTENCE)  # no key pressed after the text: it translates itself
    expected = translated(server, q=SENTENCE, source="en", target="de")["translatedText"]
    wait_for_translation(browser, expected)
    assert parse_qs(urlsplit(browser.current_url).query) == {
        "source": ["en"],
        "target": ["de"],
        "q": [SENTENCE],
    }
    assert element(browser, "#char-count").text == f"{len(SENTENCE)} / {CHAR_LIMIT}"

    press(browser, "#copy", Keys.ENTER)
    wait_until(lambda: element(browser, "#status").text == "Copied.")
    assert clipboard(browser) == expected
    focus = "return getComputedStyle(document.activeElement).outlineStyle"
    assert browser.execute_script(focus) == "solid"  # a visible focus ring
    # Served over plain HTTP (no Clipboard API): the selection copied instead.
    browser.execute_script(
        "navigator.clipboard.writeText('before');"
        "Object.defineProperty(navigator, 'clipboard', {value: undefined, configurable: true})"
    )
    press(browser, "#copy", Keys.ENTER)
    browser.execute_script("delete navigator.clipboard")  # the API back, to read the clipboard
    assert (clipboard(browser), error_shown(browser)) == (expected, "")

    # Inspect, opened by keyboard: the n-best list and the heat maps, as the signatures have them.
    press(browser, "#inspect summary", Keys.ENTER)
    wait_until(lambda: elements(browser, "#self-map td") or error_shown(browser))
    assert error_shown(browser) == ""
    assert element(browser, "#model-details").text.startswith(f"Model {NAME}, version 1, ")
    options = predict(server, "translate_options", {"text": [SENTENCE], **SEARCH})
    hypotheses = zip(options["n_best_translations"][0], options["n_best_scores"][0], strict=True)
    n_best = [(text, score) for text, score in hypotheses if text]  # empty slots left out
    buttons = elements(browser, "#n-best li button")
    assert [text_of(b.find_element("css selector", ".hypothesis")) for b in buttons] == [
        text for text, _ in n_best
    ]
    scores = [b.find_element("css selector", ".score").get_attribute("data-score") for b in buttons]
    assert [float(s) for s in scores] == pytest.approx([score for _, score in n_best], abs=1e-5)
    assert buttons[0].get_attribute("aria-pressed") == "true"
    best = options["translations"][0]
    attention = predict(server, "attention", {"text": [SENTENCE], "translation": [best]})
    source = unpadded(attention["source_pieces"][0])
    target = unpadded(attention["target_pieces"][0])
    cross = np.array(attention["encoder_decoder_attention"][0])[:, :, : len(target), : len(source)]
    encoder = np.array(attention["encoder_self_attention"][0])[:, :, : len(source), : len(source)]
    # The default: the last layer, the average of its heads.
    check_map(browser, "cross", source, target, cross[-1].mean(0))
    check_map(browser, "self", source, source, encoder[-1].mean(0))
    assert map_of(browser, "cross")[2].sum(1) == pytest.approx(1, abs=1e-4)  # softmax rows
    press(browser, "#cross-head", Keys.ARROW_DOWN)  # a head: the first after the average
    assert map_of(browser, "cross")[2] == pytest.approx(cross[-1][0])

    assert browser.execute_script(UNLABELLED) == []
    assert not scrolls_sideways(browser), f"the page scrolls horizontally at {size}"
    screenshot(browser, shots / f"translator-{size}.png")
    assert console_errors(browser) == []


# The page's requests to /translate counted, and the answer (or the abort) of the next one after
# `holdNext` is set held back a second (then `heldDone`), as a slow server would.
WATCH_TRANSLATE = """
Object.assign(window, { translateRequests: 0, holdNext: false, heldDone: false });
const original = window.fetch;
window.fetch = async (path, options) => {
  if (path !== "/translate") return original(path, options);
  window.translateRequests += 1;
  const held = window.holdNext;
  window.holdNext = false;
  try {
    return await original(path, options);  // or the AbortError of a request dropped
  } finally {
    if (held) {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      window.heldDone = true;
    }
  }
};
"""


@pytest.mark.slow  # a browser process
def test_typing_asks_once_and_a_late_answer_is_dropped(browser, server):
    from selenium.webdriver.common.keys import Keys

    def translation_of(text):
        return translated(server, q=text, source="en", target="de")["translatedText"]

    load(browser, server, query=link("en", "de", ""))
    browser.execute_script(WATCH_TRANSLATE)
    press(browser, "#source", SENTENCE)  # a keystroke each character, one request after them
    wait_for_translation(browser, translation_of(SENTENCE))
    assert browser.execute_script("return translateRequests") == 1

    # The answer to an older text, coming after the answer to the newer one, is not shown.
    older, newer = f"{SENTENCE} Two dogs.", f"{SENTENCE} Two dogs. A cat."
    assert translation_of(older) != translation_of(newer)  # the test can tell them apart
    browser.execute_script("holdNext = true")
    press(browser, "#source", " Two dogs.", Keys.CONTROL, Keys.ENTER)
    press(browser, "#source", " A cat.", Keys.CONTROL, Keys.ENTER)
    wait_for_translation(browser, translation_of(newer))
    wait_until(lambda: browser.execute_script("return heldDone"))
    assert translation_shown(browser) == translation_of(newer)
    assert browser.execute_script("return translateRequests") == 3


@pytest.mark.slow  # a browser process
def test_another_hypothesis_chosen_by_keyboard(browser, server):
    from selenium.webdriver.common.keys import Keys

    load(browser, server, query=link("en", "de", SENTENCE))
    press(browser, "#inspect summary", Keys.SPACE)
    wait_until(lambda: elements(browser, "#self-map td"))
    buttons = elements(browser, "#n-best li button")
    assert len(buttons) > 1
    press(browser, "#n-best li:nth-child(2) button", Keys.SPACE)
    second = text_of(buttons[1].find_element("css selector", ".hypothesis"))
    wait_until(lambda: second in text_of(element(browser, "#attention-of")))
    assert [b.get_attribute("aria-pressed") for b in buttons][:2] == ["false", "true"]
    attention = predict(server, "attention", {"text": [SENTENCE], "translation": [second]})
    assert map_of(browser, "cross")[1] == unpadded(attention["target_pieces"][0])


@pytest.mark.slow  # a browser process
def test_a_link_reproduces_a_translation_and_swap_turns_it_back(browser, server):
    from selenium.webdriver.common.keys import Keys

    load(browser, server, query=link("en", "de", SENTENCE))
    forth = translated(server, q=SENTENCE, source="en", target="de")["translatedText"]
    wait_for_translation(browser, forth)
    press(browser, "#swap", Keys.ENTER)
    # German into English: the translation is now the text, translated back.
    assert element(browser, "#source-language").get_attribute("value") == "de"
    assert element(browser, "#target-language").get_attribute("value") == "en"
    assert element(browser, "#source").get_attribute("value") == forth
    # What the server answers, a translation or its error (an untrained model's output may be
    # one word longer than it translates), the page shows.
    status, back = answer(server, q=forth, source="de", target="en")
    if status == 200:
        wait_for_translation(browser, back["translatedText"])
    else:
        wait_until(lambda: error_shown(browser).endswith(back["error"]))
    assert parse_qs(urlsplit(browser.current_url).query)["source"] == ["de"]
    # English into Czech has no way back: swap is off, and says why.
    press(browser, "#swap", Keys.ENTER)
    assert element(browser, "#source-language").get_attribute("value") == "en"
    press(browser, "#target-language", "Czech")
    wait_until(lambda: element(browser, "#swap").get_attribute("disabled"))
    assert element(browser, "#swap").get_attribute("title") == (
        "No model translates this pair the other way"
    )


@pytest.mark.slow  # a browser process
def test_detect_the_language_and_the_multilingual_model_with_its_token(browser, server):
    from selenium.webdriver.common.keys import Keys

    load(browser, server, "phone")
    press(browser, "#source-language", "Detect")
    assert options_of(browser, "#target-language") == ["Czech", "English", "French", "German"]
    press(browser, "#target-language", "French")
    press(browser, "#source", SENTENCE)
    reply = translated(server, q=SENTENCE, source="auto", target="fr")
    wait_for_translation(browser, reply["translatedText"])
    detected = reply["detectedLanguage"]
    assert detected["language"] == "en"
    assert element(browser, "#detected").text == f"Detected: English ({detected['confidence']:g}%)"
    # The pair's model is the multilingual one: its input is led by French's token, and it is
    # searched as its export records (beam 2, not the paper's 4).
    press(browser, "#inspect summary", Keys.ENTER)
    wait_until(lambda: elements(browser, "#n-best li") or error_shown(browser))
    assert element(browser, "#model-details").text.startswith(f"Model {MULTILINGUAL}, version 1")
    inputs = {"text": [f">>fra<< {SENTENCE}"], **OWN_SEARCH}
    expected = predict(server, "translate_options", inputs, MULTILINGUAL)
    first = element(browser, "#n-best li .hypothesis")
    assert text_of(first) == expected["translations"][0]
    n_best = [text for text in expected["n_best_translations"][0] if text]
    assert [text_of(e) for e in elements(browser, "#n-best li .hypothesis")] == n_best


@pytest.mark.slow  # a browser process
@pytest.mark.parametrize("size", SIZES)
def test_a_document_in_the_files_tab(browser, server, shots, downloads, tmp_path, size):
    """A .docx built with python-docx, chosen, translated by /translate_file and downloaded:
    each paragraph the translation /translate gives it."""
    import docx
    from selenium.webdriver.common.keys import Keys

    paragraphs = [SENTENCE, "Two dogs play in the snow."]
    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    letter = tmp_path / f"letter-{size}.docx"
    document.save(letter)

    console_errors(browser)  # the log so far: the previous tests'
    load(browser, server, size, query=link("en", "de", ""))
    press(browser, "#text-tab", Keys.ARROW_RIGHT)  # the tabs by their arrows
    assert browser.switch_to.active_element.get_attribute("id") == "files-tab"
    assert element(browser, "#files-panel").is_displayed()
    assert not element(browser, "#text-panel").is_displayed()
    assert ".docx" in element(browser, "#file").get_attribute("accept").split(",")
    element(browser, "#file").send_keys(str(letter))
    before = set(downloads.iterdir())
    press(browser, "#translate-file", Keys.ENTER)
    wait_until(lambda: element(browser, "#download").is_displayed() or error_shown(browser))
    assert error_shown(browser) == ""
    assert browser.switch_to.active_element.get_attribute("id") == "download"
    screenshot(browser, shots / f"files-{size}.png")
    browser.switch_to.active_element.send_keys(Keys.ENTER)

    def new_documents():
        return [path for path in set(downloads.iterdir()) - before if path.suffix == ".docx"]

    wait_until(new_documents)
    (downloaded,) = new_documents()
    expected = [
        translated(server, q=paragraph, source="en", target="de")["translatedText"]
        for paragraph in paragraphs
    ]
    assert [paragraph.text for paragraph in docx.Document(downloaded).paragraphs] == expected
    assert not scrolls_sideways(browser)
    assert console_errors(browser) == []


@pytest.mark.slow  # a browser process
def test_dark_mode_follows_the_system(browser, server):
    dark = {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
    background = "return getComputedStyle(document.documentElement).backgroundColor"
    load(browser, server)
    light_background = browser.execute_script(background)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", dark)
    try:
        assert browser.execute_script(background) != light_background
        assert browser.execute_script(background) == "rgb(22, 23, 25)"
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


@pytest.mark.slow  # a browser process
def test_errors_are_shown_as_text(browser, server):
    from selenium.webdriver.common.keys import Keys

    # A text over the server's limit, from a link: refused before it is sent.
    too_long = "A dog runs. " * (CHAR_LIMIT // 12 + 1)
    error = f"The text is longer than the server's limit of {CHAR_LIMIT} characters."
    load(browser, server, query=link("en", "de", too_long), error=error)
    assert element(browser, "#char-count").text == f"{len(too_long)} / {CHAR_LIMIT}"
    assert element(browser, "#source").get_attribute("aria-invalid") == "true"
    assert translation_shown(browser) == ""

    # The network gone (the browser offline): the page says so.
    load(browser, server, query=link("en", "de", SENTENCE))
    wait_until(lambda: translation_shown(browser))
    browser.execute_cdp_cmd("Network.enable", {})
    offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", offline)
    try:
        press(browser, "#source", " Two dogs.", Keys.CONTROL, Keys.ENTER)
        wait_until(lambda: "cannot be reached" in error_shown(browser))
    finally:
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", {**offline, "offline": False})
    assert translation_shown(browser) == ""
    console_errors(browser)  # the failed requests, on purpose


@pytest.mark.slow  # a browser process
def test_the_api_docs_page_shows_every_route_of_the_contract(browser, server):
    """/docs: Swagger UI from the server's own files, on its /openapi.json, refused nothing by
    its Content-Security-Policy."""
    browser.get(f"http://127.0.0.1:{server.rest_port}/docs")
    wait_until(lambda: elements(browser, ".opblock-summary-path"))
    shown = {node.get_attribute("data-path") for node in elements(browser, ".opblock-summary-path")}
    assert {"/translate", "/v1/models/{name}:predict", "/openapi.json", "/spec"} <= shown
    console = [entry["message"] for entry in browser.get_log("browser")]
    assert not [m for m in console if "Content Security Policy" in m or "Uncaught" in m], console
