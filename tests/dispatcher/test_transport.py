"""The HTTP seam: ``CurlTransport`` against real servers on loopback, and the model transport."""

from __future__ import annotations

import asyncio
import http.server
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from prefctl.dispatcher.curl import CurlTransport
from prefctl.dispatcher.transport import FunctionTransport, Reply, Request, Response
from tests.helpers import free_port


class _Handler(http.server.BaseHTTPRequestHandler):
    """200 with a body of ``?size=N`` bytes; ``/hang`` answers after 5 s."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.startswith("/hang"):
            time.sleep(5)  # the behaviour under test: an endpoint that does not answer
        size = int(self.path.partition("size=")[2] or 0)
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        self.wfile.write(b"x" * size)

    def log_message(self, *args: Any) -> None:
        return None


class _Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # the default 5 drops connections in a burst (SYN retried after 1 s)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = _Server(("127.0.0.1", free_port()), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _run(
    transport: CurlTransport, requests: list[Request], want: int, timeout: float = 10.0
) -> list[Response]:
    async def main() -> list[Response]:
        transport.send(requests)
        got: list[Response] = []
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            got += transport.take()
        await transport.aclose()
        return got

    return asyncio.run(main())


def _request(key: int, url: str, keep_open: float = 10.0, timeout: float = 5.0) -> Request:
    body = b'{"EventId": "x"}'
    return Request(key, url, body, "Timestamp=t,Signature=s", min(timeout, keep_open), keep_open)


def test_curl_transport_reports_each_answer_with_its_time(server: str) -> None:
    requests = [_request(n, f"{server}/in") for n in range(20)]
    answers = _run(CurlTransport(), requests, 20)
    assert sorted(a.key for a in answers) == list(range(20))
    assert {(a.status, a.error) for a in answers} == {(200, None)}
    assert all(0 < a.elapsed < 5 for a in answers)


def test_curl_transport_reads_a_large_body_only_up_to_the_cap(server: str) -> None:
    [answer] = _run(CurlTransport(max_body_bytes=1024), [_request(1, f"{server}/?size=200000")], 1)
    assert (answer.status, answer.error) == (200, None)


def test_curl_transport_gives_up_after_keep_open(server: str) -> None:
    [answer] = _run(CurlTransport(), [_request(1, f"{server}/hang", keep_open=0.3)], 1)
    assert answer.status is None
    assert answer.error
    assert 0.25 < answer.elapsed < 2


def test_curl_transport_a_hanging_host_does_not_hold_up_another(server: str) -> None:
    other = f"http://localhost:{server.rsplit(':', 1)[1]}"  # same server, another host name
    hanging = [_request(n, f"{server}/hang", keep_open=3) for n in range(8)]
    quick = [_request(100 + n, f"{other}/in") for n in range(5)]
    started = time.monotonic()
    answers = _run(CurlTransport(per_host=4), hanging + quick, 5)
    assert sorted(a.key for a in answers) == [100, 101, 102, 103, 104]
    assert time.monotonic() - started < 2.5


def test_curl_transport_gives_up_requests_that_found_no_connection_in_time(server: str) -> None:
    # One connection to the host, held by a hanging request: the others cannot start within
    # their 0.3 s timeout and are answered unsent (the hanging one stays open for its answer).
    requests = [_request(n, f"{server}/hang", keep_open=3, timeout=0.3) for n in range(3)]
    answers = _run(CurlTransport(per_host=1), requests, 2, timeout=2)
    assert sorted(a.key for a in answers) == [1, 2]
    assert all(a.status is None and "not sent" in (a.error or "") for a in answers)


def test_curl_transport_cancelled_requests_report_nothing(server: str) -> None:
    async def main() -> list[Response]:
        transport = CurlTransport(per_host=1)
        transport.send([_request(n, f"{server}/hang", keep_open=3) for n in range(3)])
        transport.cancel([0, 2])  # 0 is on the wire, 2 still waits its turn
        await asyncio.sleep(0.1)  # 0 is sent, 2 waits: the states the cancels are tested in
        transport.cancel([1])
        await asyncio.sleep(0.2)  # a window for an answer that must not come
        answers = transport.take()
        await transport.aclose()
        return answers

    assert asyncio.run(main()) == []


def test_curl_transport_refuses_other_schemes() -> None:
    [answer] = _run(CurlTransport(), [_request(1, "file:///etc/passwd")], 1)
    assert answer.status is None
    assert answer.error


def test_function_transport_answers_from_the_model_and_drops_silences() -> None:
    def answer(request: Request) -> Reply:
        return Reply(503, elapsed=0.5) if request.key == 1 else Reply(elapsed=math.inf)

    transport = FunctionTransport(answer)
    transport.send([_request(1, "https://a.example/"), _request(2, "https://a.example/")])
    assert transport.take() == [Response(1, 503, None, 0.5)]
    assert [r.key for r in transport.sent] == [1, 2]
    assert transport.take() == []
