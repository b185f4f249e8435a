"""What a hostile client can hold in the receiver and the emulator (``prefctl.servers.connections``).

Each test runs the attack against a real server on 127.0.0.1 — a socket that sends nothing, a
header dripped a byte at a time, a body that never completes, a huge header, more idle
connections than the server may keep — and shows the bound: the connection answered 408 or 431
and closed within its deadline, and a fresh client still answered.
"""

from __future__ import annotations

import json
import resource
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from prefctl.emulator.serve import EmulatorConfig, RunningEmulator
from prefctl.emulator.serve import start_in_thread as start_emulator
from prefctl.receiver import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.servers.connections import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_BYTES,
    ConnectionLimits,
    ConnectionRegistry,
)
from prefctl.servers.server import exposure
from prefctl.webhooks.signature import sign_header
from tests.helpers import run_cli, wait_until
from tests.receiver.asgi import CREDS, event_body

TIMEOUT = 0.5  # the deadlines of the servers under attack, seconds
LIMITS = ConnectionLimits(header_timeout=TIMEOUT, body_timeout=TIMEOUT, max_header_bytes=8192)
BOUND = TIMEOUT + 2.5  # a deadline holds within a quarter of it; the rest is a busy machine


@pytest.fixture(scope="module")
def receiver() -> Iterator[RunningReceiver]:
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS, limits=LIMITS)) as running:
        yield running


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    data_dir = tmp_path_factory.mktemp("emulator")
    running = start_emulator(EmulatorConfig(port=0, data_dir=data_dir, limits=LIMITS))
    yield running
    running.stop()


# Each server, with a POST target whose body it reads: the receiver's webhook path (answered in
# its protocol), the same through its ASGI app, and the emulator's token endpoint.
TARGETS = ["receiver", "receiver-asgi", "emulator"]


@pytest.fixture(params=TARGETS)
def target(
    request: pytest.FixtureRequest,
) -> tuple[int, str]:
    if request.param == "emulator":
        running: RunningEmulator = request.getfixturevalue("emulator")
        return int(running.url.rsplit(":", 1)[1]), running.token_url.split(running.url, 1)[1]
    receiver: RunningReceiver = request.getfixturevalue("receiver")
    return receiver.port, "/webhooks" if request.param == "receiver" else "/webhooks?via=asgi"


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def until_closed(sock: socket.socket, within: float) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and after how many seconds."""
    start = time.monotonic()
    received = b""
    while time.monotonic() - start < within:
        sock.settimeout(max(within - (time.monotonic() - start), 0.01))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return received, time.monotonic() - start
        if not chunk:
            return received, time.monotonic() - start
        received += chunk
    raise AssertionError(f"still open after {within} s; received {received[:200]!r}")


def head(target: str, length: int, extra: str = "") -> bytes:
    stamp = sign_header(CREDS, datetime.now(UTC))
    return (
        f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Service-Webhook: {stamp}\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()


def signed_post(port: int, event_id: str) -> bytes:
    body = event_body(event_id)
    with connect(port) as sock:
        sock.sendall(head("/webhooks", len(body), "Connection: close\r\n") + body)
        answer, _ = until_closed(sock, 10)
    return answer


def test_server_idle_socket_is_closed_at_the_header_deadline(target: tuple[int, str]) -> None:
    port, _ = target
    with connect(port) as sock:
        answer, after = until_closed(sock, BOUND)
    assert answer == b""  # nothing was asked: nothing to answer
    assert after >= TIMEOUT - 0.1


def test_server_header_dripped_a_byte_at_a_time_is_408_at_the_deadline(
    target: tuple[int, str],
) -> None:
    port, path = target
    request = head(path, 10)
    with connect(port) as sock:
        start = time.monotonic()
        for byte in request:  # one byte every 50 ms, until the server gives up on it
            sock.sendall(bytes([byte]))
            if select.select([sock], [], [], 0.05)[0]:
                break
        answer, _ = until_closed(sock, BOUND)
        after = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert TIMEOUT - 0.1 <= after <= BOUND


def test_server_body_that_never_completes_is_408_at_the_deadline(
    target: tuple[int, str],
) -> None:
    port, path = target
    with connect(port) as sock:
        sock.sendall(head(path, 100) + b'{"EventType": ')
        answer, after = until_closed(sock, BOUND)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert after >= TIMEOUT - 0.1


def test_server_body_arriving_in_time_is_answered(receiver: RunningReceiver) -> None:
    body = event_body("evt-slow-but-steady")
    with connect(receiver.port) as sock:
        sock.sendall(head("/webhooks", len(body), "Connection: close\r\n"))
        for start in range(0, len(body), 40):  # each piece well within the body deadline
            select.select([sock], [], [], TIMEOUT / 4)
            sock.sendall(body[start : start + 40])
        answer, _ = until_closed(sock, 10)
    assert answer.startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("arrival", ["in pieces", "whole"])
def test_server_header_over_the_limit_is_431_and_closed(
    target: tuple[int, str], arrival: str
) -> None:
    port, path = target
    padding = f"X-Padding: {'a' * 4000}\r\n"
    if arrival == "whole":  # 12 KB in one write: the parser sees all of it at once
        request = head(path, 2, padding * 3) + b"{}"
        with connect(port) as sock:
            sock.sendall(request)
            answer, _ = until_closed(sock, BOUND)
    else:  # 64 MB would be sent if the server kept reading; it stops at the limit
        with connect(port) as sock:
            sock.sendall(head(path, 2)[:-2])
            sent = 0
            try:
                while sent < 64 << 20:
                    sock.sendall(padding.encode())
                    sent += len(padding)
            except (BrokenPipeError, ConnectionResetError):
                pass
            answer, _ = until_closed(sock, BOUND)
            assert sent < 4 << 20
    assert answer.startswith(b"HTTP/1.1 431 ") or answer == b""  # a reset can overtake it


def test_server_header_under_the_limit_is_served(receiver: RunningReceiver) -> None:
    padding = f"X-Padding: {'a' * 6000}\r\n"
    body = event_body("evt-big-header")
    with connect(receiver.port) as sock:
        sock.sendall(head("/webhooks", len(body), padding + "Connection: close\r\n") + body)
        answer, _ = until_closed(sock, 10)
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_receiver_at_the_connection_ceiling_closes_the_longest_idle_for_a_new_client() -> None:
    limits = ConnectionLimits(header_timeout=60, body_timeout=60, max_connections=16)
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS, limits=limits)) as running:
        idle = [connect(running.port) for _ in range(16)]
        try:
            answer = signed_post(running.port, "evt-at-the-ceiling")
            assert answer.startswith(b"HTTP/1.1 200 ")
            assert until_closed(idle[0], 5)[0] == b""  # the oldest made room
        finally:
            for sock in idle:
                sock.close()


def test_receiver_at_the_ceiling_with_every_connection_busy_answers_503() -> None:
    limits = ConnectionLimits(header_timeout=60, body_timeout=60, max_connections=8)
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS, limits=limits)) as running:
        connections = running._receiver.connections
        busy: list[socket.socket] = []
        try:
            for count in range(1, 9):  # each in the middle of a body: none is idle
                busy.append(connect(running.port))
                busy[-1].sendall(head("/webhooks", 100) + b"{")
                # Wait until the server has read it (its own count), so that none still waits
                # for a header and could be closed to make room.
                read = count
                wait_until(
                    lambda: len(connections.open) == read and not connections.heads,  # noqa: B023
                    what=f"connection {count} not read",
                )
            with connect(running.port) as fresh:
                answer, _ = until_closed(fresh, 10)
            assert answer.startswith(b"HTTP/1.1 503 ")
            busy[0].close()
            busy.pop(0)
            start = time.monotonic()
            while time.monotonic() - start < 10:  # once one leaves, a new client is served
                answer = signed_post(running.port, "evt-after-one-left")
                if answer.startswith(b"HTTP/1.1 200 "):
                    break
            assert answer.startswith(b"HTTP/1.1 200 ")
        finally:
            for sock in busy:
                sock.close()


def test_receive_with_few_open_files_answers_past_a_thousand_idle_sockets(
    tmp_path: Path,
) -> None:
    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    process = subprocess.Popen(
        [sys.executable, "-m", "prefctl", "-o", "json", "receive", "--port", "0", "--no-verify"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=few_files,
    )
    idle: list[socket.socket] = []
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        port = int(ready["url"].rsplit(":", 1)[1].split("/")[0])
        idle = [connect(port) for _ in range(1000)]  # more than the server's 256 files
        # A client that lands in the burst of idle ones while they register is told to try again
        # (503, as the dispatcher retries it); once the burst is in, idle ones make room for it.
        answers = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            answers.append(signed_post(port, "evt-past-the-idle"))
            if not answers[-1].startswith(b"HTTP/1.1 503 "):
                break
        assert answers[-1].startswith(b"HTTP/1.1 200 "), answers[-1]
        assert all(a.startswith(b"HTTP/1.1 503 ") for a in answers[:-1])
        line = json.loads(process.stdout.readline())
        assert line["event_id"] == "evt-past-the-idle"
    finally:
        for sock in idle:
            sock.close()
        process.terminate()
        process.communicate(timeout=30)
    assert process.returncode == 0


def test_registry_keeps_files_for_the_server_below_the_open_files_limit() -> None:
    assert ConnectionRegistry(ConnectionLimits(), open_files=512).ceiling == 384
    assert ConnectionRegistry(ConnectionLimits(), open_files=1 << 20).ceiling == 8192
    small = ConnectionLimits(max_connections=10)
    assert ConnectionRegistry(small, open_files=1 << 20).ceiling == 10


def test_server_options_document_the_library_defaults() -> None:
    from prefctl.cli import _server_options as options

    assert options.DEFAULT_HEADER_TIMEOUT == DEFAULT_HEADER_TIMEOUT
    assert options.DEFAULT_BODY_TIMEOUT == DEFAULT_BODY_TIMEOUT
    assert options.DEFAULT_MAX_HEADER_BYTES == DEFAULT_MAX_HEADER_BYTES
    assert options.DEFAULT_MAX_CONNECTIONS == DEFAULT_MAX_CONNECTIONS


@pytest.mark.parametrize(
    ("host", "warned"),
    [("127.0.0.1", False), ("::1", False), ("localhost", False), ("0.0.0.0", True), ("::", True)],
)
def test_exposure_warns_for_every_host_but_loopback(host: str, warned: bool) -> None:
    assert (exposure(host) is not None) is warned


def test_receive_on_every_interface_warns_on_stderr() -> None:
    result = run_cli(
        "receive", "--host", "0.0.0.0", "--port", "0", "--no-verify", "--timeout", "0.2"
    )
    assert "--host 0.0.0.0 is not a loopback address" in result.stderr


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--header-timeout", "0"), ("--body-timeout", "nan"), ("--max-header-bytes", "10")],
)
def test_receive_limits_out_of_range_are_usage_errors(flag: str, value: str) -> None:
    result = run_cli("receive", "--port", "0", "--no-verify", flag, value)
    assert result.exit_code == 2
    assert flag in result.stderr


def _answers(running: RunningEmulator) -> list[tuple[int, str, object]]:
    """What a client sees of a few requests: status, media type, body."""
    import httpx

    with httpx.Client(base_url=running.url, timeout=10) as client:
        answers = [
            client.get("/healthz"),
            client.post(running.token_url, data={"grant_type": "client_credentials"}),
            client.get("/api/v1/NOBODY/profiles"),
            client.get("/healthz", headers={"X-Padding": "a" * 6000}),
        ]
    seen = []
    for answer in answers:
        body = answer.json()
        for volatile in ("pid", "version", "auth_url", "api_url"):
            body.pop(volatile, None)
        seen.append((answer.status_code, answer.headers["content-type"], body))
    return seen


def _broken_copy() -> type:
    """uvicorn's httptools protocol with a parser callback gone (as if renamed)."""
    from prefctl.servers.seams import httptools_protocol

    base = httptools_protocol()
    assert base is not None
    return type(base.__name__, (base,), {"on_headers_complete": None})


@pytest.mark.parametrize("broken", ["uvicorn out of range", "a callback renamed"])
def test_emulator_without_the_guard_internals_answers_the_same_and_warns_what_is_lost(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    emulator: RunningEmulator,
    broken: str,
) -> None:
    from prefctl.servers import seams

    guarded = _answers(emulator)
    if broken == "uvicorn out of range":
        monkeypatch.setattr(seams, "TESTED_UVICORN", ((0, 1), (0, 2)))
        reason = "is outside the tested"
    else:
        copy = _broken_copy()
        monkeypatch.setattr(seams, "httptools_protocol", lambda: copy)
        reason = "on_headers_complete is missing"

    fallback = start_emulator(EmulatorConfig(port=0, data_dir=tmp_path / "data", limits=LIMITS))
    try:
        answers = _answers(fallback)
        # What is lost: a header over the limit is no longer refused with 431.
        over_the_limit = _with_a_header_over_the_limit(fallback)
    finally:
        fallback.stop()

    assert answers == guarded
    warning = next(r for r in caplog.records if r.name == "prefctl.servers")
    assert warning.levelname == "WARNING"
    assert "header and body deadlines and the header-size limit are off" in warning.getMessage()
    assert reason in warning.getMessage()
    guarded_answer = _with_a_header_over_the_limit(emulator)
    assert guarded_answer.startswith(b"HTTP/1.1 431 ") or guarded_answer == b""  # or a reset
    assert over_the_limit.startswith(b"HTTP/1.1 200 ")  # served: the limit is off


def _with_a_header_over_the_limit(running: RunningEmulator) -> bytes:
    with connect(int(running.url.rsplit(":", 1)[1])) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            + f"X-Padding: {'a' * 12000}\r\n\r\n".encode()
        )
        answer, _ = until_closed(sock, 10)
    return answer
