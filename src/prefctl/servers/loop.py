"""The event loop of prefctl's servers (the receiver, the emulator): uvloop, with a listener that
accepts every waiting connection at once.

Since libuv 1.45 (https://github.com/libuv/libuv/pull/3696; uvloop 0.23 bundles libuv 1.52) a
listening socket accepts one connection per event-loop iteration. Under load one iteration answers
a request on every connection that has one, so it lasts (busy connections × time per request):
measured here, 256 connections opened at once against a busy server were accepted over 4.5 s, and
the requests written on them in the first millisecond waited up to that long, which wrk reports as
a p99 near 1 s and as timeouts. Steady traffic on established connections was never affected.

``GreedyListener`` does what asyncio's own loop does: each time the listening socket is readable
it accepts what is waiting (up to ``ACCEPT_BATCH``), and hands each socket to uvloop with
``connect_accepted_socket``, so the connection is then served by uvloop exactly as before (same
transport, TCP_NODELAY, TLS). uvicorn reaches it through ``loop.create_server(…, sock=…)``;
``servers.run_server`` runs a uvicorn server on it.

Given a ``ConnectionRegistry`` (``connections``), the listener keeps the server's connections at
its ceiling: before it takes one more it asks ``make_room`` (which may close the connection that
has waited longest for a request header), and when there is no room it answers the new client
``503`` and closes, rather than leaving it unanswered.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefctl.servers.connections import ConnectionRegistry

__all__ = ["ACCEPT_BATCH", "GreedyListener", "new_event_loop"]

ACCEPT_BATCH = 512  # connections accepted per readiness of the listening socket, at most
_RETRY_AFTER_SECONDS = 1.0  # out of file descriptors: pause accepting (asyncio does the same)

_log = logging.getLogger("prefctl.servers")


def new_event_loop(connections: ConnectionRegistry | None = None) -> asyncio.AbstractEventLoop:
    """A uvloop event loop whose ``create_server(sock=…)`` serves through a ``GreedyListener``
    that keeps ``connections`` at their ceiling."""
    loop: Any = _loop_class()()
    loop.prefctl_connections = connections
    result: asyncio.AbstractEventLoop = loop
    return result


@functools.cache
def _loop_class() -> type[asyncio.AbstractEventLoop]:
    import uvloop

    class Loop(uvloop.Loop):
        prefctl_connections: ConnectionRegistry | None = None

        async def create_server(  # type: ignore[override]
            self,
            protocol_factory: Callable[[], asyncio.BaseProtocol],
            host: Any = None,
            port: Any = None,
            *,
            sock: socket.socket | None = None,
            ssl: ssl.SSLContext | None = None,
            **options: Any,
        ) -> Any:
            options.pop("backlog", None)  # the socket already listens (serve.bind_socket)
            if sock is None or host is not None or port is not None or options:
                return await super().create_server(
                    protocol_factory, host, port, sock=sock, ssl=ssl, **options
                )
            return GreedyListener(
                self, protocol_factory, sock, ssl, connections=self.prefctl_connections
            )

    return Loop


class GreedyListener:
    """Accepts every waiting connection whenever ``sock`` is readable; an ``asyncio.Server`` to
    uvicorn (``close``, ``wait_closed``, ``sockets``, ``is_serving``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        sock: socket.socket,
        ssl_context: ssl.SSLContext | None,
        *,
        connections: ConnectionRegistry | None = None,
    ) -> None:
        self._loop = loop
        self._factory = protocol_factory
        self._sock = sock
        self._ssl = ssl_context
        self._fd = sock.fileno()
        self._connections = connections
        self._quiet_until = 0.0
        # A TLS client must finish its handshake within the header deadline.
        self._tls_options: dict[str, Any] = (
            {"ssl_handshake_timeout": connections.limits.header_timeout}
            if ssl_context is not None and connections is not None
            else {}
        )
        self._handshakes: set[asyncio.Task[Any]] = set()
        self._serving = True
        sock.setblocking(False)
        loop.add_reader(self._fd, self._accept)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,)

    def is_serving(self) -> bool:
        return self._serving

    def close(self) -> None:
        """Stop accepting; the caller closes the socket. Connections already served stay open."""
        if self._serving:
            self._serving = False
            self._loop.remove_reader(self._fd)
            for task in self._handshakes:
                task.cancel()

    async def wait_closed(self) -> None:
        if self._handshakes:
            await asyncio.gather(*self._handshakes, return_exceptions=True)

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _address = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: retry in a moment
                _log.warning(
                    "cannot accept a connection: %s; retrying in %g s", exc, _RETRY_AFTER_SECONDS
                )
                self._loop.remove_reader(self._fd)
                self._loop.call_later(_RETRY_AFTER_SECONDS, self._resume)
                return
            conn.setblocking(False)
            connections = self._connections
            if connections is not None and not connections.make_room(len(self._handshakes)):
                self._turn_away(conn)
                continue
            connect = self._loop.connect_accepted_socket(
                self._factory, conn, ssl=self._ssl, **self._tls_options
            )
            # Without TLS this completes on the next iteration; with TLS after the handshake.
            task = self._loop.create_task(connect)
            self._handshakes.add(task)
            task.add_done_callback(self._connected)

    def _turn_away(self, conn: socket.socket) -> None:
        """At the ceiling with no idle connection to close: answer 503 (plain HTTP) and close."""
        from prefctl.servers.connections import SERVER_BUSY

        now = self._loop.time()
        if now >= self._quiet_until:  # one line a second at most, under a flood
            self._quiet_until = now + _RETRY_AFTER_SECONDS
            _log.warning("at the connection limit: new connections are answered 503")
        if self._ssl is None:
            try:
                conn.send(SERVER_BUSY)
            except OSError:
                pass
        conn.close()

    def _connected(self, task: asyncio.Task[Any]) -> None:
        self._handshakes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # A failed TLS handshake (uvloop has closed the transport): the client's problem.
            _log.debug("connection not established: %s", task.exception())

    def _resume(self) -> None:
        if self._serving:
            self._loop.add_reader(self._fd, self._accept)
