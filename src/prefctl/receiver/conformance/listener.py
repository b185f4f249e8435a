"""A throwaway validationUrl server: notes which handshakes were validated by GET."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ValidationListener"]


class ValidationListener:
    """Serves the validationUrls of the suite's handshakes on 127.0.0.1 and notes each GET."""

    def __init__(self) -> None:
        self._fetched: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                token = self.path.rsplit("/", 1)[-1]
                found = self.path.startswith("/api/v1/validation/") and listener._mark(token)
                body = b'{"validated": true}' if found else b'{"error": "unknown validation"}'
                self.send_response(200 if found else 404)
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

    def _mark(self, token: str) -> bool:
        with self._lock:
            event = self._fetched.get(token)
        if event is None:
            return False
        event.set()
        return True

    def fetched(self, token: str, timeout: float) -> bool:
        """Whether the validationUrl of ``token`` is fetched within ``timeout`` seconds."""
        return self._fetched[token].wait(timeout)
