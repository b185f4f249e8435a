"""``--auto-validate``: the receiver GETs a handshake's validationUrl itself, within limits.

Handshakes carry no signature (the spec's rule), so whoever can reach the receiver chooses the URL.
``AutoValidator`` therefore fetches a URL only when

- it is ``http``/``https`` without user info, on a **trusted host** (``TrustedHosts``: by default
  the hosts of the profile's ``api_url`` and ``auth_url``, with their ports, plus each
  ``--validation-host HOST[:PORT]``); and
- fewer than ``max_in_progress`` validations are under way: the rest are answered all the same and
  reported, never queued.

``schedule(url)`` decides at once and returns why a URL is not fetched (``Skipped``), or None.
The GETs run on the validator's own thread and event loop, never on the loop that answers
requests: 1 s after the answer (so that the service has recorded it first), up to 3 tries 2 s
apart, each within ``timeout`` seconds in all (a server that drips its answer included); the body
is never read. The outcome is pushed as a ``validation`` verdict, back on the server's loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from prefctl.clock import Clock
from prefctl.receiver.verdict import Kind, Verdict

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_MAX_IN_PROGRESS",
    "DEFAULT_TIMEOUT_SECONDS",
    "AutoValidator",
    "Skipped",
    "TrustedHosts",
]

DEFAULT_MAX_IN_PROGRESS = 16
DEFAULT_TIMEOUT_SECONDS = 5.0
_STOP_SECONDS = 5.0
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Skipped:
    """Why a validationUrl was not fetched: a short ``reason`` code and a sentence."""

    reason: str  # untrusted_host, not_http, too_many_validations
    detail: str


class TrustedHosts:
    """The hosts whose validationUrls ``--auto-validate`` fetches.

    An entry is ``host`` (any port) or ``host:port`` (IPv6 in brackets); ``of_url`` makes the
    entry of a service URL (its host and its port, explicit or the scheme's).
    """

    def __init__(self, entries: Iterable[str]) -> None:
        self._any_port: set[str] = set()
        self._exact: set[tuple[str, int]] = set()
        shown: list[str] = []
        for entry in entries:
            host, port = _split_entry(entry)
            if port is None:
                self._any_port.add(host)
            else:
                self._exact.add((host, port))
            shown.append(entry)
        self.entries = tuple(dict.fromkeys(shown))

    @staticmethod
    def of_url(url: str) -> str | None:
        """The ``host:port`` entry of ``url`` (None when it names no host)."""
        parts = urlsplit(url)
        host = parts.hostname
        if not host:
            return None
        try:
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
        except ValueError:
            return None
        shown = f"[{host}]" if ":" in host else host
        return f"{shown}:{port}" if port else shown

    @staticmethod
    def check_entry(entry: str) -> str | None:
        """Why ``entry`` is not a ``HOST`` or ``HOST:PORT`` (None when it is one)."""
        try:
            _split_entry(entry)
        except ValueError as exc:
            return str(exc)
        return None

    def __bool__(self) -> bool:
        return bool(self._any_port or self._exact)

    def allows(self, host: str, port: int) -> bool:
        host = _normal_host(host)
        return host in self._any_port or (host, port) in self._exact


def _normal_host(host: str) -> str:
    return host.lower().rstrip(".").strip("[]")


def _split_entry(entry: str) -> tuple[str, int | None]:
    text = entry.strip()
    problem = f"'{entry}' is not HOST or HOST:PORT"
    if not text or any(c in text for c in "/@?#\\ ") or "://" in text:
        raise ValueError(problem)
    try:
        parts = urlsplit("//" + text)
        port = parts.port
    except ValueError:
        raise ValueError(problem) from None
    if not parts.hostname:
        raise ValueError(problem)
    return _normal_host(parts.hostname), port


class AutoValidator:
    """GETs trusted validationUrls on its own thread; see the module docstring."""

    def __init__(
        self,
        push: Callable[[Verdict], None],
        clock: Clock,
        trusted: TrustedHosts,
        *,
        pause: float = 1.0,
        attempts: int = 3,
        retry_delay: float = 2.0,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_in_progress: int = DEFAULT_MAX_IN_PROGRESS,
    ) -> None:
        self._push = push
        self._clock = clock
        self.trusted = trusted
        self.pause = pause
        self.attempts = attempts
        self.retry_delay = retry_delay
        self.timeout = timeout
        self.max_in_progress = max_in_progress
        self.in_progress = 0  # read and written on the server's loop only
        self._server_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._client: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # on the validator's loop only
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        import httpx  # noqa: F401  (loaded here, not on the first handshake)

        self._server_loop = asyncio.get_running_loop()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._work(ready)), name="prefctl-validator", daemon=True
        )
        self._thread.start()
        ready.wait(_STOP_SECONDS)

    async def close(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # its loop already ended
                pass
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, _STOP_SECONDS)

    def schedule(self, url: str) -> Skipped | None:
        """Validate ``url`` soon, off the answering path; or why it is not fetched."""
        import httpx

        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError):
            return Skipped("not_http", "it is not a URL")
        if parsed.scheme not in _DEFAULT_PORTS or parsed.userinfo or not parsed.host:
            return Skipped("not_http", "only http(s) URLs with a host and no user name are")
        port = parsed.port or _DEFAULT_PORTS[parsed.scheme]
        host = parsed.host
        if not self.trusted.allows(host, port):
            shown = f"[{host}]" if ":" in host else host
            return Skipped(
                "untrusted_host",
                f"host {shown[:80]}:{port} is not trusted (add it with --validation-host)",
            )
        loop = self._loop
        if self.in_progress >= self.max_in_progress or loop is None:
            return Skipped(
                "too_many_validations",
                f"{self.max_in_progress} validations are already in progress",
            )
        self.in_progress += 1
        try:
            loop.call_soon_threadsafe(self._begin, url, parsed)
        except RuntimeError:  # the validator is stopping
            self.in_progress -= 1
            return Skipped("too_many_validations", "the receiver is stopping")
        return None

    # On the validator's thread.

    async def _work(self, ready: threading.Event) -> None:
        import httpx

        from prefctl.auth.http_policy import LOOPBACK_DIRECT

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # validationUrls of the emulator (this machine) go direct, a real service's by any proxy.
        async with httpx.AsyncClient(
            timeout=self.timeout, follow_redirects=False, mounts=LOOPBACK_DIRECT
        ) as client:
            self._client = client
            ready.set()
            await self._stop.wait()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    def _begin(self, url: str, parsed: httpx.URL) -> None:
        task = asyncio.get_running_loop().create_task(self._validate(url, parsed))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _validate(self, url: str, parsed: httpx.URL) -> None:
        import httpx

        client = self._client
        assert client is not None
        await self._clock.sleep(self.pause)
        status: int | None = None
        detail = ""
        for attempt in range(1, self.attempts + 1):
            try:
                # One deadline for the whole GET: httpx's own applies to each read, so a server
                # that drips its answer a byte at a time would outlast it.
                async with asyncio.timeout(self.timeout), client.stream("GET", parsed) as response:
                    status = response.status_code  # the body is never read
            except TimeoutError:
                status, detail = None, f"no answer within {self.timeout:g} s"
            except httpx.HTTPError as exc:
                status, detail = None, f"{type(exc).__name__}: {exc}".rstrip(": ")
            else:
                if 200 <= status < 300:
                    detail = "validated"
                    break
                detail = f"answered {status}"
            if attempt < self.attempts:
                await self._clock.sleep(self.retry_delay)
        verdict = Verdict(
            time=self._clock.now(),
            kind=Kind.VALIDATION,
            status=status,
            method="GET",
            path=url,
            validation_url=url,
            detail=detail,
        )
        server_loop = self._server_loop
        assert server_loop is not None
        try:
            server_loop.call_soon_threadsafe(self._finished, verdict)
        except RuntimeError:  # the server's loop has ended: nobody shows it
            pass

    # Back on the server's loop.

    def _finished(self, verdict: Verdict) -> None:
        self.in_progress -= 1
        self._push(verdict)
