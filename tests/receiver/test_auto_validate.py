"""``--auto-validate`` under attack (issue 18, point 1), on real servers on 127.0.0.1.

Handshakes carry no signature, so anyone who reaches the receiver chooses the validationUrl: it
must GET only trusted hosts, bound the validations in progress, keep a deadline, and keep
answering signed events and /healthz meanwhile.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from prefctl.clock import FakeClock
from prefctl.errors import UsageError
from prefctl.receiver import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.receiver.validation import DEFAULT_MAX_IN_PROGRESS, TrustedHosts
from prefctl.receiver.verdict import Kind, Verdict, format_line
from prefctl.webhooks.signature import sign_header
from tests.receiver.asgi import CREDS, event_body, handshake_body


@pytest.fixture
def bystander() -> Iterator[RunningReceiver]:
    """A server on this machine that must never be fetched: it shows every request it gets."""
    with start_in_thread(ReceiverConfig(port=0, verify=False)) as running:
        yield running


@pytest.fixture
def stalling() -> Iterator[str]:
    """A server that accepts connections (the kernel's backlog) and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=512) as sock:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def auto_validating(*trusted: str, timeout: float = 5.0) -> RunningReceiver:
    return start_in_thread(
        ReceiverConfig(
            port=0,
            credentials=CREDS,
            manual_validation=True,
            auto_validate=True,
            validation_hosts=trusted,
            validation_timeout=timeout,
            clock=FakeClock(datetime.now(UTC)),  # pauses before and between GETs pass at once
        )
    )


def signed_event(http: httpx.Client, url: str, event_id: str) -> httpx.Response:
    headers = {
        "content-type": "application/json",
        "service-webhook": sign_header(CREDS, datetime.now(UTC)),
    }
    return http.post(url, content=event_body(event_id), headers=headers)


def test_auto_validate_never_gets_an_untrusted_host_and_says_why(
    bystander: RunningReceiver,
) -> None:
    target = bystander.url + "/internal-admin/delete?confirm=yes"
    # Trusted: another port of the same host (as the profile's api_url would be).
    with auto_validating("127.0.0.1:1") as running, httpx.Client() as http:
        answer = http.post(running.webhook_url, content=handshake_body(url=target))
        (handshake,) = running.wait_for(1)
        assert signed_event(http, running.webhook_url, "evt-after").status_code == 200
        event = running.wait_for(1)[0]

    assert answer.status_code == 200
    assert answer.json() == {}
    assert handshake.validation_skipped == "untrusted_host"
    assert handshake.detail is not None
    assert f"host 127.0.0.1:{bystander.port} is not trusted" in handshake.detail
    assert handshake.as_dict()["validation_skipped"] == "untrusted_host"
    assert "validationUrl not fetched: host 127.0.0.1" in format_line(handshake)
    assert event.event_id == "evt-after"  # and no validation line: nothing was fetched
    assert bystander.verdicts.empty()  # the bystander never saw a request


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "http://user:pw@127.0.0.1:1/x", "ftp://127.0.0.1:1/x", "not a url"],
)
def test_auto_validate_refuses_urls_that_are_not_plain_http(url: str) -> None:
    with auto_validating("127.0.0.1") as running:
        answer = httpx.post(running.webhook_url, content=handshake_body(url=url))
        (handshake,) = running.wait_for(1)
    assert answer.status_code == 200
    assert handshake.validation_skipped == "not_http"


def test_auto_validate_stalling_url_is_bounded_and_keeps_the_receiver_answering(
    stalling: str,
) -> None:
    handshakes = 3 * DEFAULT_MAX_IN_PROGRESS
    with auto_validating("127.0.0.1", timeout=0.5) as running, httpx.Client(timeout=10) as http:
        for n in range(handshakes):
            body = handshake_body(url=f"{stalling}/validation/{n}")
            assert http.post(running.webhook_url, content=body).status_code == 200
        # While the validations stall: signed events and /healthz are answered at once.
        started = time.monotonic()
        assert signed_event(http, running.webhook_url, "evt-during").status_code == 200
        assert http.get(running.url + "/healthz").status_code == 200
        answered_in = time.monotonic() - started
        # Each validation gives up after 3 tries of 0.5 s: all end within a few seconds.
        verdicts: list[Verdict] = running.wait_for(
            handshakes + 1 + DEFAULT_MAX_IN_PROGRESS, timeout=30
        )

    shaken = [v for v in verdicts if v.kind == Kind.HANDSHAKE]
    fetched = [v for v in verdicts if v.kind == Kind.VALIDATION]
    skipped = [v for v in shaken if v.validation_skipped == "too_many_validations"]
    assert answered_in < 1.0
    assert len(shaken) == handshakes
    assert len(fetched) == DEFAULT_MAX_IN_PROGRESS  # the rest were never queued
    assert len(skipped) == handshakes - DEFAULT_MAX_IN_PROGRESS
    assert all(v.status is None and v.detail == "no answer within 0.5 s" for v in fetched)
    assert skipped[0].detail is not None
    assert f"{DEFAULT_MAX_IN_PROGRESS} validations are already in progress" in skipped[0].detail


def test_auto_validate_without_a_trusted_host_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="needs a trusted host"):
        ReceiverConfig(port=0, verify=False, manual_validation=True, auto_validate=True)
    with pytest.raises(UsageError, match="is not HOST or HOST:PORT"):
        ReceiverConfig(port=0, verify=False, validation_hosts=("http://x/",))


@pytest.mark.parametrize(
    ("entries", "host", "port", "allowed"),
    [
        (["api.example.com:443"], "API.example.com", 443, True),
        (["api.example.com:443"], "api.example.com", 8443, False),
        (["127.0.0.1"], "127.0.0.1", 9, True),
        (["[::1]:8750"], "::1", 8750, True),
        (["api.example.com"], "api.example.com.evil.test", 443, False),
    ],
)
def test_trusted_hosts_match_host_and_port(
    entries: list[str], host: str, port: int, allowed: bool
) -> None:
    assert TrustedHosts(entries).allows(host, port) is allowed


def test_trusted_hosts_of_a_service_url_keep_its_port() -> None:
    assert TrustedHosts.of_url("https://api.example.com/api/v1") == "api.example.com:443"
    assert TrustedHosts.of_url("http://127.0.0.1:8750/api/v1") == "127.0.0.1:8750"
