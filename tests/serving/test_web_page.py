"""The web page at / (server/page/web_page.py) in a real browser: headless Chromium (Debian's
`chromium` and `chromium-driver`) driven by selenium, over a `ModelServer` of the session's tiny
export. It is typed with the keyboard and checked against the model's own signatures, at desktop
size and at 390×844; screenshots are saved under the test's temporary folder.

Without Chromium the browser tests skip, saying why, unless KT_REQUIRE_BROWSER=1 (as `.ci/run`
sets it), where they fail.
"""

import base64
import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

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

NAME, MULTILINGUAL = "m30k-ende", "opus-mt-en-mul"  # listed in this order
SENTENCE = "A man in a blue shirt is riding a bike."
SEARCH = {"beam_size": 4, "alpha": 0.6, "extra_length": 50}  # the page's: §6.1's
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}


def page_alone() -> TestClient:
    """A client of an application holding the page's routes and nothing else."""
    return TestClient(Starlette(routes=WebPage().routes()))


def test_the_page_files_only_by_get():
    page = page_alone()
    assert page.get("/").headers["Content-Type"] == "text/html; charset=utf-8"
    assert page.get("/static/app.js").headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert page.get("/static/style.css").headers["Content-Type"] == "text/css; charset=utf-8"
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
def browser():
    """One headless Chromium for the module's tests; its console kept for the checks."""
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
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def server(exported, multilingual):
    models = ModelManager([ServedModel(NAME, exported), ServedModel(MULTILINGUAL, multilingual)])
    server = ModelServer(models, server_settings())
    server.start()
    LibreTranslate.add_to(server, LibreTranslateSettings())  # as `serve` does: /languages
    server.add_routes(WebPage().routes() + api_docs().routes())  # as `serve` does
    yield server
    server.stop()


def predict(server, signature_name, inputs, name=NAME) -> dict:
    """The outputs of `signature_name` for `inputs`, asked of the server as any client would."""
    return predict_outputs(server, name, signature_name, inputs)


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


def load(driver, server):
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    driver.get(f"http://127.0.0.1:{server.rest_port}/")
    wait_until(lambda: elements(driver, "#model option") or element(driver, "#error").text)
    assert element(driver, "#error").text == ""


def text_of(node) -> str:
    """The text as the page set it (selenium's `.text` trims and collapses spaces)."""
    return node.get_attribute("textContent")


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


@pytest.mark.slow  # a browser process
def test_translate_by_keyboard_with_n_best_and_heat_maps(browser, server, tmp_path):
    from selenium.webdriver.common.keys import Keys

    load(browser, server)
    assert browser.execute_script("return document.documentElement.lang") == "en"
    assert element(browser, "#model option").text == f"{NAME} (en→de)"
    assert element(browser, "#model-details").text.startswith("English → German · version 1 · ")
    # The model, then the text: Tab twice from the page's start.
    for _ in range(2):
        browser.switch_to.active_element.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("id") == "source"
    browser.switch_to.active_element.send_keys(SENTENCE, Keys.ENTER)
    wait_until(lambda: elements(browser, "#self-map td") or element(browser, "#error").text)
    assert element(browser, "#error").text == ""

    expected = predict(server, "translate_options", {"text": [SENTENCE], **SEARCH})
    assert text_of(element(browser, "#translation")) == expected["translations"][0]
    hypotheses = zip(expected["n_best_translations"][0], expected["n_best_scores"][0], strict=True)
    n_best = [(text, score) for text, score in hypotheses if text]  # empty slots left out
    buttons = elements(browser, "#n-best li button")
    assert [text_of(b.find_element("css selector", ".hypothesis")) for b in buttons] == [
        text for text, _ in n_best
    ]
    scores = [b.find_element("css selector", ".score").get_attribute("data-score") for b in buttons]
    assert [float(s) for s in scores] == pytest.approx([score for _, score in n_best], abs=1e-5)
    assert buttons[0].get_attribute("aria-pressed") == "true"

    attention = predict(
        server, "attention", {"text": [SENTENCE], "translation": [expected["translations"][0]]}
    )
    source = unpadded(attention["source_pieces"][0])
    target = unpadded(attention["target_pieces"][0])
    cross = np.array(attention["encoder_decoder_attention"][0])[:, :, : len(target), : len(source)]
    encoder = np.array(attention["encoder_self_attention"][0])[:, :, : len(source), : len(source)]
    # The default: the last layer, the average of its heads.
    check_map(browser, "cross", source, target, cross[-1].mean(0))
    check_map(browser, "self", source, source, encoder[-1].mean(0))
    assert map_of(browser, "cross")[2].sum(1) == pytest.approx(1, abs=1e-4)  # softmax rows
    screenshot(browser, tmp_path / "desktop.png")

    # A head chosen by keyboard: the first after the average.
    element(browser, "#cross-head").send_keys(Keys.ARROW_DOWN)
    assert map_of(browser, "cross")[2] == pytest.approx(cross[-1][0])

    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    assert browser.execute_script("return innerWidth") == PHONE["width"]
    width, client_width = browser.execute_script(
        "const root = document.documentElement; return [root.scrollWidth, root.clientWidth]"
    )
    assert width <= client_width, "the page scrolls horizontally at 390×844"
    check_map(browser, "self", source, source, encoder[-1].mean(0))
    screenshot(browser, tmp_path / "phone.png")


@pytest.mark.slow  # a browser process
def test_another_hypothesis_chosen_by_keyboard(browser, server):
    from selenium.webdriver.common.keys import Keys

    load(browser, server)
    element(browser, "#source").send_keys(SENTENCE)
    element(browser, "#translate").send_keys(Keys.ENTER)  # the button, too
    wait_until(lambda: elements(browser, "#self-map td"))
    buttons = elements(browser, "#n-best li button")
    assert len(buttons) > 1
    # Tab from the text: the Translate button, then the hypotheses in order.
    element(browser, "#source").send_keys(Keys.TAB, Keys.TAB, Keys.TAB)
    assert browser.switch_to.active_element == buttons[1]
    browser.switch_to.active_element.send_keys(Keys.SPACE)
    second = text_of(buttons[1].find_element("css selector", ".hypothesis"))
    wait_until(lambda: second in text_of(element(browser, "#attention-of")))
    assert [b.get_attribute("aria-pressed") for b in buttons][:2] == ["false", "true"]
    attention = predict(server, "attention", {"text": [SENTENCE], "translation": [second]})
    assert map_of(browser, "cross")[1] == unpadded(attention["target_pieces"][0])


@pytest.mark.slow  # a browser process
def test_a_multilingual_model_offers_each_target_and_leads_the_text_with_its_token(browser, server):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.select import Select

    load(browser, server)
    options = [option.text for option in elements(browser, "#model option")]
    assert options == [f"{NAME} (en→de)", f"{MULTILINGUAL} (en→fr)", f"{MULTILINGUAL} (en→cs)"]
    Select(element(browser, "#model")).select_by_visible_text(f"{MULTILINGUAL} (en→fr)")
    assert element(browser, "#model-details").text.startswith("English → French · version 1")
    element(browser, "#source").send_keys(SENTENCE, Keys.ENTER)
    wait_until(lambda: elements(browser, "#self-map td") or element(browser, "#error").text)
    assert element(browser, "#error").text == ""
    inputs = {"text": [f">>fra<< {SENTENCE}"], **SEARCH}
    expected = predict(server, "translate_options", inputs, MULTILINGUAL)
    assert text_of(element(browser, "#translation")) == expected["translations"][0]


@pytest.mark.slow  # a browser process
def test_errors_are_shown_as_text(browser, server):
    from selenium.webdriver.common.keys import Keys

    load(browser, server)
    source = element(browser, "#source")
    source.send_keys(Keys.ENTER)  # nothing to translate
    assert element(browser, "[role=alert]").text == "Type a sentence to translate."
    source.send_keys("A dog.", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "A cat.")  # a new line only
    assert source.get_attribute("value") == "A dog.\nA cat."
    assert elements(browser, "#result[hidden]")

    # The network gone (the browser offline): the page says so.
    browser.execute_cdp_cmd("Network.enable", {})
    offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", offline)
    try:
        source.send_keys(Keys.ENTER)
        wait_until(lambda: "cannot be reached" in element(browser, "[role=alert]").text)
    finally:
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", {**offline, "offline": False})

    # A model the server does not have (one removed since the page loaded, say): its error.
    browser.execute_script("document.querySelector('#model option').value = 'gone'")
    source.send_keys(Keys.ENTER)
    wait_until(lambda: "404" in element(browser, "[role=alert]").text)
    assert "Servable not found for request: gone" in element(browser, "[role=alert]").text
    assert elements(browser, "#result[hidden]")
    # No script error and nothing the Content-Security-Policy refused, in any of the tests.
    console = [entry["message"] for entry in browser.get_log("browser")]
    assert not [m for m in console if "Content Security Policy" in m or "Uncaught" in m], console


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
