"""The page `translator serve` shows at `/`, driven in a real headless Chromium.

Debian's `chromium` and `chromium-driver` (tests/support/scripts/install_browser.sh,
run by .ci/run) through Selenium: type sentences, press Translate, read the page.
"""

import contextlib
import os
import shutil
import warnings

import pytest

from tests.support.images import assert_png
from tests.support.serving import SENTENCES, TAGS
from translator.cli import main as cli_main
from translator.io import one_line

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
# Where to keep the page's screenshot as well (the README's picture is made this way).
SCREENSHOT_DIR = os.environ.get("TRANSLATOR_SCREENSHOT_DIR")
# What chromedriver says when the browser, not the page, failed.
BROWSER_LOST = ("renderer", "tab crashed", "chrome not reachable", "disconnected")


class Browser:
    """A headless Chromium that is started again, once, if it dies under the test.

    The CI machine's Chromium has lost its renderer mid-run ("Unable to receive message
    from renderer") with nothing wrong in the page: that is the browser's failure, not the
    product's, so `open` starts a fresh browser and loads the page again, and says so. A
    second loss, and every assertion, fails the test as before.
    """

    def __init__(self):
        self.driver = self._start()
        self.restarts = 0

    @staticmethod
    def _start():
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        # No GPU here: software rendering without the GPU process Debian's flags ask for.
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--window-size=1000,760"):  # fmt: skip
            options.add_argument(argument)
        return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))

    def open(self, url: str):
        """Loads `url`; the driver that holds it."""
        from selenium.common.exceptions import InvalidSessionIdException, WebDriverException

        try:
            self.driver.get(url)
        except (InvalidSessionIdException, WebDriverException) as error:
            lost = isinstance(error, InvalidSessionIdException) or any(
                sign in str(error) for sign in BROWSER_LOST
            )
            if self.restarts or not lost:
                raise
            self.restarts += 1
            reason = one_line(str(error))[:120]
            warnings.warn(f"Chromium lost its session ({reason}); restarted", stacklevel=2)
            self.quit()
            self.driver = self._start()
            self.driver.get(url)
        return self.driver

    def quit(self):
        with contextlib.suppress(Exception):  # a browser that died has nothing to close
            self.driver.quit()


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        message = "no chromium/chromedriver: run tests/support/scripts/install_browser.sh"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs them: a missing browser is a broken CI
        pytest.skip(message)
    held = Browser()
    yield held
    held.quit()


def _translate_on_page(held: Browser, url: str, lines: list[str], tag: str = "") -> list[dict]:
    """Types `lines`, picks `tag`, presses Translate; what the page shows per sentence."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser = held.open(url)
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("\n".join(lines))
    if tag:
        Select(browser.find_element(By.ID, "tag")).select_by_value(tag)
    browser.find_element(By.ID, "translate").click()
    status = browser.find_element(By.ID, "status")
    WebDriverWait(browser, 60).until(lambda _: " ms" in status.text)
    assert browser.find_element(By.ID, "error").text == ""

    def text(element, name: str) -> str:  # as the DOM holds it, not as laid out
        return element.find_element(By.CLASS_NAME, name).get_attribute("textContent")

    shown = []
    for block in browser.find_elements(By.CSS_SELECTOR, "#results .sentence"):
        items = block.find_elements(By.CSS_SELECTOR, "ol.n-best li")
        shown.append(
            {
                "source": text(block, "source"),
                "translation": text(block, "translation"),
                "n_best": [text(item, "text") for item in items],
                "scores": [float(text(item, "score")) for item in items],
            }
        )
    return shown


def test_the_page_translates_as_translate_and_the_api_do(
    browser, server, exported, tmp_path, capsys
):
    lines = [SENTENCES[0], SENTENCES[3]]
    shown = _translate_on_page(browser, f"{server.url}/", lines)
    from selenium.webdriver.common.by import By

    browser = browser.driver
    header = browser.find_element(By.ID, "model").text
    assert "model translator, version 1" in header and "the 3 best" in header
    status = browser.find_element(By.ID, "status").text
    assert status.startswith("2 sentences in ") and status.endswith(" ms"), status
    screenshot = tmp_path / "page.png"
    assert browser.save_screenshot(str(screenshot))
    assert_png(screenshot)
    if SCREENSHOT_DIR:
        shutil.copy(screenshot, os.path.join(SCREENSHOT_DIR, "serve-page.png"))

    # The best translation is what `translator translate` gives with the export's search.
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", "utf-8")
    capsys.readouterr()
    assert cli_main(
        ["translate", "--model", str(exported.model_dir), "--input", str(tmp_path / "in.txt"),
         "--beam-size", "4", "--length-penalty", "0.6", "--max-source-length", "40"]
    ) == 0  # fmt: skip
    expected = capsys.readouterr().out.splitlines()
    assert [s["source"] for s in shown] == lines
    # (`translate` writes one line per sentence: a newline in a translation is a space)
    assert [one_line(s["translation"]) for s in shown] == expected
    # The n-best list and its scores are the REST API's answer to the same request.
    status, body = server.post(
        "/v1/models/translator:predict", {"signature_name": "n_best", "instances": lines}
    )
    assert status == 200
    for on_page, answer in zip(shown, body["predictions"], strict=True):
        assert on_page["n_best"] == answer["translations"]
        assert on_page["scores"] == pytest.approx(answer["scores"], abs=5e-4)
        assert on_page["scores"] == sorted(on_page["scores"], reverse=True)


def test_the_page_offers_the_models_tags(browser, server):
    lines = [SENTENCES[1], SENTENCES[2]]
    shown = _translate_on_page(browser, f"{server.url}/", lines, tag=TAGS[1])
    status, body = server.post(
        "/v1/models/translator:predict",
        {
            "signature_name": "tagged_n_best",
            "instances": [{"inputs": line, "tags": TAGS[1]} for line in lines],
        },
    )
    assert status == 200
    assert [s["n_best"] for s in shown] == [a["translations"] for a in body["predictions"]]


def test_the_page_translates_html_as_the_html_signature_does(browser, server, tmp_path):
    """HTML mode: the text is one page, sent to `html`; shown as source and as a preview
    in a sandboxed frame (no script of the page runs)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = f"<h2>{SENTENCES[0]}</h2>\n<p><i>{SENTENCES[1]} <b>{SENTENCES[2]}</b></p>"
    browser = browser.open(f"{server.url}/")
    browser.find_element(By.ID, "html").click()
    assert browser.find_element(By.ID, "source-label").text == "An HTML page or fragment:"
    assert not browser.find_element(By.ID, "tag-label").is_displayed()
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys(page)
    browser.find_element(By.ID, "translate").click()
    status = browser.find_element(By.ID, "status")
    WebDriverWait(browser, 60).until(lambda _: " ms" in status.text)
    assert browser.find_element(By.ID, "error").text == ""
    assert status.text.startswith("1 page in ")
    status_code, body = server.post(
        "/v1/models/translator:predict", {"signature_name": "html", "instances": [page]}
    )
    assert status_code == 200
    (want,) = body["predictions"]
    shown = browser.find_element(By.CSS_SELECTOR, "#results pre.page-source")
    assert shown.get_attribute("textContent") == want["translations"]
    assert want["repairs"] and want["repairs"] in browser.find_element(By.ID, "repairs").text
    frame = browser.find_element(By.CSS_SELECTOR, "#results iframe.preview")
    assert frame.get_attribute("sandbox") == ""
    assert frame.get_attribute("srcdoc") == want["translations"]
    screenshot = tmp_path / "page-html.png"
    assert browser.save_screenshot(str(screenshot))
    assert_png(screenshot)
    if SCREENSHOT_DIR:
        shutil.copy(screenshot, os.path.join(SCREENSHOT_DIR, "serve-page-html.png"))
