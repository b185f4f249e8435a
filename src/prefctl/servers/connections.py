"""What one client connection may hold in prefctl's servers (the receiver and the emulator).

A client that opens a connection and sends nothing, drips its header a byte a second, never
finishes its body, sends a 64 MB header, or opens thousands of idle connections, would otherwise
hold a socket, memory and a file descriptor for as long as it likes. ``ConnectionLimits`` bounds
each of these, as nginx's ``client_header_timeout``, ``client_body_timeout`` and
``large_client_header_buffers`` do:

- a request's header must be complete ``header_timeout`` seconds after the connection opened (the
  first request) or after its first byte arrived (later ones), else ``408`` and the connection
  closes (a connection that sent nothing is just closed);
- while a body is read, each piece must arrive within ``body_timeout`` seconds of the previous,
  else ``408`` and close;
- a header (request line and fields) over ``max_header_bytes`` is answered ``431`` and closed;
- at most ``ConnectionRegistry.ceiling`` connections are open at once, below the open-files limit
  (whose soft value is raised to the hard one at start): at the ceiling, the connection that has
  waited longest for a request header is closed to make room, so a fresh client is always
  answered (``503`` if every open connection is busy with a request).

The deadlines are checked by one sweep per server, a few times per timeout (at most once a second),
so they hold to within a quarter of the timeout or a second, whichever is shorter.
``guarded_protocol`` puts these checks in front of uvicorn's httptools protocol (see
``GuardedProtocol`` for which of its parts it relies on, and the start-up check).
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HEADER_BYTES",
    "ConnectionLimits",
    "ConnectionRegistry",
    "guarded_protocol",
    "raise_open_files_limit",
]

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 10.0
DEFAULT_MAX_HEADER_BYTES = 32 * 1024
DEFAULT_MAX_CONNECTIONS = 8192
# File descriptors kept for everything but client connections: the store, logs, the writer
# process's pipes, outgoing HTTP, and connections accepted in one burst before they are counted.
RESERVED_FILES = 128
# Connections past the ceiling while a burst of accepted ones registers (within RESERVED_FILES).
_OVERSHOOT = 32

_log = logging.getLogger("prefctl.servers")


@dataclass(frozen=True)
class ConnectionLimits:
    """The bounds of one server's client connections (see the module docstring).

    ``max_connections`` None means ``DEFAULT_MAX_CONNECTIONS``; either way the server keeps
    ``RESERVED_FILES`` below its open-files limit.
    """

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_connections: int | None = None

    def cli_args(self) -> list[str]:
        """These limits as the flags of ``prefctl emulator start`` and ``prefctl receive``."""
        args = ["--header-timeout", repr(self.header_timeout)]
        args += ["--body-timeout", repr(self.body_timeout)]
        args += ["--max-header-bytes", str(self.max_header_bytes)]
        if self.max_connections is not None:
            args += ["--max-connections", str(self.max_connections)]
        return args

    def problem(self) -> str | None:
        """What is wrong with these limits, in the words of the flags; None if nothing."""
        for flag, value in (
            ("--header-timeout", self.header_timeout),
            ("--body-timeout", self.body_timeout),
        ):
            if not (math.isfinite(value) and 0 < value <= 3600):
                return f"{flag} must be a number of seconds above 0 and at most 3600, not {value:g}"
        if not 1024 <= self.max_header_bytes <= 1024 * 1024:
            return f"--max-header-bytes must be 1024 to 1048576, not {self.max_header_bytes}"
        if self.max_connections is not None and self.max_connections < 1:
            return f"--max-connections must be 1 or more, not {self.max_connections}"
        return None


def raise_open_files_limit() -> int:
    """Raise this process's soft open-files limit to its hard limit; the soft limit after."""
    try:
        import resource
    except ImportError:  # not on POSIX: no such limit to raise
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class ConnectionRegistry:
    """The open connections of one server, its deadlines and its connection ceiling.

    Guarded protocols register here (``add``/``discard``) and note where their request stands;
    the server's listener asks ``make_room`` before it takes a new connection.
    """

    def __init__(self, limits: ConnectionLimits, *, open_files: int | None = None) -> None:
        self.limits = limits
        files = open_files if open_files is not None else raise_open_files_limit()
        wanted = limits.max_connections or DEFAULT_MAX_CONNECTIONS
        self.ceiling = max(1, min(wanted, files - RESERVED_FILES))
        self.open: set[GuardLike] = set()
        # Connections waiting for (the rest of) a request header, oldest first.
        self.heads: dict[GuardLike, None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._interval = min(1.0, max(0.05, min(limits.header_timeout, limits.body_timeout) / 4))

    def add(self, connection: GuardLike, loop: asyncio.AbstractEventLoop) -> None:
        if len(self.open) >= self.ceiling and self.heads:
            self._evict_oldest()
        self.open.add(connection)
        self.heads[connection] = None
        if self._timer is None or self._loop is not loop:
            self._loop = loop
            self._timer = loop.call_later(self._interval, self._sweep)

    def discard(self, connection: GuardLike) -> None:
        self.open.discard(connection)
        self.heads.pop(connection, None)

    def make_room(self, pending: int) -> bool:
        """Whether one more connection may be taken, with ``pending`` accepted but not yet
        registered; at the ceiling, closes the one that has waited longest for a header."""
        if len(self.open) + pending < self.ceiling:
            return True
        if self.heads:
            self._evict_oldest()
            return True
        # Connections accepted in this burst are not registered yet: each one that makes the
        # count pass the ceiling when it registers closes the oldest waiting for a header then.
        # Once the registered ones alone fill the ceiling with none waiting for a header, no
        # eviction can make room: ``pending`` may still count one that registered a moment ago
        # (its task's done callback not run yet), so it must not let a client in to wait there.
        return 0 < pending < _OVERSHOOT and len(self.open) < self.ceiling

    def _evict_oldest(self) -> None:
        oldest = next(iter(self.heads))
        self.discard(oldest)
        oldest.expire(evicted=True)

    def _sweep(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        header_deadline = now - self.limits.header_timeout
        late = []
        for connection in self.heads:  # oldest first: stop at the first one still in time
            if connection.head_since > header_deadline:
                break
            late.append(connection)
        body_deadline = now - self.limits.body_timeout
        late += [c for c in self.open if c.in_body and c.last_data < body_deadline]
        for connection in late:
            self.discard(connection)
            connection.expire(evicted=False)
        self._timer = loop.call_later(self._interval, self._sweep) if not loop.is_closed() else None


class GuardLike(Protocol):
    """What the registry needs of a connection (``GuardedProtocol`` provides it)."""

    head_since: float
    last_data: float
    in_body: bool

    def expire(self, *, evicted: bool) -> None: ...


def _refusal(status: int, phrase: str, detail: str) -> bytes:
    body = detail.encode()
    return (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


REQUEST_TIMEOUT = _refusal(408, "Request Timeout", "the request did not arrive in time")
HEADER_TOO_LARGE = _refusal(
    431, "Request Header Fields Too Large", "the request header is over the limit"
)
SERVER_BUSY = _refusal(503, "Service Unavailable", "too many connections; try again")


def guarded_protocol(registry: ConnectionRegistry) -> type[asyncio.Protocol] | str:
    """uvicorn's own httptools protocol keeping ``registry``'s limits, when it passes the
    start-up check; else its name, for uvicorn to load: requests are served, but the deadlines
    and the header-size limit are off (logged as a warning)."""
    from prefctl.servers.seams import PROTOCOL_METHODS, httptools_protocol, seam_problem

    base = httptools_protocol()
    problem = seam_problem(base, PROTOCOL_METHODS)
    if problem is None and base is not None:
        guarded: type[asyncio.Protocol] = type(
            "GuardedProtocol", (guard_class(base),), {"registry": registry}
        )
        return guarded
    _log.warning("header and body deadlines and the header-size limit are off: %s", problem)
    return "httptools"


def guard_class(base: type[Any]) -> type[Any]:
    """``GuardedProtocol`` on top of ``base`` (uvicorn's httptools protocol, or a subclass)."""

    class GuardedProtocol(base):  # type: ignore[misc]
        """An httptools protocol whose connections keep the limits of ``registry``.

        It uses only the asyncio protocol methods and httptools' parser callbacks, each calling
        uvicorn's own, plus uvicorn's ``url`` and ``headers`` of the request being parsed (for the
        exact size of a header that arrived whole); ``check_guard_seams`` verifies them at start.
        """

        registry: ConnectionRegistry

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            loop = asyncio.get_running_loop()
            self._guard_transport = transport
            self._clock: Callable[[], float] = loop.time
            self.last_data = self.head_since = self._clock()
            self.head_bytes = 0
            self.in_body = False
            self.refused = False
            self.registry.add(self, loop)

        def connection_lost(self, exc: Exception | None) -> None:
            self.registry.discard(self)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return
            self.last_data = self._clock()
            if self.head_since:
                self.head_bytes += len(data)
            super().data_received(data)
            if self.head_since and self.head_bytes > self.registry.limits.max_header_bytes:
                self._refuse(HEADER_TOO_LARGE)

        def on_message_begin(self) -> None:
            if not self.head_since:
                self.head_since = self.last_data
                self.head_bytes = 0
                self.registry.heads[self] = None
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            if self.refused:
                return
            if self.head_bytes > self.registry.limits.max_header_bytes and (
                _header_size(self.url, self.headers) > self.registry.limits.max_header_bytes
            ):
                self._refuse(HEADER_TOO_LARGE)
                return
            self.head_since = 0.0
            self.registry.heads.pop(self, None)
            self.in_body = True
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self.refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            self.in_body = False
            if not self.refused:
                super().on_message_complete()

        def shutdown(self) -> None:
            """The server stops: uvicorn closes an idle connection at once. Over TLS a close
            waits for the client's close_notify, which an idle pooled client (a dispatcher's
            kept-alive connection) never sends, and the server waited its whole graceful-shutdown
            time (5 s) for the connection: once closed here with nothing left to send, it is
            dropped."""
            transport = self._guard_transport
            was_closing = transport.is_closing()
            super().shutdown()
            if (
                not was_closing
                and transport.is_closing()
                and transport.get_extra_info("ssl_object") is not None
                and not transport.get_write_buffer_size()  # type: ignore[attr-defined]
            ):
                transport.abort()  # type: ignore[attr-defined]

        def expire(self, *, evicted: bool) -> None:
            """Past a deadline (``evicted``: closed to make room): answer 408 if part of a
            request arrived, and close."""
            if evicted or (self.head_since and not self.head_bytes) or self._answering():
                self._refuse(None)
            else:
                self._refuse(REQUEST_TIMEOUT)

        def _answering(self) -> bool:
            # uvicorn's request cycle, when the app has begun its answer: a 408 would follow it.
            cycle = getattr(self, "cycle", None)
            return bool(getattr(cycle, "response_started", False))

        def _refuse(self, answer: bytes | None) -> None:
            self.refused = True
            self.registry.discard(self)
            transport = self._guard_transport
            if not transport.is_closing():
                if answer is not None:
                    transport.write(answer)  # type: ignore[attr-defined]
                transport.close()

    return GuardedProtocol


def _header_size(url: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    return len(url) + sum(len(name) + len(value) + 4 for name, value in headers)
