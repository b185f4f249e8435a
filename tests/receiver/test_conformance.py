"""``prefctl endpoint check`` against endpoints that conform and endpoints broken on purpose.

The endpoints are small ASGI apps served by one uvicorn on 127.0.0.1, one path each; every one is
right except for the one thing its name says, so exactly the matching cases must fail.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest
import uvicorn

from prefctl import certs
from prefctl.clock import FakeClock, SystemClock
from prefctl.errors import UnreachableError, UsageError
from prefctl.receiver.conformance import (
    CASE_NAMES,
    CheckConfig,
    Report,
    check_endpoint,
    junit_xml,
    unreachable_junit_xml,
)
from prefctl.receiver.conformance.listener import ValidationListener
from prefctl.webhooks.handshake import build_reply, is_handshake, validation_fields
from prefctl.webhooks.signature import (
    SignatureError,
    SigningCredentials,
    parse_timestamp,
    verify,
)
from tests.helpers import free_port, run_cli, wait_until

HASHKEY = "test-hashkey"
CREDS = SigningCredentials("DEMO_CORP", "events-signer", HASHKEY)
CLI_CREDS = ("--client-id", "DEMO_CORP", "--signature-user-id", "events-signer")
SLOW_DELAY = 0.5  # beyond the timeout of the timeout test
SLOWISH_DELAY = 0.12  # beyond the slow-after threshold of the slow tests
LATE_FETCH = 2.0  # a manual validator's GET: beyond a 1 s --timeout, inside a 4 s --manual-window


# -- endpoints under test -------------------------------------------------------------------------
@dataclass
class Endpoint:
    """A webhook endpoint: conforming by default, each option breaks one rule."""

    verify: bool = True
    tolerance: float = 300.0
    handshake_status: int = 200
    handshake: str = "sync"  # sync | manual (GETs validationUrl) | manual-no-get | cached
    delay: float = 0.0
    handshake_delay: float = 0.0
    fetch_delay: float = 0.0  # how long a manual validator takes before its GET
    fetches: list[int | str] = field(default_factory=list)  # the GETs' statuses (or errors)
    reject_duplicates: bool = False
    reject_older: bool = False
    credentials: SigningCredentials = CREDS
    seen: set[str] = field(default_factory=set)
    latest: dict[int, datetime] = field(default_factory=dict)
    first_code: str | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            chunk = await receive()
            body += chunk.get("body", b"")
            if not chunk.get("more_body"):
                break
        message = json.loads(body)
        if is_handshake(message):
            await self._handshake(message, send)
            return
        await asyncio.sleep(self.delay)  # the behaviour under test: a slow answer
        headers = dict(scope["headers"])
        status = self._judge(message, headers.get(b"service-webhook", b"").decode() or None)
        await _respond(send, status, b"{}")

    async def _handshake(self, message: dict[str, Any], send: Any) -> None:
        code, url = validation_fields(message)
        await asyncio.sleep(self.handshake_delay)  # the behaviour under test: a slow handshake
        if self.handshake_status != 200:
            await _respond(send, self.handshake_status, b"{}")
        elif self.handshake == "sync":
            await _respond(send, 200, json.dumps(build_reply(code or "")).encode())
        elif self.handshake == "cached":
            self.first_code = self.first_code or code
            await _respond(send, 200, json.dumps(build_reply(self.first_code or "")).encode())
        else:
            await _respond(send, 200, b'{"status": "pending"}')
            if self.handshake == "manual" and url:
                task = asyncio.create_task(self._fetch(url))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def _fetch(self, url: str) -> None:
        await asyncio.sleep(self.fetch_delay)  # the behaviour under test: a late GET
        try:
            async with httpx.AsyncClient() as client:
                self.fetches.append((await client.get(url)).status_code)
        except httpx.TransportError as exc:  # the check's listener is gone
            self.fetches.append(type(exc).__name__)

    def _judge(self, message: dict[str, Any], header: str | None) -> int:
        if self.verify:
            try:
                verify(header, self.credentials, now=datetime.now(UTC), tolerance=self.tolerance)
            except SignatureError:
                return 401
        event_id, profile_id = message["EventId"], message["ProfileId"]
        if self.reject_duplicates and event_id in self.seen:
            return 409
        self.seen.add(event_id)
        when = parse_timestamp(message["EventTime"])
        if self.reject_older and when < self.latest.get(profile_id, when):
            return 409
        self.latest[profile_id] = max(when, self.latest.get(profile_id, when))
        return 200


async def _respond(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


ENDPOINTS: dict[str, Endpoint] = {
    "/good": Endpoint(),
    "/no-verify": Endpoint(verify=False),
    "/no-stale-check": Endpoint(tolerance=86_400),
    "/handshake-202": Endpoint(handshake_status=202),
    "/cached-code": Endpoint(handshake="cached"),
    "/manual": Endpoint(handshake="manual"),
    "/manual-no-get": Endpoint(handshake="manual-no-get"),
    "/manual-late": Endpoint(handshake="manual", fetch_delay=LATE_FETCH),
    "/manual-too-late": Endpoint(handshake="manual", fetch_delay=LATE_FETCH),
    "/strict-dedupe": Endpoint(reject_duplicates=True),
    "/strict-order": Endpoint(reject_older=True),
    "/slow": Endpoint(delay=SLOW_DELAY),
    "/slowish": Endpoint(delay=SLOWISH_DELAY),
    "/slow-handshake": Endpoint(handshake_delay=SLOWISH_DELAY),
    "/other-key": Endpoint(credentials=SigningCredentials("DEMO_CORP", "events-signer", "other")),
}


async def router(scope: dict[str, Any], receive: Any, send: Any) -> None:
    endpoint = ENDPOINTS.get(scope["path"])
    if endpoint is None:
        await _respond(send, 404, b"{}")
        return
    await endpoint(scope, receive, send)


@dataclass
class _Running:
    url: str
    server: uvicorn.Server
    thread: threading.Thread


def _serve(app: Any, scheme: str = "http", **ssl_options: Any) -> _Running:
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, lifespan="off", log_level="warning", **ssl_options
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10)
    return _Running(f"{scheme}://127.0.0.1:{port}", server, thread)


def _stop(running: _Running) -> None:
    running.server.should_exit = True
    running.thread.join(10)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    running = _serve(router)
    yield running.url
    _stop(running)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca = certs.init_ca(directory)
    server = certs.issue_server(directory, "127.0.0.1")
    client = certs.issue_client(directory, "service")
    return {
        "ca": ca.certificate,
        "server_cert": server.certificate,
        "server_key": server.private_key,
        "client_cert": client.certificate,
        "client_key": client.private_key,
    }


@pytest.fixture(scope="module")
def tls_url(pki: dict[str, Path]) -> Iterator[str]:
    running = _serve(
        router, "https", ssl_certfile=str(pki["server_cert"]), ssl_keyfile=str(pki["server_key"])
    )
    yield running.url
    _stop(running)


@pytest.fixture
def hashkey_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFCTL_HASHKEY", HASHKEY)


def _check(url: str, **options: Any) -> Report:
    config = CheckConfig(url=url, credentials=CREDS, **options)
    return check_endpoint(config, clock=SystemClock(), rng=random.Random(7))


def _failed(report: Report) -> set[str]:
    return {case.name for case in report.failures}


def _case(report: Report, name: str) -> Any:
    return next(case for case in report.cases if case.name == name)


# -- the suite ------------------------------------------------------------------------------------
def test_check_conforming_endpoint_passes_every_case(base_url: str) -> None:
    report = _check(base_url + "/good")
    assert report.passed, report.failures
    assert [case.name for case in report.cases] == list(CASE_NAMES)
    assert _case(report, "sync_handshake").status == 200
    assert _case(report, "bad_signature").status == 401
    assert _case(report, "stale_timestamp").reason == "rejected a Timestamp 1 h old with 401"
    assert all(case.duration_ms >= 0 for case in report.cases)


def test_check_of_an_endpoint_on_this_machine_ignores_the_environments_proxy(
    base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A corporate laptop sets HTTP(S)_PROXY; no proxy reaches 127.0.0.1 (this one is not even
    # there), so the check goes direct.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{free_port()}")
    report = _check(base_url + "/good")
    assert report.passed, report.failures


def test_check_endpoint_that_never_verifies_fails_the_signature_cases(base_url: str) -> None:
    report = _check(base_url + "/no-verify")
    assert _failed(report) == {"bad_signature", "stale_timestamp"}
    assert "does not verify Service-Webhook" in _case(report, "bad_signature").reason


def test_check_endpoint_without_a_clock_check_fails_stale_timestamp(base_url: str) -> None:
    report = _check(base_url + "/no-stale-check")
    assert _failed(report) == {"stale_timestamp"}
    assert "does not check the Timestamp" in _case(report, "stale_timestamp").reason


def test_check_handshake_answered_202_fails_both_handshakes(base_url: str) -> None:
    report = _check(base_url + "/handshake-202")
    assert _failed(report) == {"sync_handshake", "manual_handshake"}
    case = _case(report, "sync_handshake")
    assert case.status == 202
    assert "202 is not accepted" in case.reason


def test_check_endpoint_repeating_an_old_code_fails_manual_handshake(base_url: str) -> None:
    report = _check(base_url + "/cached-code")
    assert _failed(report) == {"manual_handshake"}
    assert "each handshake has a new code" in _case(report, "manual_handshake").reason


def test_check_manual_endpoint_passes_with_a_warning_unless_declared(base_url: str) -> None:
    report = _check(base_url + "/manual")
    assert report.passed, report.failures
    case = _case(report, "sync_handshake")
    assert (case.result, case.status) == ("warn", 200)
    assert "AwaitingManualAction" in case.reason
    assert "--manual-validation" in case.reason
    assert case.figures == {"validation": "manual", "manual_window_s": 300.0}
    manual = _case(report, "manual_handshake")
    assert manual.result == "pass"
    assert "validationUrl fetched" in manual.reason
    assert manual.figures["validation_get_after_s"] < 10


def test_check_manual_endpoint_strict_fails_sync_handshake(base_url: str) -> None:
    report = _check(base_url + "/manual", strict=True)
    assert _failed(report) == {"sync_handshake"}
    assert _case(report, "sync_handshake").reason.endswith("(a failure with --strict)")
    assert report.warnings == ()


def test_check_declared_manual_endpoint_strict_still_passes(base_url: str) -> None:
    report = _check(base_url + "/manual", manual_validation=True, strict=True)
    assert report.passed, report.failures
    assert report.warnings == ()


def test_check_declared_manual_endpoint_that_fetches_the_url_passes(base_url: str) -> None:
    report = _check(base_url + "/manual", manual_validation=True)
    assert report.passed, report.failures


def test_check_declared_manual_endpoint_that_never_fetches_the_url_fails(base_url: str) -> None:
    report = _check(base_url + "/manual-no-get", manual_validation=True, manual_window=0.5)
    assert _failed(report) == {"manual_handshake"}
    assert (
        "not fetched within the manual window of 0.5 s" in _case(report, "manual_handshake").reason
    )


def test_check_manual_get_after_the_timeout_but_inside_the_window_passes(base_url: str) -> None:
    endpoint = ENDPOINTS["/manual-late"]
    endpoint.fetches.clear()
    waits: list[float] = []
    config = CheckConfig(
        url=base_url + "/manual-late",
        credentials=CREDS,
        manual_validation=True,
        timeout=1,
        manual_window=4,
    )
    report = check_endpoint(config, clock=SystemClock(), rng=random.Random(7), on_wait=waits.append)
    assert report.passed, report.failures
    manual = _case(report, "manual_handshake")
    assert LATE_FETCH <= manual.figures["validation_get_after_s"] < 4
    wait_until(lambda: len(endpoint.fetches) == 2, timeout=10)  # one GET per handshake
    assert endpoint.fetches == [200, 200]  # the listener was still there for both
    assert waits[0] <= 4  # a countdown of the seconds left
    assert waits == sorted(waits, reverse=True)


def test_check_manual_get_after_the_window_fails_naming_the_window(base_url: str) -> None:
    report = _check(
        base_url + "/manual-too-late", manual_validation=True, timeout=1, manual_window=1
    )
    assert _failed(report) == {"manual_handshake"}
    reason = _case(report, "manual_handshake").reason
    assert "not fetched within the manual window of 1 s (--manual-window" in reason
    assert "5 minutes" in reason
    assert _case(report, "manual_handshake").figures == {
        "validation": "manual",
        "manual_window_s": 1,
    }


def test_validation_listener_answers_410_once_the_window_is_over() -> None:
    with ValidationListener() as listener:
        listener.expect("late")
        listener.expect("early")
        assert httpx.get(f"{listener.api_url}/validation/early").status_code == 200
        assert listener.expire("early")  # fetched in time: the case passes
        assert not listener.expire("late")
        answer = httpx.get(f"{listener.api_url}/validation/late")
        assert answer.status_code == 410
        assert not listener.fetched("late", 0)
        assert httpx.get(f"{listener.api_url}/validation/unknown").status_code == 404


@pytest.mark.parametrize("window", [0, -1, 301, float("nan")])
def test_check_config_manual_window_outside_the_service_window_is_a_usage_error(
    window: float,
) -> None:
    with pytest.raises(UsageError, match="--manual-window must be"):
        CheckConfig(url="http://127.0.0.1:9/webhooks", credentials=CREDS, manual_window=window)


def test_check_endpoint_rejecting_duplicates_fails_duplicate_event(base_url: str) -> None:
    report = _check(base_url + "/strict-dedupe")
    assert _failed(report) == {"duplicate_event"}
    case = _case(report, "duplicate_event")
    assert case.status == 409
    assert "at least once" in case.reason


def test_check_endpoint_rejecting_older_events_fails_out_of_order(base_url: str) -> None:
    report = _check(base_url + "/strict-order")
    assert _failed(report) == {"out_of_order"}
    assert "order by EventTime" in _case(report, "out_of_order").reason


def test_check_slow_endpoint_within_the_service_wait_passes_with_a_warning(
    base_url: str,
) -> None:
    report = _check(base_url + "/slowish", slow_after=SLOWISH_DELAY / 2)
    assert report.passed, report.failures
    (case,) = report.warnings
    assert case.name == "response_time"
    assert "within the service's 30 s, but above 0.06 s" in case.reason
    assert case.duration_ms >= SLOWISH_DELAY * 1000
    assert case.figures["slowest_s"] >= SLOWISH_DELAY
    assert (case.figures["slow_after_s"], case.figures["limit_s"]) == (0.06, 30.0)


def test_check_slow_handshake_is_a_warning_that_names_the_handshake(base_url: str) -> None:
    report = _check(base_url + "/slow-handshake", slow_after=SLOWISH_DELAY / 2)
    assert report.passed, report.failures
    case = _case(report, "response_time")
    assert case.result == "warn"
    assert "(a handshake)" in case.reason
    assert case.figures["slowest_handshake_s"] >= SLOWISH_DELAY


def test_check_slow_endpoint_strict_fails_the_response_time(base_url: str) -> None:
    report = _check(base_url + "/slow-handshake", slow_after=SLOWISH_DELAY / 2, strict=True)
    assert _failed(report) == {"response_time"}
    assert report.as_dict()["strict"] is True


def test_check_fast_endpoint_reports_its_figures_without_a_warning(base_url: str) -> None:
    case = _case(_check(base_url + "/good"), "response_time")
    assert case.result == "pass"
    assert set(case.figures) == {
        "answers", "slowest_s", "slowest_handshake_s", "slow_after_s", "limit_s"
    }  # fmt: skip
    assert case.figures["slow_after_s"] == 10.0


@pytest.mark.parametrize("slow_after", [0.0, 31.0, float("nan")])
def test_check_config_slow_after_outside_the_service_wait_is_a_usage_error(
    slow_after: float,
) -> None:
    with pytest.raises(UsageError, match="--slow-after"):
        CheckConfig(url="http://127.0.0.1:9/x", credentials=CREDS, slow_after=slow_after)


def test_check_endpoint_slower_than_the_timeout_fails_with_no_answer(base_url: str) -> None:
    report = _check(base_url + "/slow", timeout=SLOW_DELAY / 2)
    assert "signed_event" in _failed(report)
    assert "response_time" in _failed(report)
    assert "no answer within 0.25 s" in _case(report, "signed_event").reason
    assert _case(report, "sync_handshake").passed  # handshakes are answered at once


def test_check_with_credentials_the_endpoint_does_not_share_fails_signed_events(
    base_url: str,
) -> None:
    report = _check(base_url + "/other-key")
    assert _failed(report) == {"signed_event", "duplicate_event", "out_of_order"}
    case = _case(report, "signed_event")
    assert case.status == 401
    assert "Hashkey" in case.reason


def test_check_closed_port_says_nothing_is_listening_there() -> None:
    url = f"http://127.0.0.1:{free_port()}/webhooks"
    with pytest.raises(UnreachableError) as caught:
        _check(url)
    assert caught.value.message == f"nothing is listening at {url} (connection refused)"


@pytest.mark.parametrize("url", ["ftp://example.com/x", "localhost:8080/hooks", "http:///path"])
def test_check_config_rejects_urls_that_are_not_http(url: str) -> None:
    with pytest.raises(UsageError):
        CheckConfig(url=url, credentials=CREDS)


def test_check_is_repeatable_with_a_seed(base_url: str) -> None:
    first, second = _check(base_url + "/good"), _check(base_url + "/good")
    assert [c.reason for c in first.cases[:-1]] == [c.reason for c in second.cases[:-1]]


# -- JUnit ----------------------------------------------------------------------------------------
def test_junit_xml_counts_cases_and_carries_failure_reasons(base_url: str) -> None:
    report = _check(base_url + "/no-verify")
    root = ElementTree.fromstring(junit_xml(report))
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "8"
    assert suite.get("failures") == "2"
    assert suite.get("errors") == "0"
    testcases = suite.findall("testcase")
    assert [tc.get("name") for tc in testcases] == list(CASE_NAMES)
    failed = {
        tc.get("name"): tc.find("failure") for tc in testcases if tc.find("failure") is not None
    }
    assert set(failed) == {"bad_signature", "stale_timestamp"}
    failure = failed["bad_signature"]
    assert failure is not None
    assert "does not verify" in (failure.get("message") or "")
    assert failure.get("type") == "HTTP 200"


def test_unreachable_junit_xml_is_one_errored_case() -> None:
    root = ElementTree.fromstring(
        unreachable_junit_xml("http://x/", "cannot reach http://x/", "2026-11-21T19:20:30.123Z")
    )
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("1", "1", "0")
    assert suite.get("timestamp") == "2026-11-21T19:20:30"
    error = suite.find("testcase/error")
    assert error is not None
    assert error.get("message") == "cannot reach http://x/"


# -- TLS ------------------------------------------------------------------------------------------
def test_check_tls_endpoint_with_its_ca_passes(tls_url: str, pki: dict[str, Path]) -> None:
    report = _check(tls_url + "/good", ca_bundle=pki["ca"])
    assert report.passed, report.failures


def test_check_tls_endpoint_with_untrusted_certificate_is_unreachable(tls_url: str) -> None:
    with pytest.raises(UnreachableError, match="not trusted") as info:
        _check(tls_url + "/good")
    assert "--ca-bundle" in (info.value.hint or "")


def _serve_mtls(pki: dict[str, Path]) -> _Running:
    """A conforming endpoint that requires a client certificate of the development CA."""
    return _serve(
        router,
        "https",
        ssl_certfile=str(pki["server_cert"]),
        ssl_keyfile=str(pki["server_key"]),
        ssl_ca_certs=str(pki["ca"]),
        ssl_cert_reqs=ssl.CERT_REQUIRED,
    )


def test_check_mtls_endpoint_without_a_client_certificate_says_to_give_one(
    pki: dict[str, Path],
) -> None:
    running = _serve_mtls(pki)
    try:
        with pytest.raises(UnreachableError, match="closed the connection") as info:
            _check(running.url + "/good", ca_bundle=pki["ca"])
    finally:
        _stop(running)
    assert "--client-cert" in (info.value.hint or "")


def test_check_mtls_endpoint_with_a_client_certificate_passes(pki: dict[str, Path]) -> None:
    running = _serve_mtls(pki)
    try:
        report = _check(
            running.url + "/good",
            ca_bundle=pki["ca"],
            client_cert=pki["client_cert"],
            client_key=pki["client_key"],
        )
    finally:
        _stop(running)
    assert report.passed, report.failures


# -- the command ----------------------------------------------------------------------------------
@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_conforming_endpoint_exits_0(base_url: str) -> None:
    result = run_cli("endpoint", "check", base_url + "/good", *CLI_CREDS)
    assert result.exit_code == 0, result.output
    for name in CASE_NAMES:
        assert name in result.stdout
    assert "FAIL" not in result.stdout
    assert "all 8 checks passed" in result.stderr


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_broken_endpoint_exits_1_with_json_and_junit(
    base_url: str, tmp_path: Path
) -> None:
    junit = tmp_path / "reports" / "endpoint.xml"
    result = run_cli(
        "-o", "json", "endpoint", "check", base_url + "/no-verify", *CLI_CREDS, "--junit", junit
    )
    assert result.exit_code == 1
    data = result.json
    assert (data["passed"], data["total"], data["failed"]) == (False, 8, 2)
    assert [case["name"] for case in data["cases"]] == list(CASE_NAMES)
    assert set(data["cases"][0]) == {
        "name", "passed", "result", "reason", "duration_ms", "status", "figures"
    }  # fmt: skip
    assert (data["strict"], data["warnings"]) == (False, 0)
    assert "2 of 8 checks failed: bad_signature, stale_timestamp" in result.stderr
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "2"
    assert HASHKEY not in result.output + junit.read_text()


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_table_shows_failing_reason(base_url: str) -> None:
    result = run_cli("endpoint", "check", base_url + "/handshake-202", *CLI_CREDS)
    assert result.exit_code == 1
    assert "FAIL" in result.stdout
    assert "202" in result.stdout


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_unreachable_exits_5_and_writes_errored_junit(
    tmp_path: Path,
) -> None:
    junit = tmp_path / "endpoint.xml"
    url = f"http://127.0.0.1:{free_port()}/webhooks"
    result = run_cli("endpoint", "check", url, *CLI_CREDS, "--junit", junit)
    assert result.exit_code == 5
    assert result.stderr.startswith(f"error: nothing is listening at {url} (connection refused)")
    assert "Errno" not in result.stderr
    assert result.stdout == ""
    assert ElementTree.parse(junit).getroot().find("testsuite/testcase/error") is not None


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_tls_options(tls_url: str, pki: dict[str, Path]) -> None:
    url = tls_url + "/good"
    assert run_cli("endpoint", "check", url, *CLI_CREDS).exit_code == 5
    trusted = run_cli("endpoint", "check", url, *CLI_CREDS, "--ca-bundle", pki["ca"])
    assert trusted.exit_code == 0, trusted.output
    insecure = run_cli("endpoint", "check", url, *CLI_CREDS, "--insecure")
    assert insecure.exit_code == 0
    assert "TLS verification is off" in insecure.stderr
    both = run_cli("endpoint", "check", url, *CLI_CREDS, "--insecure", "--ca-bundle", pki["ca"])
    assert both.exit_code == 2


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_rejects_a_bad_url() -> None:
    result = run_cli("endpoint", "check", "localhost:8080", *CLI_CREDS)
    assert result.exit_code == 2
    assert "not an http:// or https:// URL" in result.stderr


@pytest.mark.usefixtures("hashkey_env")
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://[::1", "is not a valid URL: Invalid IPv6 URL"),
        ("http://127.0.0.1:0/webhooks", "the port must be a number from 1 to 65535"),
        ("http://127.0.0.1:70000/webhooks", "the port must be a number from 1 to 65535"),
        ("https://127.0.0.1:80a/webhooks", "the port must be a number from 1 to 65535"),
    ],
)
def test_endpoint_check_command_unparsable_url_is_a_usage_error(url: str, message: str) -> None:
    result = run_cli("endpoint", "check", url, *CLI_CREDS)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: '{url}'")
    assert message in result.stderr
    assert "internal error" not in result.stderr


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_manual_window_outlasts_the_timeout(base_url: str) -> None:
    result = run_cli(
        "-o", "json", "endpoint", "check", base_url + "/manual-late", *CLI_CREDS,
        "--manual-validation", "--timeout", "1", "--manual-window", "4",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.json["passed"] is True  # stdout is the report only
    assert "waiting up to 4 s (--manual-window 4) for the endpoint's GET" in result.stderr


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_shows_a_countdown_on_a_terminal(
    base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # stderr counts as a terminal
    result = run_cli(
        "endpoint", "check", base_url + "/manual-late", *CLI_CREDS,
        "--manual-validation", "--timeout", "1", "--manual-window", "4",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert re.search(r"waiting for the GET of validationUrl, 0:0[1-4] left", result.stderr)
    assert "left" not in result.stdout


@pytest.mark.usefixtures("hashkey_env")
@pytest.mark.parametrize("value", ["0", "-5", "301", "nan"])
def test_endpoint_check_command_bad_manual_window_exits_2(value: str) -> None:
    result = run_cli(
        "endpoint", "check", "http://127.0.0.1:9/webhooks", *CLI_CREDS, "--manual-window", value
    )
    assert result.exit_code == 2, result.output
    assert "--manual-window must be" in result.stderr


@pytest.mark.usefixtures("hashkey_env")
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_endpoint_check_command_non_finite_timeout_is_a_usage_error(value: str) -> None:
    result = run_cli(
        "endpoint", "check", "http://127.0.0.1:9/webhooks", *CLI_CREDS, "--timeout", value
    )
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.stderr


def test_endpoint_check_command_without_credentials_is_a_config_error(base_url: str) -> None:
    result = run_cli("endpoint", "check", base_url + "/good")
    assert result.exit_code == 2
    assert "service_client_id" in result.stderr


# -- prefctl receive --------------------------------------------------------------------------------
def test_check_prefctl_receiver_passes_every_case() -> None:
    from prefctl.receiver.serve import ReceiverConfig, start_in_thread

    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS)) as receiver:
        report = _check(receiver.webhook_url)
    assert report.passed, report.failures


def test_check_prefctl_receiver_validating_manually_passes_when_declared() -> None:
    from prefctl.receiver.serve import ReceiverConfig, start_in_thread

    config = ReceiverConfig(
        port=0,
        credentials=CREDS,
        manual_validation=True,
        auto_validate=True,
        validation_hosts=("127.0.0.1",),
    )
    with start_in_thread(config) as receiver:
        report = _check(receiver.webhook_url, manual_validation=True)
    assert report.passed, report.failures
    assert "validationUrl fetched" in _case(report, "manual_handshake").reason


def test_check_prefctl_receiver_without_verification_fails_the_signature_cases() -> None:
    from prefctl.receiver.serve import ReceiverConfig, start_in_thread

    with start_in_thread(ReceiverConfig(port=0, verify=False)) as receiver:
        report = _check(receiver.webhook_url)
    assert _failed(report) == {"bad_signature", "stale_timestamp"}


def test_check_signs_with_the_injected_clock(base_url: str) -> None:
    """A suite whose clock is two hours behind signs stale headers: the endpoint rejects them."""
    behind = FakeClock(datetime.now(UTC) - timedelta(hours=2))
    config = CheckConfig(url=base_url + "/good", credentials=CREDS)
    report = check_endpoint(config, clock=behind, rng=random.Random(7))
    assert _case(report, "signed_event").status == 401
    assert _case(report, "sync_handshake").passed
    assert report.started_at.startswith(behind.now().strftime("%Y-%m-%dT%H"))


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_against_prefctl_receive_passes() -> None:
    """The real thing: `prefctl receive` in its own process, checked by `prefctl endpoint check`."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "prefctl", "-o", "json", "receive", "--port", "0"]
    receiver = subprocess.Popen(
        [*command, *CLI_CREDS, "--timeout", "60"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert receiver.stdout is not None
        ready = json.loads(receiver.stdout.readline())
        assert ready["type"] == "ready"
        result = run_cli("endpoint", "check", ready["url"], *CLI_CREDS)
    finally:
        receiver.terminate()
        receiver.wait(10)
    assert result.exit_code == 0, result.output


def _docs_tls_commands() -> list[list[str]]:
    """The commands of the TLS example in docs/receiver.md, as argument lists without 'prefctl'."""
    import shlex

    text = (Path(__file__).resolve().parents[2] / "docs" / "receiver.md").read_text()
    section = text.split("## TLS and mTLS", 1)[1]
    block = section.split("```console\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    commands = []
    for line in block.splitlines():
        for command in line.removeprefix("$ ").split("&&"):
            words = shlex.split(command)
            assert words[0] == "prefctl", command
            commands.append(words[1:])
    return commands


@pytest.mark.usefixtures("hashkey_env")
def test_docs_tls_example_works_and_insecure_still_presents_the_client_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/receiver.md's mTLS example, pasted: certificates, `prefctl receive` with --client-ca in
    its own process, and `prefctl endpoint check` presenting the client certificate, also with
    --insecure (which turns off server verification only)."""
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    commands = _docs_tls_commands()
    issue = [c for c in commands if c[0] == "certs"]
    (receive,) = [c for c in commands if c[0] == "receive"]
    (check,) = [c for c in commands if c[:2] == ["endpoint", "check"]]
    for command in issue:
        result = run_cli(*command)
        assert result.exit_code == 0, result.output
    command = [sys.executable, "-m", "prefctl", "-o", "json", *receive, "--port", "0", *CLI_CREDS]
    receiver = subprocess.Popen([*command, "--timeout", "120"], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        ready = json.loads(receiver.stdout.readline())
        assert (ready["type"], ready["tls"], ready["mtls"]) == ("ready", True, True)
        url, options = ready["url"], check[3:]
        assert check[2] == "https://127.0.0.1:8751/webhooks"
        as_documented = run_cli(*check[:2], url, *options, *CLI_CREDS)
        client = [o for o in options if o != "--ca-bundle" and not o.endswith("ca.pem")]
        insecure = run_cli("endpoint", "check", url, *client, "--insecure", *CLI_CREDS)
        no_client = run_cli("endpoint", "check", url, "--insecure", *CLI_CREDS)
    finally:
        receiver.terminate()
        receiver.wait(10)
    assert as_documented.exit_code == 0, as_documented.output
    assert insecure.exit_code == 0, insecure.output
    assert "all 8 checks passed" in insecure.stderr
    assert "TLS verification is off" in insecure.stderr
    assert no_client.exit_code != 0


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_certificate_for_another_host_says_so(tmp_path: Path) -> None:
    from tests.auth.stub_server import running_stub

    ca = certs.init_ca(tmp_path / "pki")
    server = certs.issue_server(tmp_path / "pki", "example.test")
    with running_stub(tls=(server.certificate, server.private_key)) as stub:
        url = stub.url + "/webhooks"
        result = run_cli("endpoint", "check", url, *CLI_CREDS, "--ca-bundle", ca.certificate)
    assert result.exit_code == 5
    assert "does not cover 127.0.0.1" in result.stderr
    assert "--ca-bundle" not in result.stderr  # trusting the CA would not help


# -- warnings: what the spec accepts ----------------------------------------------------------------
def test_junit_xml_warning_is_a_passing_testcase_with_system_out(base_url: str) -> None:
    report = _check(base_url + "/slowish", slow_after=SLOWISH_DELAY / 2)
    suite = ElementTree.fromstring(junit_xml(report)).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("8", "0")
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert (properties["warnings"], properties["strict"]) == ("1", "false")
    (testcase,) = [tc for tc in suite.findall("testcase") if tc.get("name") == "response_time"]
    assert testcase.find("failure") is None
    out = testcase.findtext("system-out") or ""
    assert out.startswith("WARNING: slowest of ")
    assert "slow_after_s=0.06" in out


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_against_manual_prefctl_receive_warns_and_strict_fails(
    tmp_path: Path,
) -> None:
    """`prefctl receive --manual-validation --auto-validate` in its own process: the spec's
    AwaitingManualAction path passes with a warning; --strict fails it (exit 1)."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "prefctl", "-o", "json", "receive", "--port", "0"]
    receiver = subprocess.Popen(
        [
            *command,
            *CLI_CREDS,
            "--manual-validation",
            "--auto-validate",
            "--validation-host",
            "127.0.0.1",
            "--timeout",
            "60",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    junit = tmp_path / "report.xml"
    try:
        assert receiver.stdout is not None
        ready = json.loads(receiver.stdout.readline())
        assert ready["validation"] == "auto"
        table = run_cli("endpoint", "check", ready["url"], *CLI_CREDS, "--junit", junit)
        strict = run_cli("-o", "json", "endpoint", "check", ready["url"], *CLI_CREDS, "--strict")
    finally:
        receiver.terminate()
        receiver.wait(10)
    assert table.exit_code == 0, table.output
    assert "WARN" in table.stdout
    assert "all 8 checks passed, 1 with warnings (sync_handshake)" in table.stderr
    assert "--strict makes them failures" in table.stderr
    testcase = ElementTree.parse(junit).getroot().find("testsuite/testcase[@name='sync_handshake']")
    assert testcase is not None
    assert "AwaitingManualAction" in (testcase.findtext("system-out") or "")
    assert strict.exit_code == 1
    assert strict.json["failed"] == 1
    assert strict.json["cases"][0]["result"] == "fail"
    assert "1 of 8 checks failed: sync_handshake" in strict.stderr


@pytest.mark.usefixtures("hashkey_env")
def test_endpoint_check_command_slow_after_warns_then_strict_fails(base_url: str) -> None:
    url = base_url + "/slow-handshake"
    slow = ("--slow-after", str(SLOWISH_DELAY / 2))
    warned = run_cli("-o", "json", "endpoint", "check", url, *CLI_CREDS, *slow)
    assert warned.exit_code == 0, warned.output
    assert warned.json["warnings"] == 1
    assert warned.json["cases"][-1]["result"] == "warn"
    assert warned.json["cases"][-1]["figures"]["slowest_handshake_s"] >= SLOWISH_DELAY
    strict = run_cli("endpoint", "check", url, *CLI_CREDS, *slow, "--strict")
    assert strict.exit_code == 1
    assert "1 of 8 checks failed: response_time" in strict.stderr
    bad = run_cli("endpoint", "check", url, *CLI_CREDS, "--slow-after", "45")
    assert bad.exit_code == 2
    assert "--slow-after must be" in bad.stderr
