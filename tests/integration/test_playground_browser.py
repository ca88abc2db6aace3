"""The playground in a real headless browser (Debian's chromium and its chromedriver, driven by selenium) against the
real CPU stack: a person's whole round (token, a JSON state, one question of each type, one button) draws the same
numbers the API answers to the same request sent with httpx; the page's curl, Python SDK and MCP code, run as they
are, answer the same; a wrong token shows the 401's message, a full queue the 429's wait; the page works from the
keyboard alone and on a narrow window, under its Content-Security-Policy, with nothing on the console.

PLAYGROUND_SCREENSHOT=<file.png> also saves the answered page there (the README's docs/playground.png)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests.tools import required_tool

from .helpers import AUTH, SHIM_TOKEN, held_queue

pytestmark = pytest.mark.triton

BROWSER_HINT = "it comes with Debian's chromium and chromium-driver packages; run scripts/install-chromium.sh"
STATE = {"ticket": 4512, "text": "The customer was charged twice and asks for the extra payment back."}
WAIT_SECONDS = 60


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = webdriver.ChromeOptions()
    options.binary_location = required_tool("chromium", BROWSER_HINT)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,1700", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=required_tool("chromedriver", BROWSER_HINT),
                      log_output=str(tmp_path_factory.mktemp("chromedriver") / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[dict]:
    """The console's errors since the last call (reading the log empties it)."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def wait_for(driver, condition, seconds: float = WAIT_SECONDS):
    return WebDriverWait(driver, seconds).until(lambda _: condition())


def open_page(driver, shim) -> None:
    driver.get(f"{shim.url}/")
    assert driver.current_url == f"{shim.url}/playground"
    driver.execute_script("sessionStorage.clear()")
    driver.refresh()


def type_into(driver, element_id: str, text: str) -> None:
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def enter_token(driver, token: str) -> None:
    type_into(driver, "token", token)
    driver.find_element(By.ID, "token").send_keys(Keys.TAB)  # leaving the field reads the models


def click(driver, element_id: str) -> None:
    driver.find_element(By.ID, element_id).click()


def build_three_questions(driver) -> None:
    """One question of each type, as a person fills them in."""
    click(driver, "add-choice")
    type_into(driver, "q0-name", "team")
    type_into(driver, "q0-instructions", "Which team should handle this request?")
    type_into(driver, "q0-option0-value", "billing")
    type_into(driver, "q0-option0-description", "Payments and refunds")
    click(driver, "q0-add-option")
    type_into(driver, "q0-option1-value", "delivery")
    type_into(driver, "q0-option1-description", "Shipping and returns")
    click(driver, "add-score")
    type_into(driver, "q1-name", "urgency")
    type_into(driver, "q1-instructions", "Rate the priority.")
    type_into(driver, "q1-level0", "Low")
    for index, level in ((1, "Medium"), (2, "High")):
        click(driver, "q1-add-level")
        type_into(driver, f"q1-level{index}", level)
    click(driver, "add-noul")
    type_into(driver, "q2-name", "refund_requested")
    type_into(driver, "q2-instructions", "Is the customer asking for a refund?")
    type_into(driver, "q2-true", "A refund is asked for")


# What the page must send for build_three_questions and STATE, written out here, not read from the page.
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this request?",
             "criteria": {"billing": "Payments and refunds", "delivery": "Shipping and returns"}},
    "urgency": {"type": "score", "instructions": "Rate the priority.", "criteria": ["Low", "Medium", "High"]},
    "refund_requested": {"type": "noul", "instructions": "Is the customer asking for a refund?",
                         "criteria": {"true": "A refund is asked for"}},
}


def shown_answers(driver) -> dict:
    """Each drawn answer as the page holds it: its bars (key, exact value, chosen) and its confidence."""
    answers = {}
    for article in driver.find_elements(By.CSS_SELECTOR, "#answers article.answer"):
        bars = [(row.get_attribute("data-key"), float(row.get_attribute("data-value")),
                 "chosen" in row.get_attribute("class").split(), row.find_element(By.CLASS_NAME, "bar-value").text)
                for row in article.find_elements(By.CSS_SELECTOR, "li.bar-row")]
        answers[article.get_attribute("data-name")] = {"type": article.get_attribute("data-type"), "bars": bars,
                                                       "confidence": article.get_attribute("data-confidence")}
    return answers


def expected_bars(answer: dict) -> list:
    """The bars an answer must draw: its probabilities, the model's own decision marked."""
    native = answer["x_native"]
    if answer["type"] == "noul":
        return [("true", answer["noul"], native["decision"] == "yes"),
                ("false", native["probabilities"]["no"], native["decision"] == "no")]
    chosen = answer["choice"] if answer["type"] == "choice" else native["decision"]
    assert answer["probabilities"][chosen] == answer["confidence"]
    return [(key, value, key == chosen) for key, value in answer["probabilities"].items()]


def run_code(command: list[str], stdin: str | None = None) -> str:
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "API_TOKEN": SHIM_TOKEN})
    assert done.returncode == 0, done.stderr
    return done.stdout


def code_of(driver, name: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, f"#code-{name} code").get_attribute("textContent")


def test_a_person_asks_three_questions_and_sees_the_apis_numbers(browser, shim, tmp_path):
    open_page(browser, shim)
    policy = httpx.get(f"{shim.url}/playground").headers["content-security-policy"]
    assert "default-src 'self'" in policy and "unsafe-inline" not in policy
    health = httpx.get(f"{shim.url}/health").json()["model"]
    wait_for(browser, lambda: "revision" in browser.find_element(By.ID, "pins").text)
    pins = {pin.get_attribute("data-pin"): pin.text for pin in browser.find_elements(By.CSS_SELECTOR, "#pins span")}
    assert pins == {"revision": f"revision {health['revision']}",
                    "inference_sha256": f"inference.py sha256 {health['inference_sha256']}",
                    "linear_attention": f"linear attention: {health['linear_attention']}"}

    enter_token(browser, SHIM_TOKEN)
    models = httpx.get(f"{shim.url}/v1/models", headers=AUTH).json()
    wait_for(browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, "#model option")) == len(models["models"]))
    limits = models["models"][0]["limits"]
    assert f"{limits['max_questions_per_request']} questions a request" in browser.find_element(By.ID, "limits").text
    assert browser.execute_script("return sessionStorage.length") == 0  # kept in memory unless asked

    browser.find_element(By.CSS_SELECTOR, "input[name=state-mode][value=json]").click()
    type_into(browser, "state", '{"ticket": ')
    assert "Not valid JSON" in browser.find_element(By.ID, "state-check").text  # checked as typed
    type_into(browser, "state", json.dumps(STATE))
    assert browser.find_element(By.ID, "state-check").text == ""
    build_three_questions(browser)
    model = browser.find_element(By.ID, "model").get_attribute("value")
    click(browser, "submit")
    wait_for(browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, "#answers article.answer")) == 3)

    body = {"model": model, "state": STATE, "questions": QUESTIONS}
    direct = httpx.post(f"{shim.url}/v1/systemone", json=body, headers=AUTH, timeout=120)
    assert direct.status_code == 200, direct.text
    answer = direct.json()
    shown = shown_answers(browser)
    assert list(shown) == list(QUESTIONS)
    for name, expected in answer["answers"].items():
        assert [bar[:3] for bar in shown[name]["bars"]] == expected_bars(expected), name
        assert [bar[2] for bar in shown[name]["bars"]].count(True) == 1, name
        assert all(text.startswith(f"{value:.4f}") for _, value, _, text in shown[name]["bars"])
        assert shown[name]["confidence"] == ("" if expected["type"] == "noul" else repr(expected["confidence"]))
    facts = {dd.get_attribute("data-fact"): dd.text for dd in browser.find_elements(By.CSS_SELECTOR, "#run dd")}
    assert facts["model"] == answer["model"]
    assert facts["input-tokens"] == str(answer["usage"]["input_tokens"])
    assert facts["time"].endswith("ms (measured by this page)")
    assert facts["request-id"] in shim.log_path.read_text()  # the id the shim gave the page's own request
    calls = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
             for row in browser.find_elements(By.CSS_SELECTOR, "#calls-table tbody tr")]
    assert [(row[0], row[1], row[2]) for row in calls] == [
        (str(call["index"]), ", ".join(call["questions"]), str(call["input_tokens"])) for call in answer["x_calls"]]

    assert console_errors(browser) == []
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(tmp_path / "playground.png"))
    if os.environ.get("PLAYGROUND_SCREENSHOT"):
        shutil.copy(tmp_path / "playground.png", os.environ["PLAYGROUND_SCREENSHOT"])

    # The same request as code, run as it is with the token in API_TOKEN, answers the same numbers.
    assert SHIM_TOKEN not in code_of(browser, "curl") + code_of(browser, "python") + code_of(browser, "mcp")
    required_tool("curl", "it comes with Debian's curl package")
    by_curl = json.loads(run_code(["bash", "-c", code_of(browser, "curl")]))
    assert by_curl["answers"] == answer["answers"]
    by_sdk = json.loads(run_code([sys.executable, "-c", code_of(browser, "python")]))
    assert by_sdk["answers"] == answer["answers"]
    by_mcp = json.loads(run_code(["bash", "-c", code_of(browser, "mcp")]))
    assert by_mcp["result"]["structuredContent"]["answers"] == answer["answers"]


def test_a_wrong_token_shows_the_401s_message(browser, shim):
    open_page(browser, shim)
    type_into(browser, "state", "The customer was charged twice.")
    click(browser, "add-noul")
    enter_token(browser, "not-the-token-" + "x" * 32)
    click(browser, "submit")
    error = wait_for(browser, lambda: browser.find_element(By.ID, "error").is_displayed()
                     and browser.find_element(By.ID, "error"))
    refused = httpx.get(f"{shim.url}/v1/models", headers={"Authorization": "Bearer not-the-token-" + "x" * 32})
    assert refused.status_code == 401
    assert error.find_element(By.CLASS_NAME, "error-code").text == "HTTP 401 unauthorized"
    assert error.find_element(By.CLASS_NAME, "error-message").text == refused.json()["error"]["message"]
    # the only console errors are the browser's own notes of the refused requests
    assert all("401" in entry["message"] for entry in console_errors(browser))


def test_a_full_queue_shows_the_429s_wait(browser, shim):
    open_page(browser, shim)
    type_into(browser, "state", "The customer was charged twice.")
    click(browser, "add-noul")
    enter_token(browser, SHIM_TOKEN)
    wait_for(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#model option"))
    with held_queue(shim, seconds=4):
        click(browser, "submit")
        error = wait_for(browser, lambda: browser.find_element(By.ID, "error").is_displayed()
                         and browser.find_element(By.ID, "error"), seconds=3)
        code = error.find_element(By.CLASS_NAME, "error-code").text
        wait = error.find_element(By.CLASS_NAME, "retry-after").text
    assert code == "HTTP 429 busy"
    assert wait == "Retry after 1 s (Retry-After)."
    assert all("429" in entry["message"] for entry in console_errors(browser))


def test_the_keyboard_alone_asks_a_question(browser, shim):
    """From the page's first field, with Tab, typing and Enter only: the token, a text state, a noul question."""
    open_page(browser, shim)
    keys = webdriver.ActionChains(browser)
    browser.find_element(By.TAG_NAME, "body").click()
    keys.send_keys(Keys.TAB, SHIM_TOKEN).perform()
    assert browser.switch_to.active_element.get_attribute("id") == "token"
    # token -> keep-for-this-tab -> model -> the state's kind -> the state
    keys.send_keys(Keys.TAB, Keys.TAB, Keys.TAB, Keys.TAB).perform()
    assert browser.switch_to.active_element.get_attribute("id") == "state"
    keys.send_keys("The customer was charged twice.").perform()
    keys.send_keys(Keys.TAB, Keys.TAB, Keys.TAB).perform()
    assert browser.switch_to.active_element.get_attribute("id") == "add-noul"
    keys.send_keys(Keys.ENTER).perform()
    assert browser.switch_to.active_element.get_attribute("id") == "q0-name"  # the new question takes the focus
    keys.send_keys(Keys.ENTER).perform()  # Enter in a field sends the form
    wait_for(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#answers article.answer"))
    assert list(shown_answers(browser)) == ["noul_1"]
    assert console_errors(browser) == []


def test_a_narrow_window_needs_no_sideways_scrolling(browser, shim):
    browser.set_window_size(380, 900)
    try:
        open_page(browser, shim)
        click(browser, "add-choice")
        click(browser, "add-score")
        overflow = browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0
    finally:
        browser.set_window_size(1280, 1700)
