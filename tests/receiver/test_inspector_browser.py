"""The inspector page of `prefctl receive --ui` in a real headless Chromium (tests/browser.py).

One `prefctl receive --ui --forward-to HANDLER` process (the handler: a second `prefctl receive`,
whose JSON lines the tests read) and one browser serve the module; each test opens the page afresh
and puts the fault plan back to normal first.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from prefctl.webhooks.signature import HEADER_NAME, SigningCredentials, sign_header
from tests import browser

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing())),
]

HASHKEY = "browser-test-hashkey-0123456789abcdef"
CREDS = SigningCredentials("DEMO_CORP", "events-signer", HASHKEY)
CLI_CREDS = ("--client-id", "DEMO_CORP", "--signature-user-id", "events-signer")


class Handler:
    """A second `prefctl receive` (no verification) as the --forward-to handler; ``lines`` gets
    each JSON line it prints."""

    def __init__(self) -> None:
        command = [sys.executable, "-m", "prefctl", "-o", "json", "receive", "--port", "0"]
        self.process = subprocess.Popen(
            [*command, "--no-verify", "--timeout", "300"], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        self.ready = json.loads(self.process.stdout.readline())
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def event_ids(self, until: str, timeout: float = 10.0) -> list[str]:
        """The EventIds the handler received, up to and including the next ``until``."""
        seen = []
        while True:
            line = self.lines.get(timeout=timeout)
            seen.append(str(line.get("event_id")))
            if line.get("event_id") == until:
                return seen

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture(scope="module")
def handler() -> Iterator[Handler]:
    running = Handler()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def receiver(handler: Handler) -> Iterator[dict[str, Any]]:
    """`prefctl receive --ui --forward-to HANDLER` on a free port; its ready record."""
    command = [sys.executable, "-m", "prefctl", "-o", "json", "receive", "--port", "0", "--ui"]
    command += ["--forward-to", handler.ready["url"]]
    env = {**os.environ, "PREFCTL_HASHKEY": HASHKEY}
    process = subprocess.Popen(
        [*command, *CLI_CREDS, "--timeout", "300"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        assert ready["type"] == "ready"
        yield ready
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    with browser.chrome() as chrome:
        yield chrome


@pytest.fixture
def page(receiver: dict[str, Any], driver: WebDriver) -> WebDriver:
    _post_json(receiver["ui_url"] + "api/faults", {"action": "normal"})
    driver.get(receiver["ui_url"])
    _wait(driver, 5).until(lambda d: d.find_element("id", "connection").text == "live")
    browser.console_errors(driver)  # start each test with an empty console
    return driver


def _wait(driver: WebDriver, seconds: float) -> Any:
    """A wait that looks again when the live table redrew the row it was looking at."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.wait import WebDriverWait

    return WebDriverWait(
        driver, seconds, poll_frequency=0.02, ignored_exceptions=[StaleElementReferenceException]
    )


def _click_row(driver: WebDriver, event_id: str) -> None:
    def click(d: WebDriver) -> bool:
        row = _row(d, event_id)
        if row:
            row.click()
        return bool(row)

    _wait(driver, 5).until(click)


def _post_json(url: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


def _deliver(receiver: dict[str, Any], body: dict[str, Any]) -> int:
    """POST a correctly signed event to the receiver; its answer's status."""
    headers = {
        "content-type": "application/json",
        HEADER_NAME: sign_header(CREDS, datetime.now(UTC)),
    }
    request = urllib.request.Request(receiver["url"], json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _event(
    event_id: str, event_type: str = "contacts.email.updated", **extra: Any
) -> dict[str, Any]:
    return {
        "EventType": event_type,
        "EventId": event_id,
        "EventTime": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "ProfileId": "1001",
        **extra,
    }


def _row(driver: WebDriver, event_id: str) -> Any:
    for row in driver.find_elements("css selector", "#rows tr"):
        if event_id in row.text:
            return row
    return False


def _cells(driver: WebDriver, event_id: str) -> list[str]:
    return [cell.text for cell in _row(driver, event_id).find_elements("tag name", "td")]


def test_inspector_page_loads_with_its_controls_and_no_console_errors(page: WebDriver) -> None:
    assert page.title == "prefctl receive · inspector"
    for control in ("filter-type", "filter-verdict", "filter-status", "pause", "fault-apply"):
        assert page.find_element("id", control).is_displayed()
    assert browser.console_errors(page) == []


def test_inspector_signed_delivery_appears_within_a_second(
    page: WebDriver, receiver: dict[str, Any]
) -> None:
    assert _deliver(receiver, _event("evt-appears")) == 200
    cells = _wait(page, 1.0).until(lambda d: _row(d, "evt-appears") and _cells(d, "evt-appears"))
    assert cells[1:6] == ["200", "contacts.email.updated", "evt-appears", "1001", "valid"]


def test_inspector_click_shows_body_and_highlights_changed_fields(
    page: WebDriver, receiver: dict[str, Any]
) -> None:
    data = {"Emails": [{"Address": "new@example.com", "Type": "Home"}], "Status": "Active"}
    previous = {"Emails": [{"Address": "old@example.com", "Type": "Home"}]}
    _deliver(receiver, _event("evt-diff", Data=data, PreviousData=previous))
    _click_row(page, "evt-diff")
    _wait(page, 5).until(lambda d: "evt-diff" in d.find_element("id", "detail-body").text)
    body = json.loads(page.find_element("id", "detail-body").text)
    assert body["Data"] == data
    changed = page.find_elements("css selector", "#diff-data .changed")
    assert [c.text for c in changed] == ['"new@example.com"']
    before = page.find_elements("css selector", "#diff-previous .changed")
    assert [c.text for c in before] == ['"old@example.com"']
    headers = page.find_element("id", "detail-headers").text
    assert "Timestamp" in headers
    assert "Signature" in headers


def test_inspector_filter_hides_other_event_types_and_counts_them(
    page: WebDriver, receiver: dict[str, Any]
) -> None:
    from selenium.webdriver.support.select import Select

    _deliver(receiver, _event("evt-keep", "preference.updated"))
    _deliver(receiver, _event("evt-hide", "profile.updated"))
    _wait(page, 5).until(lambda d: _row(d, "evt-keep") and _row(d, "evt-hide"))
    Select(page.find_element("id", "filter-type")).select_by_value("preference.updated")
    _wait(page, 5).until(lambda d: not _row(d, "evt-hide"))
    assert _row(page, "evt-keep")
    shown = int(page.find_element("id", "count-shown").text)
    hidden = int(page.find_element("id", "count-hidden").text)
    assert hidden >= 1
    assert shown + hidden == int(page.find_element("id", "count-total").text)


def test_inspector_fault_control_fails_the_next_delivery_with_the_chosen_status(
    page: WebDriver, receiver: dict[str, Any]
) -> None:
    count = page.find_element("id", "fault-count")
    count.clear()
    count.send_keys("1")
    status = page.find_element("id", "fault-status")
    status.clear()
    status.send_keys("429")
    page.find_element("id", "fault-apply").click()
    _wait(page, 5).until(
        lambda d: d.find_element("id", "fault-plan").text == "the next request answered 429"
    )
    assert _deliver(receiver, _event("evt-faulted")) == 429
    assert _deliver(receiver, _event("evt-after")) == 200
    cells = _wait(page, 5).until(lambda d: _row(d, "evt-faulted") and _cells(d, "evt-faulted"))
    assert cells[1] == "429"
    assert cells[8] == "failing the first 1 request (1 done)"
    # The plan is used up: the page says so.
    normal = "none: every request answered normally"
    _wait(page, 5).until(lambda d: d.find_element("id", "fault-plan").text == normal)
    page.find_element("id", "fault-delay-apply").click()
    _wait(page, 5).until(
        lambda d: d.find_element("id", "fault-plan").text == "every answer 1 s late"
    )
    page.find_element("id", "fault-normal").click()
    _wait(page, 5).until(lambda d: d.find_element("id", "fault-plan").text == normal)


def test_inspector_fault_labels_count_in_words(page: WebDriver, receiver: dict[str, Any]) -> None:
    _post_json(receiver["ui_url"] + "api/faults", {"action": "fail", "count": 2, "status": 503})
    _wait(page, 5).until(
        lambda d: d.find_element("id", "fault-plan").text == "the next 2 requests answered 503"
    )
    assert _deliver(receiver, _event("evt-words-1")) == 503
    cells = _wait(page, 5).until(lambda d: _row(d, "evt-words-1") and _cells(d, "evt-words-1"))
    assert cells[8] == "failing the first 2 requests (1 done)"
    assert _deliver(receiver, _event("evt-words-2")) == 503
    cells = _wait(page, 5).until(lambda d: _row(d, "evt-words-2") and _cells(d, "evt-words-2"))
    assert cells[8] == "failing the first 2 requests (2 done)"


LONG = {
    "Emails": [{"Address": "a-very-long-address-" + "x" * 120 + "@example.com", "Type": "Home"}],
    "CustomFields": {f"Field{n}": "value " * 12 for n in range(6)},
    "Note": "y" * 400,
}


@pytest.mark.parametrize("width", [1024, 1280, 1920])
def test_inspector_has_no_horizontal_scroll_with_the_detail_open(
    page: WebDriver, receiver: dict[str, Any], width: int
) -> None:
    page.set_window_size(width, 900)
    event_id = f"evt-width-{width}-0123456789abcdef0123456789"
    previous = {**LONG, "Note": "z" * 400}
    _deliver(receiver, _event(event_id, Data=LONG, PreviousData=previous))
    _click_row(page, event_id)
    _wait(page, 5).until(lambda d: event_id in d.find_element("id", "detail-body").text)
    scroll, client = page.execute_script(
        "const e = document.documentElement; return [e.scrollWidth, e.clientWidth];"
    )
    assert scroll <= client, f"the page scrolls sideways at {width} px: {scroll} > {client}"
    # Nothing in the pane reaches past its right edge, and every column of the list is visible.
    overflow = page.execute_script(
        """
        const pane = document.getElementById('detail').getBoundingClientRect();
        const list = document.getElementById('list');
        const wide = [...document.querySelectorAll('#detail *')]
          .filter((n) => n.getBoundingClientRect().right > pane.right + 1).map((n) => n.id || n.tagName);
        return [wide, list.scrollWidth - list.clientWidth];
        """
    )
    assert overflow == [[], 0]
    headers = [h for h in page.find_elements("css selector", "#requests th") if h.is_displayed()]
    assert [h.text for h in headers][-2:] == ["Flags", "Fault"]
    page.set_window_size(1400, 900)


def test_inspector_search_finds_by_event_id_profile_id_and_body_text(
    page: WebDriver, receiver: dict[str, Any]
) -> None:
    _deliver(receiver, _event("evt-search-a", ProfileId="7001", Data={"Note": "needle-in-body"}))
    _deliver(receiver, _event("evt-search-b", ProfileId="7002"))
    _wait(page, 5).until(lambda d: _row(d, "evt-search-a") and _row(d, "evt-search-b"))
    box = page.find_element("id", "search")

    def shown() -> set[str]:
        ids = set()
        for row in page.find_elements("css selector", "#rows tr"):
            cells = row.find_elements("tag name", "td")
            ids.add(str(cells[3].get_attribute("title")))
        return ids

    for query, expected in (
        ("evt-search-a", {"evt-search-a"}),
        ("7002", {"evt-search-b"}),
        ("NEEDLE-in", {"evt-search-a"}),
    ):
        box.clear()
        box.send_keys(query)
        _wait(page, 5).until(lambda d, e=expected: shown() == e)
    box.clear()
    box.send_keys("nothing-has-this")
    _wait(page, 5).until(lambda d: shown() == set())
    _wait(page, 5).until(lambda d: "0 kept bodies" in d.find_element("id", "search-note").text)


def _copied(page: WebDriver) -> str:
    _wait(page, 5).until(lambda d: d.find_element("id", "action-status").text.strip() != "")
    return str(page.find_element("id", "copy-text").get_attribute("value"))


def test_inspector_copies_the_body_and_a_curl_with_the_signature_redacted_unless_asked(
    page: WebDriver, receiver: dict[str, Any]
) -> None:
    _deliver(receiver, _event("evt-copy", Data={"Address": "o'brien@example.com"}))
    _click_row(page, "evt-copy")
    _wait(page, 5).until(lambda d: "evt-copy" in d.find_element("id", "detail-body").text)
    page.find_element("id", "copy-body").click()
    assert json.loads(_copied(page))["EventId"] == "evt-copy"
    page.find_element("id", "copy-curl").click()
    _wait(page, 5).until(
        lambda d: "curl" in str(d.find_element("id", "copy-text").get_attribute("value"))
    )
    command = _copied(page)
    words = shlex.split(command)
    assert words[:4] == ["curl", "-X", "POST", receiver["url"]]
    signature = next(w for w in words if w.lower().startswith(HEADER_NAME.lower() + ":"))
    assert "Signature=REDACTED" in signature
    body = json.loads(words[words.index("--data-binary") + 1])
    assert body["Data"]["Address"] == "o'brien@example.com"
    page.find_element("id", "curl-signature").click()
    page.find_element("id", "copy-curl").click()
    _wait(page, 5).until(
        lambda d: "REDACTED" not in str(d.find_element("id", "copy-text").get_attribute("value"))
    )
    # With the signature, the command is a delivery the receiver accepts (within its tolerance).
    signed = shlex.split(str(page.find_element("id", "copy-text").get_attribute("value")))
    result = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", *signed[1:]],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.stdout == "200"


def test_inspector_resend_reaches_the_forward_target_and_shows_its_answer(
    page: WebDriver, receiver: dict[str, Any], handler: Handler
) -> None:
    assert _deliver(receiver, _event("evt-resend")) == 200
    assert handler.event_ids(until="evt-resend")[-1] == "evt-resend"
    _click_row(page, "evt-resend")
    _wait(page, 5).until(lambda d: "evt-resend" in d.find_element("id", "detail-body").text)
    page.find_element("id", "resend").click()
    _wait(page, 10).until(lambda d: "answered 200" in d.find_element("id", "action-status").text)
    assert handler.ready["url"] in page.find_element("id", "action-status").text
    assert handler.event_ids(until="evt-resend") == ["evt-resend"]


def test_inspector_keyboard_moves_opens_and_closes(
    page: WebDriver, receiver: dict[str, Any]
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    for name in ("evt-key-1", "evt-key-2", "evt-key-3"):
        _deliver(receiver, _event(name))
    _wait(page, 5).until(lambda d: _row(d, "evt-key-3"))
    page.find_element("tag name", "h1").click()  # focus on the page, not a control
    keys = ActionChains(page)
    keys.send_keys("j").perform()  # the newest row
    keys.send_keys("j").perform()  # one down: older
    keys.send_keys("k").perform()
    keys.send_keys("j").perform()
    cursor = page.find_element("css selector", "#rows tr.cursor")
    assert "evt-key-2" in cursor.text
    ActionChains(page).send_keys("\ue007").perform()  # Enter
    _wait(page, 5).until(lambda d: "evt-key-2" in d.find_element("id", "detail-body").text)
    ActionChains(page).send_keys("k").perform()  # with the pane open, it follows the cursor
    _wait(page, 5).until(lambda d: "evt-key-3" in d.find_element("id", "detail-body").text)
    ActionChains(page).send_keys("\ue00c").perform()  # Esc
    _wait(page, 5).until(lambda d: not d.find_element("id", "detail").is_displayed())
    ActionChains(page).send_keys("/").perform()
    assert page.switch_to.active_element.get_attribute("id") == "search"
