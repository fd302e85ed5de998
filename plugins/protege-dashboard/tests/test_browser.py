"""The dashboard in a real browser (headless Chromium driven by Selenium), on the demo's data.

``scripts/chromium-for-tests`` finds or installs Chromium and its driver; ``make test`` hands
its path over in ``PROTEGE_TEST_CHROMEDRIVER``. With ``PROTEGE_DASHBOARD_SCREENSHOTS`` naming
a folder, the tests also leave screenshots there (the README's picture comes from one).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import Select, WebDriverWait

DRIVER_VARIABLE = "PROTEGE_TEST_CHROMEDRIVER"
SCREENSHOTS_VARIABLE = "PROTEGE_DASHBOARD_SCREENSHOTS"
PASSWORD = "scoop-operator-password"


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PROTEGE_", "OPENAI_"))}


def _protege(folder: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "protege", *args],
        cwd=folder,
        env=_environment(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Iterator[tuple[Path, str]]:
    """The Scoop demo played into a folder, an operator added, and ``protege dashboard``
    serving it: the folder and the dashboard's address."""
    folder = tmp_path_factory.mktemp("browser") / "scoop"
    _protege(folder.parent, "demo", "--dir", str(folder))
    _protege(folder, "operators", "add", "mara", "--password-stdin", stdin=PASSWORD + "\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "protege", "dashboard", "--port", "0"],
        cwd=folder,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        ready, _, _ = select.select([server.stdout], [], [], 60)
        assert ready, "protege dashboard said nothing"
        line = server.stdout.readline().decode()
        # An empty line: it ended; what it said on stderr is why.
        assert line.startswith("protege dashboard on http://127.0.0.1:"), (
            line or server.stderr.read().decode()
        )
        yield folder, line.split()[3].rstrip("/")
    finally:
        server.terminate()
        server.wait(timeout=30)


def _driver_path() -> str:
    path = os.environ.get(DRIVER_VARIABLE) or shutil.which("chromedriver")
    if not path:
        pytest.fail(
            "no chromedriver: run scripts/chromium-for-tests (as root it installs Debian's "
            f"chromium and chromium-driver), or set {DRIVER_VARIABLE}"
        )
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    """Headless Chromium."""
    options = webdriver.ChromeOptions()
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--disable-gpu",
    ):
        options.add_argument(argument)
    chromium = shutil.which("chromium")
    if chromium:
        options.binary_location = chromium
    driver = webdriver.Chrome(service=Service(_driver_path()), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(browser, condition, timeout: float = 30):
    return WebDriverWait(browser, timeout).until(condition)


def _submit(browser, button_id: str) -> None:
    old = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.ID, button_id).click()
    _wait(browser, _replaced(old))


def _replaced(element):
    """Whether ``element``'s page was replaced by the next one. Chromium says so either as a
    stale element or, asked while it swaps documents, as a node no longer in the document
    (selenium's staleness_of lets that second answer escape as an error)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def check(_browser) -> bool:
        try:
            element.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as error:
            if "does not belong to the document" in str(error):
                return True
            raise
        return False

    return check


def _screenshot(browser, name: str) -> None:
    folder = os.environ.get(SCREENSHOTS_VARIABLE)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / name))


@pytest.fixture(scope="module")
def signed_in(browser, demo):
    """The browser, signed in as mara through the login page."""
    _, url = demo
    browser.get(f"{url}/agents")
    assert "/login" in browser.current_url  # nobody sees a page without signing in
    browser.find_element(By.ID, "name").send_keys("mara")
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    _submit(browser, "login")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Agents"
    return browser


def test_an_operator_builds_access_and_the_explain_form_answers(signed_in, demo):
    browser, (folder, url) = signed_in, demo
    browser.get(f"{url}/toolkits/new")
    browser.find_element(By.ID, "toolkit-name").send_keys("Kitchen")
    browser.find_element(By.ID, "member-check_flavor_stock").click()
    browser.find_element(By.ID, "member-lookup_order").click()
    _submit(browser, "save-toolkit")
    assert browser.find_element(By.ID, "flash").text == "created toolkit Kitchen"
    kitchen_row = browser.find_element(By.XPATH, "//tr[td/a[text()='Kitchen']]")
    assert "check_flavor_stock, lookup_order" in kitchen_row.text

    browser.get(f"{url}/agents")
    browser.find_element(By.LINK_TEXT, "Sundae").click()
    Select(browser.find_element(By.ID, "attach-toolkit")).select_by_visible_text("Kitchen")
    _submit(browser, "attach")
    assert browser.find_element(By.ID, "flash").text == "attached Kitchen"

    row = browser.find_element(By.XPATH, "//table[@id='agent-toolkits']//tr[td[text()='Kitchen']]")
    row.find_element(By.LINK_TEXT, "Configure Access Settings").click()
    browser.find_element(By.ID, "rule-pattern").send_keys("*@thescoop.com")
    _submit(browser, "add-rule")
    assert browser.find_element(By.ID, "flash").text == "added rule allow *@thescoop.com"
    assert "allow *@thescoop.com" in browser.find_element(By.ID, "gate-rules").text

    browser.find_element(By.PARTIAL_LINK_TEXT, "Sundae").click()
    answers = {}
    for sender in ("mara@thescoop.com", "jane@gmail.com"):
        field = browser.find_element(By.ID, "explain-sender")
        field.clear()
        field.send_keys(sender)
        _submit(browser, "explain")
        answers[sender] = browser.find_element(By.ID, "explanation").text
    _screenshot(browser, "agent.png")
    assert "admitted  Kitchen: allow rule *@thescoop.com matches" in answers["mara@thescoop.com"]
    assert "refused   Kitchen: no allow rule matches" in answers["jane@gmail.com"]
    # Finance is open to everyone; its refunds wait for a yes from the shop.
    assert "process_refund" in answers["mara@thescoop.com"].splitlines()[-1]
    assert "process_refund" in answers["jane@gmail.com"].splitlines()[-1]
    assert (
        "approval  process_refund: waits for a yes from *@thescoop.com"
        in (answers["jane@gmail.com"])
    )
    for sender, shown in answers.items():
        said = _protege(folder, "access", "explain", "Sundae", "--sender", sender)
        assert shown == said.rstrip("\n")


def test_a_run_of_the_demo_shows_the_approved_refund(signed_in, demo):
    browser, (_, url) = signed_in, demo
    browser.get(f"{url}/runs")
    browser.find_element(By.ID, "run-1").click()
    _wait(browser, seen.presence_of_element_located((By.ID, "timeline")))
    timeline = browser.find_element(By.ID, "timeline").text
    assert "approval 1 requested for process_refund from *@thescoop.com" in timeline
    assert "waiting for approval (1)" in timeline
    assert "approval 1 for process_refund approved by mara@thescoop.com" in timeline
    assert "after approval, ok" in timeline
    assert "Approval 1: process_refund" in browser.find_element(By.ID, "run-approvals").text
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "I'd like a refund, please." in page  # what it answered
    assert "Good news: SCP-1042 is refunded in full" in page  # the mail it sent
    # The demo ran the delivery loop's work: the mail is out (to its outbox), not pending.
    deliveries = browser.find_elements(By.CSS_SELECTOR, "article.mail .delivery")
    assert [d.text for d in deliveries] == ["sent"] * 3  # the request to Mara, two replies
    _screenshot(browser, "run.png")


def test_the_finance_grant_shows_its_approval_policy(signed_in, demo):
    browser, (_, url) = signed_in, demo
    browser.get(f"{url}/agents")
    browser.find_element(By.LINK_TEXT, "Sundae").click()
    row = browser.find_element(By.XPATH, "//table[@id='agent-toolkits']//tr[td[text()='Finance']]")
    row.find_element(By.LINK_TEXT, "Configure Access Settings").click()
    assert browser.find_element(By.ID, "approval-policy").text == (
        "Calls wait for a yes from *@thescoop.com; requests go to mara@thescoop.com; refused "
        "after 72 h unanswered; an approver asking is approved at once."
    )
    browser.get(f"{url}/approvals?all=1")
    listed = browser.find_element(By.ID, "approvals").text
    assert "approved by mara@thescoop.com" in listed
    assert "denied by mara@thescoop.com" in listed


def _finance_grant(browser, url) -> None:
    browser.get(f"{url}/agents")
    browser.find_element(By.LINK_TEXT, "Sundae").click()
    row = browser.find_element(By.XPATH, "//table[@id='agent-toolkits']//tr[td[text()='Finance']]")
    row.find_element(By.LINK_TEXT, "Configure Access Settings").click()


def test_the_agent_page_says_which_toolkits_need_approval(signed_in, demo):
    browser, (_, url) = signed_in, demo
    browser.get(f"{url}/agents")
    browser.find_element(By.LINK_TEXT, "Sundae").click()
    table = browser.find_element(By.ID, "agent-toolkits")
    finance = table.find_element(By.XPATH, ".//tr[td[text()='Finance']]/td[@class='approval']")
    assert finance.text == "needs approval by *@thescoop.com"
    others = table.find_elements(By.XPATH, ".//tr[td[1][text()!='Finance']]/td[@class='approval']")
    assert others
    assert {cell.text for cell in others} == {"none"}


def test_the_grant_page_is_titled_by_its_name_and_a_refused_rule_stays_typed(signed_in, demo):
    browser, (_, url) = signed_in, demo
    _finance_grant(browser, url)
    assert browser.title == "Finance on Sundae · protege"
    Select(browser.find_element(By.ID, "rule-kind")).select_by_visible_text("deny")
    browser.find_element(By.ID, "rule-pattern").send_keys("a*b*@x.com")
    _submit(browser, "add-rule")
    error = browser.find_element(By.ID, "error")
    assert "is not a rule pattern" in error.text
    assert "error" in error.get_attribute("class").split()
    assert not browser.find_elements(By.ID, "flash")
    assert browser.find_element(By.ID, "rule-pattern").get_attribute("value") == "a*b*@x.com"
    chosen = Select(browser.find_element(By.ID, "rule-kind")).first_selected_option
    assert chosen.text == "deny"


def test_an_agents_instructions_are_edited_and_a_taken_address_is_refused(signed_in, demo):
    browser, (folder, url) = signed_in, demo
    browser.get(f"{url}/agents")
    browser.find_element(By.LINK_TEXT, "Sundae").click()
    address = browser.find_element(By.ID, "agent-address")
    address.clear()
    address.send_keys("nobody at all")
    instructions = browser.find_element(By.ID, "agent-instructions")
    instructions.clear()
    instructions.send_keys("Answer about ice cream, kindly.")
    _submit(browser, "save-agent")
    assert "is not an email address" in browser.find_element(By.ID, "error").text
    assert browser.find_element(By.ID, "agent-address").get_attribute("value") == "nobody at all"
    assert browser.find_element(By.ID, "agent-instructions").get_attribute("value") == (
        "Answer about ice cream, kindly."
    )
    address = browser.find_element(By.ID, "agent-address")
    address.clear()
    address.send_keys("sundae@thescoop.example")
    _submit(browser, "save-agent")
    assert browser.find_element(By.ID, "flash").text == "saved agent Sundae"
    shown = _protege(folder, "agents", "show", "Sundae")
    assert "instructions: Answer about ice cream, kindly." in shown


def test_a_responsibility_is_added_and_run_now_says_its_command_as_code(signed_in, demo):
    browser, (folder, url) = signed_in, demo
    browser.get(f"{url}/responsibilities")
    Select(browser.find_element(By.ID, "duty-agent")).select_by_visible_text("Sundae")
    browser.find_element(By.ID, "duty-name").send_keys("Tub count")
    browser.find_element(By.ID, "duty-prompt").send_keys("Count the tubs.")
    browser.find_element(By.ID, "duty-schedule").send_keys("every morning")
    _submit(browser, "add-duty")
    assert "every morning" in browser.find_element(By.ID, "error").text
    assert browser.find_element(By.ID, "duty-name").get_attribute("value") == "Tub count"
    assert browser.find_element(By.ID, "duty-prompt").get_attribute("value") == "Count the tubs."
    schedule = browser.find_element(By.ID, "duty-schedule")
    schedule.clear()
    schedule.send_keys("0 7 * * 1-5")
    _submit(browser, "add-duty")
    assert browser.find_element(By.ID, "flash").text == "added Sundae's responsibility Tub count"
    assert "Tub count" in _protege(folder, "responsibilities", "list")
    row = browser.find_element(By.XPATH, "//tr[td/a[text()='Tub count']]")
    old = browser.find_element(By.TAG_NAME, "html")
    row.find_element(By.XPATH, ".//button[text()='Run now']").click()
    _wait(browser, _replaced(old))
    flash = browser.find_element(By.ID, "flash")
    assert "`" not in flash.text
    assert flash.find_element(By.TAG_NAME, "code").text == "protege serve"


def test_logging_out_ends_the_session(signed_in, demo):
    browser, (_, url) = signed_in, demo
    browser.get(f"{url}/agents")
    _submit(browser, "logout")
    assert "/login" in browser.current_url
    browser.get(f"{url}/agents")
    assert "/login" in browser.current_url  # the session is over, not just forgotten
