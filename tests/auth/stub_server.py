"""A scripted OAuth token service and REST API on loopback, for answers the emulator never gives.

It is a real HTTP(S) server (stdlib ``http.server`` in a thread): it serves
``POST /oauth2/v1/token`` (a freshly minted RS256 token, or the next scripted answer: non-JSON,
an RFC 6749 error...), ``GET /oauth2/v1/keys`` (its JWKS) and ``GET /api/ping`` (200 for a token
it issued and has not revoked, else 401), and records every request.

Any other path under ``/api/`` is the REST API of a real deployment as scripted by the test:
a request with a token the stub did not issue (or revoked, or with ``api_rejects_all``) is a 401;
otherwise the next ``api_answer`` is served (with its headers, after its delay, gzip-encoded, or
cut short by a connection reset), and ``{}`` (200) when none is left. A scripted answer is what
the real world sends: a 429 with ``Retry-After``, a proxy's HTML 502, a redirect, a huge body.
"""

from __future__ import annotations

import gzip
import json
import socket
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.helpers import free_port


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the status line is sent
    gzip: bool = False  # send the body gzip-encoded (Content-Encoding: gzip)
    reset: bool = False  # send the head and half the body, then reset the connection
    drip: float = 0.0  # send the body a byte at a time, this many seconds apart
    padding: int = 0  # spaces sent after the body (counted in Content-Length), 1 MiB at a time


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    form: dict[str, str]
    body: str = ""
    proxied_to: str = ""  # the host of an absolute-form request (the stub used as an HTTP proxy)


@dataclass
class StubTokenService:
    url: str
    key: rsa.RSAPrivateKey
    lifetime: int = 3600
    answers: list[Answer] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    revoked: set[str] = field(default_factory=set)
    api_rejects_all: bool = False
    api_answers: list[Answer] = field(default_factory=list)

    @property
    def token_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/oauth2/v1/token"]

    @property
    def api_requests(self) -> list[Recorded]:
        """Requests to the scripted REST API (every ``/api/`` path but ``/api/ping``)."""
        return [r for r in self.requests if r.path.startswith("/api/") and r.path != "/api/ping"]

    def reset(self) -> None:
        self.lifetime = 3600
        self.answers.clear()
        self.requests.clear()
        self.issued.clear()
        self.revoked.clear()
        self.api_rejects_all = False
        self.api_answers.clear()

    def answer(
        self, status: int, body: Any, content_type: str = "application/json", **options: Any
    ) -> None:
        """Script the next token endpoint answer (``options``: see ``Answer``)."""
        self.answers.append(_answer(status, body, content_type, **options))

    def api_answer(
        self, status: int, body: Any = b"", content_type: str = "application/json", **options: Any
    ) -> None:
        """Script the next REST API answer (``options``: see ``Answer``)."""
        self.api_answers.append(_answer(status, body, content_type, **options))

    def mint(self, *, lifetime: int | None = None, scope: str = "DEMO/admin", **extra: Any) -> str:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": "client",
            "aud": "prefctl-api",
            "scope": scope,
            "scid": scope.split("/")[0],
            "uid": scope.split("/")[-1],
            "iat": now,
            "exp": now + (self.lifetime if lifetime is None else lifetime),
            "jti": uuid.uuid4().hex,
            **extra,
        }
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "stub-1"})
        self.issued.append(token)
        return token

    def jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        public.update({"kid": "stub-1", "use": "sig", "alg": "RS256"})
        return {"keys": [public]}


def _answer(status: int, body: Any, content_type: str, **options: Any) -> Answer:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Answer(status, raw, content_type, **options)


def _handler(service: StubTokenService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _record(self) -> Recorded:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            form = {k: v[0] for k, v in parse_qs(raw).items()}
            proxied_to = ""
            if self.path.startswith("http://"):  # sent to the stub as a proxy: serve it anyway
                parts = urlsplit(self.path)
                proxied_to = parts.netloc
                self.path = parts.path + (f"?{parts.query}" if parts.query else "")
            headers = dict(self.headers.items())
            rec = Recorded(self.command, self.path, headers, form, raw, proxied_to)
            service.requests.append(rec)
            return rec

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self._serve(Answer(status, body, content_type))

        def _serve(self, answer: Answer) -> None:
            if answer.delay:
                time.sleep(answer.delay)  # the behaviour under test: a slow answer
            body = gzip.compress(answer.body) if answer.gzip else answer.body
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(body) + answer.padding))
            if answer.gzip:
                self.send_header("Content-Encoding", "gzip")
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if answer.reset:
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                # SO_LINGER 0: close with a TCP RST, not a FIN.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
                self.close_connection = True
                return
            try:
                if answer.drip:
                    for index in range(len(body)):
                        self.wfile.write(body[index : index + 1])
                        self.wfile.flush()
                        time.sleep(answer.drip)  # the behaviour under test: a drip of bytes
                else:
                    self.wfile.write(body)
                left = answer.padding
                while left > 0:
                    piece = min(left, 1024 * 1024)
                    self.wfile.write(b" " * piece)
                    left -= piece
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                self.close_connection = True

        def _api(self) -> None:
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            ok = token in service.issued and token not in service.revoked
            if not ok or service.api_rejects_all:
                self._send(401, b'{"title": "Unauthorized", "status": 401}', "application/json")
            elif service.api_answers:
                self._serve(service.api_answers.pop(0))
            else:
                self._send(200, b"{}", "application/json")

        def _ping(self) -> None:
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            ok = token in service.issued and token not in service.revoked
            ok = ok and not service.api_rejects_all
            self._send(200 if ok else 401, b"{}", "application/json")

        def do_POST(self) -> None:
            rec = self._record()
            if self.path == "/api/ping":
                self._ping()
                return
            if self.path.startswith("/api/"):
                self._api()
                return
            if self.path != "/oauth2/v1/token":
                self._send(404, b"not found", "text/plain")
                return
            if service.answers:
                self._serve(service.answers.pop(0))
                return
            scope = rec.form.get("scope", "")
            body = {
                "access_token": service.mint(scope=scope),
                "token_type": "Bearer",
                "scope": scope,
                "expires_in": service.lifetime,
            }
            self._send(200, json.dumps(body).encode(), "application/json")

        def do_PUT(self) -> None:
            self._record()
            if self.path.startswith("/api/"):
                self._api()
            else:
                self._send(404, b"not found", "text/plain")

        do_PATCH = do_PUT
        do_DELETE = do_PUT

        def do_GET(self) -> None:
            self._record()
            if self.path == "/oauth2/v1/keys":
                self._send(200, json.dumps(service.jwks()).encode(), "application/json")
            elif self.path == "/api/ping":
                self._ping()
            elif self.path.startswith("/api/"):
                self._api()
            else:
                self._send(404, b"not found", "text/plain")

    return Handler


@contextmanager
def running_stub(tls: tuple[Path, Path] | None = None) -> Iterator[StubTokenService]:
    """A stub token service on 127.0.0.1 (HTTPS with ``tls=(cert, key)``) for the block."""
    port = free_port()
    scheme = "https" if tls else "http"
    service = StubTokenService(
        url=f"{scheme}://127.0.0.1:{port}",
        key=rsa.generate_private_key(public_exponent=65537, key_size=2048),
    )
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(service))
    if tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
