"""The receiver's HTTP protocol (``receiver.protocol``) on real connections.

The webhook path is answered by the protocol itself; a query string, another path or
``Expect: 100-continue`` sends the same request through uvicorn and the ASGI app. Both must give
the same answers byte for byte, keep answers in order, and keep HTTP's connection rules.
"""

from __future__ import annotations

import inspect
import socket
import threading
import time
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefctl.receiver import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.webhooks.signature import sign_header
from tests.helpers import CliResult, free_port, run_cli, wait_until
from tests.receiver.asgi import CREDS, event_body, handshake_body

KEEP_ALIVE_SECONDS = 5  # uvicorn's timeout_keep_alive, which the receiver keeps


@pytest.fixture(scope="module")
def receiver() -> Iterator[RunningReceiver]:
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS)) as running:
        yield running


def request(
    body: bytes,
    *,
    target: str = "/webhooks",
    method: str = "POST",
    headers: dict[str, str] | None = None,
    version: str = "1.1",
) -> bytes:
    fields = {"Host": "127.0.0.1", "Content-Length": str(len(body))}
    fields.update(headers if headers is not None else signed())
    lines = [f"{method} {target} HTTP/{version}"] + [f"{k}: {v}" for k, v in fields.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def signed() -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Service-Webhook": sign_header(CREDS, datetime.now(UTC)),
    }


class Connection:
    """One raw HTTP/1.1 connection that reads answers by their Content-Length."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def answer(self) -> bytes:
        """The next complete answer (an interim ``100 Continue`` is skipped)."""
        while True:
            while b"\r\n\r\n" not in self.buffer:
                self._more()
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            if head.startswith(b"HTTP/1.1 100 "):
                self.buffer = rest
                continue
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(rest) < length:
                self._more()
                head, _, rest = self.buffer.partition(b"\r\n\r\n")
            self.buffer = rest[length:]
            return head + b"\r\n\r\n" + rest[:length]

    def closed(self, timeout: float) -> bool:
        """Whether the server closes the connection within ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def connect(receiver: RunningReceiver) -> Iterator[Callable[..., Connection]]:
    opened: list[Connection] = []

    def open_one(port: int = receiver.port) -> Connection:
        connection = Connection(port)
        opened.append(connection)
        return connection

    yield open_one
    for connection in opened:
        connection.close()


@pytest.fixture
def settled(receiver: RunningReceiver) -> RunningReceiver:
    """The shared receiver with the verdicts of earlier tests consumed (up to a marker event)."""
    marker = f"marker-{id(object())}"
    connection = Connection(receiver.port)
    connection.send(request(event_body(marker)))
    connection.answer()
    connection.close()
    while receiver.wait_for(1)[0].event_id != marker:
        pass
    return receiver


REQUESTS = {
    "signed event": (event_body("evt-same"), None),
    "forged signature": (
        event_body("evt-forged"),
        {
            "Content-Type": "application/json",
            "Service-Webhook": "Timestamp=2020-01-01T00:00:00.000Z,Signature=AAAA",
        },
    ),
    "unsigned event": (event_body("evt-unsigned"), {"Content-Type": "application/json"}),
    "handshake": (handshake_body(), {"Content-Type": "application/json"}),
    "not JSON": (b"{nope", None),
    "not an object": (b"[1, 2]", None),
    "no EventId": (b'{"EventType": "contacts.email.added"}', None),
    "not UTF-8": (b'{"EventType": "\xff"}', None),
    "text/plain": (event_body("evt-text"), {"Content-Type": "text/plain"}),
}


@pytest.mark.parametrize("case", REQUESTS)
def test_protocol_answers_like_the_asgi_app(
    settled: RunningReceiver, connect: Callable[..., Connection], case: str
) -> None:
    body, headers = REQUESTS[case]
    connection = connect()
    answers = []
    for target in ("/webhooks", "/webhooks?via=asgi"):
        connection.send(request(body, target=target, headers=headers))
        answers.append(connection.answer())
    direct, via_asgi = answers
    assert direct == via_asgi


def test_protocol_answers_pipelined_requests_in_order(
    settled: RunningReceiver, connect: Callable[..., Connection]
) -> None:
    connection = connect()
    burst = [
        request(event_body("evt-p1")),
        request(b"", method="GET", target="/healthz", headers={}),
        request(event_body("evt-p2")),  # behind an answer the ASGI app is still giving
        request(b"{nope"),
        request(b"", method="GET", target="/elsewhere", headers={}),
        request(event_body("evt-p3")),
    ]
    connection.send(b"".join(burst))
    statuses = [connection.answer().split(b" ", 2)[1] for _ in burst]
    assert statuses == [b"200", b"200", b"200", b"400", b"404", b"200"]
    verdicts = settled.wait_for(5)  # /healthz is not reported
    assert [v.event_id for v in verdicts] == ["evt-p1", "evt-p2", None, None, "evt-p3"]


def test_protocol_body_in_pieces_and_chunked_is_reassembled(
    settled: RunningReceiver, connect: Callable[..., Connection]
) -> None:
    connection = connect()
    whole = request(event_body("evt-pieces"))
    for piece in (whole[:40], whole[40:-30], whole[-30:]):
        connection.send(piece)
        time.sleep(0.05)  # the behaviour under test: the body arrives in separate reads
    assert connection.answer().startswith(b"HTTP/1.1 200 ")

    body = event_body("evt-chunked")
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:100], body[100:]))
    head = request(b"", headers={**signed(), "Transfer-Encoding": "chunked"})
    head = head.replace(b"Content-Length: 0\r\n", b"")
    connection.send(head + chunked + b"0\r\n\r\n")
    assert connection.answer().startswith(b"HTTP/1.1 200 ")
    assert [v.event_id for v in settled.wait_for(2)] == ["evt-pieces", "evt-chunked"]


def test_protocol_chunked_body_over_the_limit_is_413_and_closes(
    settled: RunningReceiver, connect: Callable[..., Connection]
) -> None:
    connection = connect()
    head = request(b"", headers={**signed(), "Transfer-Encoding": "chunked"})
    connection.send(head.replace(b"Content-Length: 0\r\n", b""))
    piece = b"a" * 65536
    for _ in range(17):  # 1.06 MiB: the last piece crosses the 1 MiB limit
        connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    try:
        answer = connection.answer()
    except ConnectionError:  # a reset may overtake the answer if a piece was left unread
        answer = None
    if answer is not None:
        assert answer.startswith(b"HTTP/1.1 413 ")
        assert b"connection: close" in answer
        assert connection.closed(timeout=5)
    (verdict,) = settled.wait_for(1)
    assert verdict.reason == "body_too_large"


def test_protocol_http_1_0_and_connection_close_close_after_the_answer(
    settled: RunningReceiver, connect: Callable[..., Connection]
) -> None:
    for options in ({"version": "1.0"}, {"headers": {**signed(), "Connection": "close"}}):
        connection = connect()
        connection.send(request(event_body("evt-close"), **options))
        answer = connection.answer()
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert b"connection: close" in answer
        assert connection.closed(timeout=5)


@pytest.mark.slow
def test_protocol_idle_connection_closes_after_the_keep_alive_time(
    settled: RunningReceiver, connect: Callable[..., Connection]
) -> None:
    connection = connect()
    connection.send(request(event_body("evt-idle-1")))
    connection.answer()
    # Activity before the keep-alive time runs out keeps the connection open.
    assert not connection.closed(timeout=3)
    connection.send(request(event_body("evt-idle-2")))
    assert connection.answer().startswith(b"HTTP/1.1 200 ")
    answered = time.monotonic()
    assert not connection.closed(timeout=KEEP_ALIVE_SECONDS - 1)
    assert connection.closed(timeout=3)
    assert time.monotonic() - answered >= KEEP_ALIVE_SECONDS - 0.5


def test_protocol_stop_answers_the_request_being_read_then_closes(
    connect: Callable[..., Connection],
) -> None:
    running = start_in_thread(ReceiverConfig(port=0, credentials=CREDS))
    connection = connect(running.port)
    whole = request(event_body("evt-during-stop"))
    connection.send(whole[:-20])
    time.sleep(0.1)  # the server reads the partial request before the stop begins
    stopper = threading.Thread(target=running.stop)
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive()  # the graceful stop waits for the request
    connection.send(whole[-20:])
    answer = connection.answer()
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"connection: close" in answer
    stopper.join(10)
    assert not stopper.is_alive()
    assert [v.event_id for v in running.wait_for(1)] == ["evt-during-stop"]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.builds(lambda i: event_body(f"evt-{i}"), st.integers(0, 10**6)),
        st.just(handshake_body()),
    ),
    content_type=st.sampled_from(
        ["application/json", "text/plain", "application/cloud+json", None]
    ),
    signature=st.sampled_from(["now", "forged", "malformed", None]),
)
def test_protocol_and_asgi_app_agree_on_any_request(
    settled: RunningReceiver,
    connect: Callable[..., Connection],
    body: bytes,
    content_type: str | None,
    signature: str | None,
) -> None:
    headers: dict[str, str] = {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if signature == "now":
        headers["Service-Webhook"] = sign_header(CREDS, datetime.now(UTC))
    elif signature == "forged":
        headers["Service-Webhook"] = "Timestamp=2026-01-01T00:00:00.000Z,Signature=AAAA"
    elif signature == "malformed":
        headers["Service-Webhook"] = "what"
    connection = connect()
    connection.send(request(body, headers=headers))
    direct = connection.answer()
    connection.send(request(body, target="/webhooks?via=asgi", headers=headers))
    via_asgi = connection.answer()
    assert direct.split(b"\r\n", 1)[0] == via_asgi.split(b"\r\n", 1)[0]
    if b"too_old" not in direct and b"too_new" not in direct:  # the two may straddle a second
        assert direct == via_asgi
    first, second = settled.wait_for(2)
    assert (first.status, first.reason, first.kind) == (second.status, second.reason, second.kind)
    connection.close()


# The fallback: with uvicorn's internals missing, renamed or raising, every request goes through
# uvicorn and the ASGI app, and a user sees the same answers and lines (issue: a renamed private
# attribute in a uvicorn release once made every signed webhook a 400, so dead-lettered).


def refactor_uvicorn(monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    """Replace uvicorn's httptools protocol by a copy with ``old`` renamed ``new`` throughout, as
    an upstream refactor would; uvicorn's own loader then serves the copy too."""
    from uvicorn.protocols.http import httptools_impl

    source = inspect.getsource(httptools_impl)
    assert old in source
    module = types.ModuleType("refactored_httptools_impl")
    exec(compile(source.replace(old, new), httptools_impl.__file__, "exec"), module.__dict__)
    monkeypatch.setattr(httptools_impl, "HttpToolsProtocol", module.HttpToolsProtocol)


def receive_cli(*args: str, send: Callable[[int], None]) -> tuple[list[dict[str, Any]], str]:
    """Run ``prefctl -v -o json receive`` in this process (so monkeypatches apply), call
    ``send(port)`` once it answers, then stop it; its NDJSON lines and its stderr."""
    port = free_port()
    result: list[CliResult] = []
    flags = ("--client-id", CREDS.client_id, "--signature-user-id", CREDS.signature_user_id)
    command = ["-v", "-o", "json", "receive", "--port", str(port), *flags, *args]
    thread = threading.Thread(target=lambda: result.append(run_cli(*command)))
    thread.start()
    try:
        wait_until(lambda: bool(result) or answers(port), timeout=15)
        assert not result, result[0].stderr
        send(port)
    finally:
        thread.join(30)
    assert result, "prefctl receive did not stop"
    return result[0].ndjson, result[0].stderr


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(request(b"", method="GET", target="/healthz", headers={}))
            return sock.recv(12).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def signed_event_and_handshake(port: int) -> None:
    """On one connection a health check (through the ASGI app), a handshake and a signed event;
    a signed event on another."""
    connection = Connection(port)
    connection.send(request(b"", method="GET", target="/healthz", headers={}))
    assert connection.answer().startswith(b"HTTP/1.1 200 ")
    connection.send(request(handshake_body(), headers={"Content-Type": "application/json"}))
    handshake = connection.answer()
    assert handshake.startswith(b"HTTP/1.1 200 ")
    assert orjson.loads(handshake.split(b"\r\n\r\n", 1)[1]) == {"validationResponse": "code-123"}
    connection.send(request(event_body("evt-fallback-1")))
    assert connection.answer().startswith(b"HTTP/1.1 200 ")
    connection.close()
    connection = Connection(port)
    connection.send(request(event_body("evt-fallback-2")))
    assert connection.answer().startswith(b"HTTP/1.1 200 ")
    connection.close()


def assert_lines_of(lines: list[dict[str, Any]]) -> None:
    requests = [line for line in lines if line.get("type") == "request"]
    assert [(r["kind"], r["status"], r["event_id"]) for r in requests] == [
        ("handshake", 200, handshake_event_id()),
        ("event", 200, "evt-fallback-1"),
        ("event", 200, "evt-fallback-2"),
    ]
    assert [r["signature"] for r in requests[1:]] == ["valid", "valid"]


def handshake_event_id() -> str:
    return str(orjson.loads(handshake_body())["EventId"])


def served_all_the_same(monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the receiver through a handshake and two signed events, check every answer and line,
    and return what it logged."""
    monkeypatch.setenv("PREFCTL_HASHKEY", CREDS.hashkey)
    lines, stderr = receive_cli("--exit-after", "2", send=signed_event_and_handshake)
    assert_lines_of(lines)
    return stderr


def test_protocol_with_uvicorn_outside_the_tested_versions_serves_through_the_asgi_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "__version__", "0.99.0")
    stderr = served_all_the_same(monkeypatch)
    assert "go through the ASGI app (the fallback path): uvicorn 0.99.0 is outside" in stderr
    assert stderr.count("fallback path") == 1


def test_protocol_with_a_private_attribute_renamed_serves_through_the_asgi_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refactor_uvicorn(monkeypatch, "self.limit_concurrency", "self.concurrency_limit")
    stderr = served_all_the_same(monkeypatch)
    assert "(the fallback path): AttributeError" in stderr
    assert "limit_concurrency" in stderr


def test_protocol_when_uvicorns_internals_raise_while_serving_switches_to_the_asgi_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The start-up probe sees no request cycle; the first request after one goes through the
    # ASGI app meets the renamed attribute while being served.
    refactor_uvicorn(monkeypatch, "response_complete", "is_complete")
    stderr = served_all_the_same(monkeypatch)
    assert "answered in uvicorn's protocol (the fast path)" in stderr
    assert "now go through the ASGI app (the fallback path)" in stderr
    assert stderr.count("now go through") == 1


def test_protocol_on_the_tested_uvicorn_uses_the_fast_path() -> None:
    lines, stderr = receive_cli("--no-verify", "--exit-after", "1", send=one_event)
    assert [line["event_id"] for line in lines if line["type"] == "request"] == ["evt-fast"]
    assert "answered in uvicorn's protocol (the fast path)" in stderr
    assert "fallback" not in stderr


def one_event(port: int) -> None:
    connection = Connection(port)
    connection.send(request(event_body("evt-fast")))
    assert connection.answer().startswith(b"HTTP/1.1 200 ")
    connection.close()
