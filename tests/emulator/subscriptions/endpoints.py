"""Webhook endpoints for the handshake tests: the real receiver, and a stub that misbehaves.

``Receiver`` wraps ``prefctl.receiver.serve.RunningReceiver`` (sync or manual validation) and picks
out the verdicts of one subscription. ``StubEndpoint`` is a plain HTTP server for the answers the
receiver never gives to a handshake: 202, a wrong code, no answer at all.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prefctl.receiver.serve import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.receiver.verdict import Verdict


class Receiver:
    """A real ``prefctl receive`` on a free port; ``handshakes(id)`` waits for that subscription's."""

    def __init__(self, *, manual: bool = False) -> None:
        self.running: RunningReceiver = start_in_thread(
            ReceiverConfig(port=0, verify=False, manual_validation=manual)
        )
        self.url = self.running.webhook_url
        self._seen: list[Verdict] = []

    def handshakes(
        self, subscription_id: int, count: int = 1, timeout: float = 10.0
    ) -> list[Verdict]:
        deadline = time.monotonic() + timeout
        while True:
            mine = [
                v
                for v in self._seen
                if v.subscription_id == subscription_id and v.kind == "handshake"
            ]
            if len(mine) >= count:
                return mine
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{len(mine)} of {count} handshakes within {timeout} s")
            try:
                self._seen.append(self.running.verdicts.get(timeout=remaining))
            except queue.Empty:
                continue

    def stop(self) -> None:
        self.running.stop()


class StubEndpoint:
    """An HTTP endpoint answering every POST the same way: ``status`` with ``body``, with the
    handshake's own code (``echo``), or never (``hang``: the request stays open until the stub
    stops). ``requests`` and ``headers`` keep what arrived."""

    def __init__(
        self, status: int = 200, body: bytes = b"", *, hang: bool = False, echo: bool = False
    ) -> None:
        self.status, self.body, self.hang, self.echo = status, body, hang, echo
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._release = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                message = json.loads(self.rfile.read(length) or b"null")
                stub.requests.append(message)
                stub.headers.append(dict(self.headers))
                if stub.hang:
                    stub._release.wait(10)
                    return
                body = stub.body
                if stub.echo:
                    code = message["data"]["validationCode"]
                    body = json.dumps({"validationResponse": code}).encode()
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )
        self._thread.start()

    def answer(self, status: int) -> None:
        """From now on answer ``status``; a request left hanging is released (closed unanswered)."""
        self.status, self.hang = status, False
        self._release.set()

    def stop(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@contextmanager
def stub_endpoint(
    status: int = 200, body: bytes = b"", *, hang: bool = False, echo: bool = False
) -> Iterator[StubEndpoint]:
    stub = StubEndpoint(status, body, hang=hang, echo=echo)
    try:
        yield stub
    finally:
        stub.stop()
