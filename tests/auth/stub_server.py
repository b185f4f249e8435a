"""A scripted OAuth token service on loopback, for answers the emulator never gives.

It is a real HTTP(S) server (stdlib ``http.server`` in a thread): it serves
``POST /oauth2/v1/token`` (a freshly minted RS256 token, or the next scripted answer: non-JSON,
an RFC 6749 error...), ``GET /oauth2/v1/keys`` (its JWKS) and ``GET /api/ping`` (200 for a token
it issued and has not revoked, else 401), and records every request.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.helpers import free_port


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    form: dict[str, str]


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

    @property
    def token_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/oauth2/v1/token"]

    def reset(self) -> None:
        self.lifetime = 3600
        self.answers.clear()
        self.requests.clear()
        self.issued.clear()
        self.revoked.clear()
        self.api_rejects_all = False

    def answer(self, status: int, body: Any, content_type: str = "application/json") -> None:
        """Script the next token endpoint answer."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers.append(Answer(status, raw, content_type))

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


def _handler(service: StubTokenService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _record(self) -> Recorded:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            form = {k: v[0] for k, v in parse_qs(raw).items()}
            rec = Recorded(self.command, self.path, dict(self.headers.items()), form)
            service.requests.append(rec)
            return rec

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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
            if self.path != "/oauth2/v1/token":
                self._send(404, b"not found", "text/plain")
                return
            if service.answers:
                answer = service.answers.pop(0)
                self._send(answer.status, answer.body, answer.content_type)
                return
            scope = rec.form.get("scope", "")
            body = {
                "access_token": service.mint(scope=scope),
                "token_type": "Bearer",
                "scope": scope,
                "expires_in": service.lifetime,
            }
            self._send(200, json.dumps(body).encode(), "application/json")

        def do_GET(self) -> None:
            self._record()
            if self.path == "/oauth2/v1/keys":
                self._send(200, json.dumps(service.jwks()).encode(), "application/json")
            elif self.path == "/api/ping":
                self._ping()
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
