"""A throwaway validationUrl server: notes which handshakes were validated by GET.

A GET within a handshake's window is answered 200 and noted; once the suite gave up waiting
(``expire``), a GET is answered 410, as the service answers a validationUrl after its 5 minutes.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ValidationListener"]


class ValidationListener:
    """Serves the validationUrls of the suite's handshakes on 127.0.0.1 and notes each GET."""

    def __init__(self) -> None:
        self._fetched: dict[str, threading.Event] = {}
        self._expired: set[str] = set()
        self._lock = threading.Lock()
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                token = self.path.rsplit("/", 1)[-1]
                status = (
                    listener._mark(token) if self.path.startswith("/api/v1/validation/") else 404
                )
                body = {
                    200: b'{"validated": true}',
                    410: b'{"error": "the validation window is over"}',
                }.get(status, b'{"error": "unknown validation"}')
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # the suite reports; the listener stays quiet

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.api_url = f"http://127.0.0.1:{self._server.server_address[1]}/api/v1"
        # A short poll keeps shutdown() quick; the listener lives for one run of the suite.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> ValidationListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def expect(self, token: str) -> None:
        with self._lock:
            self._fetched[token] = threading.Event()

    def _mark(self, token: str) -> int:
        """The status of a GET of ``token``'s validationUrl: 200 (noted), 410 or 404."""
        with self._lock:
            event = self._fetched.get(token)
            if event is None:
                return 404
            if token in self._expired:
                return 410
            event.set()
            return 200

    def fetched(self, token: str, timeout: float) -> bool:
        """Whether the validationUrl of ``token`` is fetched within ``timeout`` seconds."""
        return self._fetched[token].wait(timeout)

    def expire(self, token: str) -> bool:
        """End the window of ``token``: later GETs get 410. Whether it was fetched before."""
        with self._lock:
            if self._fetched[token].is_set():
                return True
            self._expired.add(token)
            return False
