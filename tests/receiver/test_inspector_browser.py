"""The inspector page of `prefctl receive --ui` in a real headless Chromium (tests/browser.py).

One `prefctl receive --ui` process and one browser serve the module; each test opens the page
afresh and puts the fault plan back to normal first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


@pytest.fixture(scope="module")
def receiver() -> Iterator[dict[str, Any]]:
    """`prefctl receive --ui` on a free port; its ready record."""
    command = [sys.executable, "-m", "prefctl", "-o", "json", "receive", "--port", "0", "--ui"]
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
    _wait(page, 5).until(lambda d: d.find_element("id", "fault-plan").text == "1×429")
    assert _deliver(receiver, _event("evt-faulted")) == 429
    assert _deliver(receiver, _event("evt-after")) == 200
    cells = _wait(page, 5).until(lambda d: _row(d, "evt-faulted") and _cells(d, "evt-faulted"))
    assert cells[1] == "429"
    assert cells[8] == "fail-first 1/1"
    # The plan is used up: the page says so.
    _wait(page, 5).until(lambda d: d.find_element("id", "fault-plan").text == "none")
    page.find_element("id", "fault-delay-apply").click()
    _wait(page, 5).until(lambda d: d.find_element("id", "fault-plan").text == "delay 1s")
    page.find_element("id", "fault-normal").click()
    _wait(page, 5).until(lambda d: d.find_element("id", "fault-plan").text == "none")
