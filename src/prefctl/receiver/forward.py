"""The receiver's ``--forward-to``: authentic events passed on to the user's own handler.

``Forwarder`` passes an authentic event (its body and headers, unchanged) to the user's own handler
and **mirrors the handler's answer** (status, body, content type) back to the service, so that a
handler that fails makes the service retry exactly as it would in production. A handler that cannot
be reached is answered 502, one that does not answer within ``timeout`` (default 25 s, inside the
service's 30 s budget) 504; both are failed attempts for the service.

httpx is imported only when forwarding is used; it runs on the server's event loop.
(``--auto-validate``, the receiver's other outgoing HTTP, is ``receiver.validation``.)
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prefctl.receiver.verdict import ForwardResult

if TYPE_CHECKING:
    import httpx

__all__ = ["ForwardAnswer", "Forwarder"]

FORWARD_BODY_SHOWN = 200
ANSWER_BODY_LIMIT = 64 * 1024
# Connection-level headers describe one hop and are not passed on.
_HOP_HEADERS = frozenset(
    {b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te"}
    | {b"upgrade", b"proxy-connection", b"expect"}
)


class ForwardAnswer:
    """What the receiver answers after forwarding, and what it shows."""

    __slots__ = ("body", "content_type", "result", "status")

    def __init__(
        self, status: int, body: bytes, content_type: bytes | None, result: ForwardResult
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.result = result


class Forwarder:
    """POSTs authentic events to the user's handler and returns its answer."""

    def __init__(self, url: str, *, timeout: float = 25.0) -> None:
        self.url = url
        self.timeout = timeout
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        import httpx

        from prefctl.auth.http_policy import is_loopback

        # A handler on this machine is reached directly, whatever proxy the environment sets.
        self._client = httpx.AsyncClient(
            timeout=self.timeout, follow_redirects=False, trust_env=not is_loopback(self.url)
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def forward(self, headers: list[tuple[bytes, bytes]], body: bytes) -> ForwardAnswer:
        import httpx

        assert self._client is not None, "Forwarder.start() was not awaited"
        passed = [(name, value) for name, value in headers if name not in _HOP_HEADERS]
        started = time.perf_counter()
        try:
            response = await self._client.post(self.url, content=body, headers=passed)
        except httpx.TimeoutException:
            return self._failed(504, started, f"no answer within {self.timeout:g} s")
        except httpx.TransportError as exc:
            from prefctl.auth.token_client import cannot_reach

            return self._failed(502, started, cannot_reach(self.url, exc))
        except httpx.HTTPError:  # an answer that cannot be read (a broken gzip)
            return self._failed(502, started, "answered in a form that cannot be read")
        if not 200 <= response.status_code <= 599:
            return self._failed(502, started, f"answered an unusable status {response.status_code}")
        latency = _ms_since(started)
        content = response.content
        shown = content[:FORWARD_BODY_SHOWN].decode("utf-8", errors="replace")
        result = ForwardResult(status=response.status_code, latency_ms=latency, body=shown)
        content_type = response.headers.get("content-type")
        return ForwardAnswer(
            response.status_code,
            content[:ANSWER_BODY_LIMIT],
            content_type.encode("latin-1") if content_type else None,
            result,
        )

    @staticmethod
    def _failed(status: int, started: float, error: str) -> ForwardAnswer:
        result = ForwardResult(status=None, latency_ms=_ms_since(started), error=error)
        return ForwardAnswer(status, b"", None, result)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 1)
