"""The receiver as a real server on 127.0.0.1: uvicorn, sockets, TLS, faults, forwarding."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from prefctl import certs
from prefctl.clock import FakeClock
from prefctl.errors import PrefctlError, UsageError
from prefctl.receiver import (
    FaultPlan,
    FaultStep,
    ReceiverConfig,
    RunningReceiver,
    SignatureResult,
    start_in_thread,
)
from prefctl.receiver.verdict import Kind, Verdict
from prefctl.webhooks.signature import sign_header
from tests.receiver.asgi import CREDS, event_body, handshake_body


def signed_now() -> dict[str, str]:
    return {
        "content-type": "application/json",
        "service-webhook": sign_header(CREDS, datetime.now(UTC)),
    }


def post_event(url: str, event_id: str = "evt-1", **kwargs: Any) -> httpx.Response:
    now = datetime.now(UTC)
    return httpx.post(
        url, content=event_body(event_id, event_time=now), headers=signed_now(), **kwargs
    )


@pytest.fixture(scope="module")
def receiver() -> Iterator[RunningReceiver]:
    """One verifying receiver shared by the tests that do not change its configuration."""
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS)) as running:
        yield running


@pytest.fixture
def shared(receiver: RunningReceiver) -> RunningReceiver:
    """The shared receiver, with what earlier tests left behind consumed (up to a marker event)."""
    marker = f"marker-{id(object())}"
    post_event(receiver.webhook_url, marker)
    until(receiver, marker)
    return receiver


def until(receiver: RunningReceiver, event_id: str) -> list[Verdict]:
    """Verdicts up to and including the one of ``event_id``."""
    seen: list[Verdict] = []
    while not seen or seen[-1].event_id != event_id:
        seen.extend(receiver.wait_for(1))
    return seen


def test_receiver_answers_events_and_handshakes_over_http(shared: RunningReceiver) -> None:
    assert httpx.get(shared.url + "/healthz").status_code == 200
    assert post_event(shared.webhook_url, "evt-http").status_code == 200
    handshake = httpx.post(shared.webhook_url, content=handshake_body())
    assert handshake.json() == {"validationResponse": "code-123"}
    event, hs = shared.wait_for(2)
    assert (event.event_id, event.signature, event.attempt) == ("evt-http", "valid", 1)
    assert event.latency_ms is not None
    assert event.latency_ms >= 0
    assert hs.kind == Kind.HANDSHAKE


def test_receiver_duplicate_is_flagged_after_an_acknowledged_delivery(
    shared: RunningReceiver,
) -> None:
    post_event(shared.webhook_url, "evt-dup")
    post_event(shared.webhook_url, "evt-dup")
    first, second = shared.wait_for(2)
    assert (first.duplicate, second.duplicate, second.attempt) == (False, True, 2)


def test_receiver_survives_random_bytes_and_keeps_serving(shared: RunningReceiver) -> None:
    for garbage in (
        b"\x00\xff" * 50 + b"\r\n\r\n",
        b"POST /webhooks HTTP/1.1\r\nContent-Length: x\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", shared.port), timeout=5) as sock:
            sock.sendall(garbage)
            answer = sock.recv(1024)
        assert answer.startswith(b"HTTP/1.1 400")
    assert post_event(shared.webhook_url, "evt-after-garbage").status_code == 200


def test_receiver_huge_headers_do_not_crash_it(shared: RunningReceiver) -> None:
    headers = {**signed_now(), "x-padding": "a" * 200_000}
    try:
        status = httpx.post(shared.webhook_url, content=event_body(), headers=headers).status_code
    except httpx.HTTPError:
        status = None  # refused by the HTTP parser: also fine
    assert status is None or status < 500
    assert post_event(shared.webhook_url, "evt-after-headers").status_code == 200


def test_receiver_body_over_1_mib_is_413(shared: RunningReceiver) -> None:
    body = b'{"EventId": "big", "x": "' + b"a" * (1024 * 1024) + b'"}'
    response = httpx.post(shared.webhook_url, content=body, headers=signed_now())
    assert response.status_code == 413
    assert post_event(shared.webhook_url, "evt-after-big").status_code == 200
    assert until(shared, "evt-after-big")[0].status == 413


def test_receiver_bad_signature_is_401_and_shown(shared: RunningReceiver) -> None:
    headers = {
        **signed_now(),
        "service-webhook": "Timestamp=2020-01-01T00:00:00.000Z,Signature=AAAA",
    }
    response = httpx.post(shared.webhook_url, content=event_body("evt-bad"), headers=headers)
    assert response.status_code == 401
    (verdict,) = shared.wait_for(1)
    assert (verdict.signature, verdict.reason) == (SignatureResult.INVALID, "mismatch")


def test_receiver_close_fault_resets_the_connection() -> None:
    plan = FaultPlan(steps=(FaultStep(close=True),))
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS, faults=plan)) as running:
        with pytest.raises(httpx.TransportError):
            post_event(running.webhook_url, "evt-reset")
        assert post_event(running.webhook_url, "evt-reset").status_code == 200
        reset, ok = running.wait_for(2)
    assert (reset.status, reset.fault, ok.attempt) == (None, "step 1/1", 2)


def test_receiver_forward_mirrors_the_handler_and_reports_it() -> None:
    handler_plan = FaultPlan(after=FaultStep(status=503, name="respond"))
    handler_config = ReceiverConfig(port=0, verify=False, faults=handler_plan)
    with start_in_thread(handler_config) as handler:
        config = ReceiverConfig(port=0, credentials=CREDS, forward_to=handler.webhook_url)
        with start_in_thread(config) as running:
            response = post_event(running.webhook_url, "evt-fwd")
            (verdict,) = running.wait_for(1)
        (seen,) = handler.wait_for(1)
    assert response.status_code == 503
    assert verdict.forward is not None
    assert verdict.forward.status == 503
    assert verdict.forward.latency_ms >= 0
    assert seen.event_id == "evt-fwd"  # the handler got the event, signature header included


def test_receiver_forward_to_a_handler_on_this_machine_ignores_the_environments_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # a proxy that is not there
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{sock.getsockname()[1]}")
    with start_in_thread(ReceiverConfig(port=0, verify=False)) as handler:
        config = ReceiverConfig(port=0, credentials=CREDS, forward_to=handler.webhook_url)
        with start_in_thread(config) as running:
            response = post_event(running.webhook_url, "evt-direct", trust_env=False)
            (verdict,) = running.wait_for(1)
        (seen,) = handler.wait_for(1)
    assert response.status_code == 200
    assert verdict.forward is not None
    assert verdict.forward.status == 200
    assert seen.event_id == "evt-direct"


def test_receiver_forward_to_a_dead_handler_answers_502_saying_nothing_listens() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS, forward_to=dead)) as running:
        assert post_event(running.webhook_url).status_code == 502
        (verdict,) = running.wait_for(1)
    assert verdict.forward is not None
    assert verdict.forward.error == f"nothing is listening at {dead} (connection refused)"


def test_receiver_auto_validate_gets_the_validation_url() -> None:
    with start_in_thread(ReceiverConfig(port=0, verify=False)) as service:
        config = ReceiverConfig(
            port=0,
            credentials=CREDS,
            manual_validation=True,
            auto_validate=True,
            validation_hosts=("127.0.0.1",),
            clock=FakeClock(),  # the pause before the GET passes at once
        )
        with start_in_thread(config) as running:
            body = handshake_body(url=service.url + "/healthz")
            response = httpx.post(running.webhook_url, content=body)
            handshake, validation = running.wait_for(2)
    assert response.status_code == 200
    assert "validationResponse" not in response.json()
    assert handshake.validation_url == service.url + "/healthz"
    assert (validation.kind, validation.status, validation.detail) == (
        Kind.VALIDATION,
        200,
        "validated",
    )


def test_receiver_exit_after_stops_by_itself() -> None:
    running = start_in_thread(ReceiverConfig(port=0, credentials=CREDS, exit_after=2))
    post_event(running.webhook_url, "a")
    httpx.post(running.webhook_url, content=event_body("forged"))  # 401: not counted
    post_event(running.webhook_url, "b")
    summary = running.stop()
    assert summary is not None
    assert (summary.reason, summary.events, summary.requests) == ("exit_after", 2, 3)


def test_receiver_timeout_before_exit_after_is_an_error() -> None:
    running = start_in_thread(ReceiverConfig(port=0, credentials=CREDS, exit_after=3, timeout=0.3))
    assert running.wait(10)
    with pytest.raises(PrefctlError, match=r"timed out after 0\.3 s: 0 of 3 events arrived"):
        running.stop()


def test_receiver_busy_port_is_a_usage_error(receiver: RunningReceiver) -> None:
    with pytest.raises(UsageError, match=f"port {receiver.port} on 127.0.0.1 is already in use"):
        start_in_thread(ReceiverConfig(port=receiver.port, credentials=CREDS))


def test_receiver_record_file_holds_each_request(tmp_path: Path) -> None:
    path = tmp_path / "rec.ndjson"
    config = ReceiverConfig(port=0, credentials=CREDS, record=path, redact=True)
    with start_in_thread(config) as running:
        post_event(running.webhook_url, "evt-rec")
        running.wait_for(1)
    (line,) = [json.loads(text) for text in path.read_text().splitlines()]
    assert line["body"]["EventId"] == "evt-rec"
    assert line["body"]["Data"]["Address"] == "***@example.com"
    assert line["headers"]["service-webhook"].endswith("Signature=***")
    assert CREDS.hashkey not in path.read_text()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "signature verification needs"),
        ({"verify": False, "path": "webhooks"}, "must start with /"),
        ({"verify": False, "tls_cert": Path("c.pem")}, "go together"),
        ({"verify": False, "redact": True}, "--redact applies to --record"),
        ({"verify": False, "exit_after": 0}, "--exit-after"),
        ({"verify": False, "forward_to": "ftp://x"}, "--forward-to"),
    ],
)
def test_receiver_config_is_checked_in_one_step(options: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ReceiverConfig(**options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, certs.IssuedCertificate]:
    directory = tmp_path_factory.mktemp("pki")
    return {
        "ca": certs.init_ca(directory),
        "server": certs.issue_server(directory, "127.0.0.1"),
        "client": certs.issue_client(directory, "dispatcher"),
    }


def test_receiver_tls_serves_https(pki: dict[str, certs.IssuedCertificate]) -> None:
    server = pki["server"]
    config = ReceiverConfig(
        port=0, credentials=CREDS, tls_cert=server.certificate, tls_key=server.private_key
    )
    with start_in_thread(config) as running:
        assert running.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(pki["ca"].certificate))
        assert post_event(running.webhook_url, verify=context).status_code == 200


def test_receiver_tls_stops_without_waiting_for_a_kept_alive_client(
    pki: dict[str, certs.IssuedCertificate], caplog: pytest.LogCaptureFixture
) -> None:
    # A dispatcher keeps its connection open between deliveries. Closed over TLS, a connection
    # waits for the client's close_notify, which an idle client never sends: the stop used to
    # wait uvicorn's whole graceful-shutdown time for it, then log that it had run out.
    server = pki["server"]
    config = ReceiverConfig(
        port=0, credentials=CREDS, tls_cert=server.certificate, tls_key=server.private_key
    )
    context = ssl.create_default_context(cafile=str(pki["ca"].certificate))
    with httpx.Client(verify=context) as client:
        with start_in_thread(config) as running:
            now = datetime.now(UTC)
            answer = client.post(
                running.webhook_url, content=event_body(event_time=now), headers=signed_now()
            )
            assert answer.status_code == 200
        assert not running.running
    assert "graceful shutdown" not in caplog.text


def test_receiver_mtls_requires_a_client_certificate(
    pki: dict[str, certs.IssuedCertificate],
) -> None:
    server, client = pki["server"], pki["client"]
    config = ReceiverConfig(
        port=0,
        credentials=CREDS,
        tls_cert=server.certificate,
        tls_key=server.private_key,
        client_ca=pki["ca"].certificate,
    )
    with start_in_thread(config) as running:
        anonymous = ssl.create_default_context(cafile=str(pki["ca"].certificate))
        with pytest.raises(httpx.TransportError):
            post_event(running.webhook_url, verify=anonymous)
        identified = ssl.create_default_context(cafile=str(pki["ca"].certificate))
        identified.load_cert_chain(str(client.certificate), str(client.private_key))
        assert post_event(running.webhook_url, verify=identified).status_code == 200


def test_receiver_unreadable_certificate_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    config = ReceiverConfig(port=0, verify=False, tls_cert=bad, tls_key=bad)
    with pytest.raises(UsageError, match="TLS certificate"):
        start_in_thread(config)


def test_receiver_certificate_for_another_host_is_refused_before_listening(
    pki: dict[str, certs.IssuedCertificate],
) -> None:
    directory = pki["ca"].certificate.parent
    other = certs.issue_server(directory, "example.test")
    config = ReceiverConfig(
        port=0, verify=False, tls_cert=other.certificate, tls_key=other.private_key
    )

    with pytest.raises(UsageError) as caught:
        start_in_thread(config)

    assert str(caught.value) == (
        f"the TLS certificate {other.certificate} covers example.test, not 127.0.0.1, the host "
        "in the receiver's URL; clients would refuse it"
    )
    assert "prefctl certs issue --server 127.0.0.1" in (caught.value.hint or "")


def test_receiver_certificate_host_check_follows_the_announced_url(
    pki: dict[str, certs.IssuedCertificate],
) -> None:
    from prefctl.receiver.serve import check_certificate_host

    directory = pki["ca"].certificate.parent
    other = certs.issue_server(directory, "example.test")
    loopback = pki["server"]
    for host, cert in (("localhost", loopback), ("example.test", other), ("0.0.0.0", other)):
        # localhost is in the loopback certificate; a wildcard bind is reached by names only
        # the senders know, so it is not checked.
        check_certificate_host(
            ReceiverConfig(
                host=host, verify=False, tls_cert=cert.certificate, tls_key=cert.private_key
            )
        )
