"""Take the docs' screenshots: the inspector of `prefctl receive --ui` and a `simulate --html` report.

    .venv/bin/python scripts/screenshots.py                 # both
    .venv/bin/python scripts/screenshots.py receive-ui      # or only the one named

Writes docs/images/receive-ui.png and docs/images/simulate-html.png, with the headless Chromium
of the browser tests (tests/browser.py: Debian's chromium and chromedriver, nothing downloaded).
The receiver runs on a free port of 127.0.0.1, forwarding to a second one as its handler, and gets
a handful of made-up deliveries; the shot is at 1280 px, with one request open and resent.
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser import chrome, console_errors  # noqa: E402

from prefctl.receiver import ReceiverConfig  # noqa: E402
from prefctl.receiver.serve import RunningReceiver, start_in_thread  # noqa: E402
from prefctl.webhooks.handshake import new_handshake  # noqa: E402
from prefctl.webhooks.signature import HEADER_NAME, SigningCredentials, sign_header  # noqa: E402

IMAGES = ROOT / "docs" / "images"
CREDS = SigningCredentials("DEMO_CORP", "events-signer", "screenshot-hashkey-0123456789abcdef")


def _post(receiver: RunningReceiver, body: dict[str, Any], signature: str | None) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    headers = {"content-type": "application/json"}
    if signature is not None:
        headers[HEADER_NAME] = signature
    conn.request("POST", "/webhooks", json.dumps(body).encode(), headers)
    conn.getresponse().read()
    conn.close()


def _event(n: int, event_type: str, profile: str, age: float, **extra: Any) -> dict[str, Any]:
    at = datetime.now(UTC) - timedelta(seconds=age)
    return {
        "EventType": event_type,
        "EventId": f"3f2a9c1e-{n:04d}-4b7d-9a51-8c0e5d{n:06d}",
        "EventTime": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "OriginalEventTime": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "ProfileId": profile,
        **extra,
    }


def _deliveries(receiver: RunningReceiver) -> None:
    now = datetime.now(UTC)
    good = sign_header(CREDS, now)
    handshake = new_handshake(
        random.Random(1),
        subscription_id=12,
        client_id="DEMO_CORP",
        api_url="https://api.invalid",
        now=now,
    )
    _post(receiver, handshake.message, None)
    email = _event(
        1,
        "contacts.email.updated",
        "1001",
        0.8,
        Data={
            "Emails": [{"Address": "jane.doe@example.com", "Type": "Home", "Primary": True}],
            "FirstName": "Jane",
        },
        PreviousData={
            "Emails": [{"Address": "jane@old-mail.example", "Type": "Home", "Primary": True}]
        },
    )
    _post(receiver, email, good)
    _post(receiver, _event(2, "consent.updated", "1002", 0.3, Data={"Consent": "Granted"}), good)
    _post(receiver, _event(3, "preference.updated", "1001", 1.2, Data={"Newsletter": True}), good)
    _post(receiver, _event(2, "consent.updated", "1002", 0.3, Data={"Consent": "Granted"}), good)
    _post(receiver, _event(4, "profile.updated", "1001", 30.0, Data={"City": "Lyon"}), good)
    stale = sign_header(CREDS, now - timedelta(minutes=20))
    _post(receiver, _event(5, "profile.updated", "1003", 0.2, Data={"City": "Oslo"}), stale)
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    change = {"action": "fail", "count": 2, "status": 503}
    conn.request(
        "POST", "/_prefctl/api/faults", json.dumps(change), {"content-type": "application/json"}
    )
    conn.getresponse().read()
    conn.close()
    _post(receiver, _event(6, "contacts.phone.added", "1004", 0.4, Data={}), good)
    _post(receiver, _event(7, "profile.deactivated", "1005", 0.6, Data={}), good)
    receiver.wait_for(9)


def inspector() -> None:
    handler = ReceiverConfig(port=0, verify=False)
    with start_in_thread(handler) as forward_to:
        config = ReceiverConfig(
            port=0, credentials=CREDS, ui=True, forward_to=forward_to.webhook_url
        )
        with start_in_thread(config) as receiver, chrome(1280, 860) as driver:
            driver.get(receiver.url + "/_prefctl/")
            _deliveries(receiver)
            _shoot_inspector(driver)


def _shoot_inspector(driver: Any) -> None:
    from selenium.webdriver.support.wait import WebDriverWait

    driver.implicitly_wait(3)

    def email_row(d: Any) -> Any:
        rows = d.find_elements("css selector", "#rows tr")
        return len(rows) == 9 and next(r for r in rows if "contacts.email.updated" in r.text)

    WebDriverWait(driver, 10).until(email_row).click()
    driver.find_element("css selector", "#diff-data .changed")
    driver.find_element("id", "resend").click()
    WebDriverWait(driver, 10).until(
        lambda d: "answered" in d.find_element("id", "action-status").text
    )
    errors = console_errors(driver)
    if errors:
        raise SystemExit(f"console errors: {errors}")
    driver.save_screenshot(str(IMAGES / "receive-ui.png"))


def simulate_report() -> None:
    from tests.helpers import run_cli

    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        result = run_cli("simulate", ROOT / "docs" / "examples" / "ttl.toml", "--html", html)
        if result.exit_code != 0:
            raise SystemExit(result.output)
        with chrome(1000, 900) as driver:
            driver.get(html.as_uri())
            height = driver.execute_script("return document.body.scrollHeight")
            driver.set_window_size(1000, min(int(height) + 40, 1500))
            errors = console_errors(driver)
            if errors:
                raise SystemExit(f"console errors: {errors}")
            driver.save_screenshot(str(IMAGES / "simulate-html.png"))


SHOTS = {"receive-ui": inspector, "simulate-html": simulate_report}


def main() -> None:
    names = sys.argv[1:] or list(SHOTS)
    unknown = [name for name in names if name not in SHOTS]
    if unknown:
        raise SystemExit(
            f"no screenshot named {', '.join(unknown)}; choose from {', '.join(SHOTS)}"
        )
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name in names:
        SHOTS[name]()
    print("written: " + ", ".join(str(IMAGES / f"{name}.png") for name in names))


if __name__ == "__main__":
    main()
