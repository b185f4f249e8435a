"""`prefctl receive --ui` over HTTP: who may open the inspector, what it shows, how it batches."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pytest

from prefctl.errors import UsageError
from prefctl.receiver import ReceiverConfig
from prefctl.receiver.inspector import KEEP, MAX_PER_MESSAGE
from prefctl.receiver.serve import RunningReceiver, start_in_thread
from prefctl.webhooks.signature import HEADER_NAME, SigningCredentials, sign_header
from tests.helpers import run_cli

CREDS = SigningCredentials("DEMO_CORP", "events-signer", "inspector-test-hashkey-0123456789")
TOKEN = "0123456789abcdef0123"


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[RunningReceiver]:
    options = getattr(request, "param", {})
    config = ReceiverConfig(port=0, credentials=CREDS, ui=True, **options)
    with start_in_thread(config) as running:
        yield running


def _get(
    receiver: RunningReceiver, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def _post(
    conn: http.client.HTTPConnection, path: str, body: dict[str, Any], *, signed: bool = True
) -> int:
    headers = {"content-type": "application/json"}
    if signed:
        headers[HEADER_NAME] = sign_header(CREDS, datetime.now(UTC))
    conn.request("POST", path, json.dumps(body).encode(), headers)
    response = conn.getresponse()
    response.read()
    return response.status


def _deliver(receiver: RunningReceiver, count: int, **body: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    try:
        for n in range(count):
            event = {"EventType": "contacts.email.updated", "EventId": f"e{n}", **body}
            assert _post(conn, "/webhooks", event) == 200
    finally:
        conn.close()
    receiver.wait_for(count)


def _events(receiver: RunningReceiver, until: int) -> list[list[dict[str, Any]]]:
    """The SSE batches of the inspector's feed until request ``until`` arrived (lines parsed)."""
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    conn.request("GET", "/_prefctl/api/events")
    response = conn.getresponse()
    assert response.getheader("content-type") == "text/event-stream"
    batches: list[list[dict[str, Any]]] = []
    data: list[str] = []
    try:
        while not batches or batches[-1][0]["last"] < until:
            line = response.fp.readline().decode().rstrip("\n")
            if line.startswith("data: "):
                data.append(line[6:])
            elif not line and data:
                records = [json.loads(item) for item in data]
                if records[0]["type"] == "batch":
                    batches.append(records)
                data = []
    finally:
        conn.close()
    return batches


def test_inspector_off_without_ui_answers_404() -> None:
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS)) as receiver:
        status, _, _ = _get(receiver, "/_prefctl/")
    assert status == 404


def test_inspector_serves_its_page_and_ready_record_gives_its_url(
    receiver: RunningReceiver,
) -> None:
    status, headers, body = _get(receiver, "/_prefctl/")
    assert status == 200
    assert b"app.js" in body
    assert "default-src 'self'" in headers["content-security-policy"]
    assert _get(receiver, "/_prefctl")[1]["location"] == "/_prefctl/"
    info = ReceiverConfig(port=0, credentials=CREDS, ui=True).ready_info(8751)
    assert info["ui_url"] == "http://127.0.0.1:8751/_prefctl/"


def test_inspector_without_token_refuses_a_non_loopback_host_header(
    receiver: RunningReceiver,
) -> None:
    status, _, body = _get(receiver, "/_prefctl/", {"Host": "attacker.example:8751"})
    assert status == 403
    assert b"loopback" in body


@pytest.mark.parametrize("receiver", [{"ui_token": TOKEN}], indirect=True)
def test_inspector_with_token_asks_for_it_and_sets_a_cookie(receiver: RunningReceiver) -> None:
    assert _get(receiver, "/_prefctl/")[0] == 401
    assert _get(receiver, "/_prefctl/?token=wrong-token-0123456789")[0] == 401
    status, headers, _ = _get(receiver, f"/_prefctl/?token={TOKEN}", {"Host": "example.org"})
    assert status == 200
    assert "HttpOnly" in headers["set-cookie"]
    cookie = headers["set-cookie"].split(";")[0]
    assert _get(receiver, "/_prefctl/api/faults", {"Cookie": cookie})[0] == 200


def test_inspector_on_a_non_loopback_host_needs_a_token() -> None:
    with pytest.raises(UsageError, match="--ui-token"):
        ReceiverConfig(host="0.0.0.0", credentials=CREDS, ui=True)
    ReceiverConfig(host="0.0.0.0", credentials=CREDS, ui=True, ui_token=TOKEN)
    result = run_cli("receive", "--no-verify", "--host", "0.0.0.0", "--ui")
    assert result.exit_code == 2
    assert "--ui-token" in result.stderr


@pytest.mark.parametrize("receiver", [{"redact": True}], indirect=True)
def test_inspector_with_redact_masks_the_body_it_shows(receiver: RunningReceiver) -> None:
    _deliver(receiver, 1, Data={"Email": "jane.doe@example.com"}, PreviousData={"Email": "x@y.org"})
    status, _, body = _get(receiver, "/_prefctl/api/requests/1")
    assert status == 200
    detail = json.loads(body)
    assert detail["record"]["body"]["Data"]["Email"] == "***@example.com"
    assert detail["signature_header"]["timestamp"].endswith("Z")
    assert b"jane.doe" not in body


def test_inspector_feed_is_the_json_lines_in_bounded_batches(receiver: RunningReceiver) -> None:
    count = KEEP + 100
    _deliver(receiver, count)
    batches = _events(receiver, until=count)
    # A page that connects late gets the newest requests, at most one message's worth.
    first = batches[0]
    assert first[0]["last"] == count
    assert len(first) - 1 == MAX_PER_MESSAGE
    assert first[-1]["event_id"] == f"e{count - 1}"
    assert {line["type"] for line in first[1:]} == {"request"}
    # Only the last KEEP requests are kept for the detail view.
    assert _get(receiver, "/_prefctl/api/requests/1")[0] == 404
    assert _get(receiver, f"/_prefctl/api/requests/{count}")[0] == 200


def test_inspector_fault_change_applies_to_the_next_event_and_bad_ones_are_refused(
    receiver: RunningReceiver,
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    try:
        assert (
            _post(conn, "/_prefctl/api/faults", {"action": "fail", "count": 2, "status": 503})
            == 200
        )
        event = {"EventType": "contacts.email.updated", "EventId": "e1"}
        assert [_post(conn, "/webhooks", event) for _ in range(3)] == [503, 503, 200]
        bad = {"action": "fail", "count": 1, "status": 99}
        assert _post(conn, "/_prefctl/api/faults", bad) == 400
        assert _post(conn, "/_prefctl/api/faults", {"action": "delay", "seconds": -1}) == 400
        conn.request(
            "POST", "/_prefctl/api/faults", b"action=normal", {"content-type": "text/plain"}
        )
        response = conn.getresponse()
        response.read()
        assert response.status == 415
    finally:
        conn.close()
    verdicts = receiver.wait_for(3)
    assert [v.fault for v in verdicts] == ["fail-first 1/2", "fail-first 2/2", None]


def test_receive_ready_line_names_the_inspector_page() -> None:
    import subprocess
    import sys

    command = [sys.executable, "-m", "prefctl", "receive", "--no-verify", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--ui", "--timeout", "60"], stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline() for _ in range(2)]
    finally:
        process.terminate()
        process.wait(10)
    url = lines[1].split("inspector page: ", 1)[1].strip()
    assert urlsplit(url).path == "/_prefctl/"


def _post_raw(receiver: RunningReceiver, path: str, body: bytes = b"{}") -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=30)
    try:
        conn.request("POST", path, body, {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.parametrize(
    "text", ["%C2%B2", "%D9%A1", "-1", "0", "1e3", "+1", "%201", "1.0", "9" * 30, "1/x"]
)
def test_inspector_request_ids_that_are_not_ascii_numbers_answer_404(
    receiver: RunningReceiver, text: str
) -> None:
    _deliver(receiver, 1)
    status, _, body = _get(receiver, f"/_prefctl/api/requests/{text}")
    assert status == 404
    assert "error" in json.loads(body)
    assert _get(receiver, "/_prefctl/api/requests/1")[0] == 200  # still serving


def test_inspector_curl_redacts_the_signature_unless_asked(receiver: RunningReceiver) -> None:
    import shlex

    _deliver(receiver, 1, Data={"Name": "O'Hara"})
    status, _, body = _get(receiver, "/_prefctl/api/requests/1/curl")
    assert status == 200
    words = shlex.split(json.loads(body)["curl"])
    assert words[:4] == ["curl", "-X", "POST", f"http://127.0.0.1:{receiver.port}/webhooks"]
    header = next(w for w in words if w.lower().startswith("service-webhook:"))
    assert header.endswith("Signature=REDACTED")
    assert json.loads(words[-1])["Data"] == {"Name": "O'Hara"}
    assert not any(w.lower().startswith(("host:", "content-length:")) for w in words)
    signed = json.loads(_get(receiver, "/_prefctl/api/requests/1/curl?signature=1")[2])["curl"]
    assert "REDACTED" not in signed
    assert _get(receiver, "/_prefctl/api/requests/1/resend")[0] == 405


@pytest.mark.parametrize("receiver", [{"redact": True}], indirect=True)
def test_inspector_with_redact_never_gives_the_signature_or_the_body(
    receiver: RunningReceiver,
) -> None:
    _deliver(receiver, 1, Data={"Email": "jane.doe@example.com"})
    body = _get(receiver, "/_prefctl/api/requests/1/curl?signature=1")[2]
    assert b"REDACTED" in body
    assert b"jane.doe" not in body
    assert json.loads(_get(receiver, "/_prefctl/api/search?q=jane.doe")[2])["seqs"] == []


def test_inspector_search_finds_bodies_ignoring_case(receiver: RunningReceiver) -> None:
    _deliver(receiver, 2, Data={"Email": "Needle@Example.com"})
    _deliver(receiver, 1, Data={"Email": "other@example.com"})
    status, _, body = _get(receiver, "/_prefctl/api/search?q=needle%40example")
    assert status == 200
    assert json.loads(body)["seqs"] == [1, 2]
    assert _get(receiver, "/_prefctl/api/search?q=")[0] == 400


def test_inspector_resend_without_a_forward_target_is_refused(receiver: RunningReceiver) -> None:
    _deliver(receiver, 1)
    status, answer = _post_raw(receiver, "/_prefctl/api/requests/1/resend")
    assert status == 409
    assert "--forward-to" in answer["error"]
    assert _post_raw(receiver, "/_prefctl/api/requests/99/resend")[0] == 404


def test_inspector_resend_posts_the_recorded_request_to_the_handler() -> None:
    handler_config = ReceiverConfig(port=0, verify=False, ui=True)  # ui: it keeps the bodies
    with start_in_thread(handler_config) as handler:
        config = ReceiverConfig(port=0, credentials=CREDS, ui=True, forward_to=handler.webhook_url)
        with start_in_thread(config) as receiver:
            _deliver(receiver, 1, Data={"Email": "a@example.com"})
            handler.wait_for(1)
            status, answer = _post_raw(receiver, "/_prefctl/api/requests/1/resend")
            assert status == 200
            assert (answer["target"], answer["status"]) == (handler.webhook_url, 200)
            assert answer["latency_ms"] >= 0
            resent = handler.wait_for(1)[0]
            assert resent.body is not None
            assert json.loads(resent.body)["Data"] == {"Email": "a@example.com"}
            assert resent.signature == "unverified"


def test_inspector_resend_to_a_handler_that_is_down_says_why() -> None:
    import socket

    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/hook"
    config = ReceiverConfig(port=0, credentials=CREDS, ui=True, forward_to=closed)
    with start_in_thread(config) as receiver:
        conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
        try:
            assert _post(conn, "/webhooks", {"EventType": "profile.updated", "EventId": "e"}) == 502
        finally:
            conn.close()
        receiver.wait_for(1)
        status, answer = _post_raw(receiver, "/_prefctl/api/requests/1/resend")
    assert status == 200
    assert (answer["target"], answer["status"]) == (closed, None)
    assert answer["error"]
