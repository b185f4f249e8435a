"""The uvicorn server shared by the emulator and the receiver.

uvicorn's own ``Server`` re-raises SIGINT/SIGTERM after a graceful shutdown and says nothing when
it starts listening. Both of prefctl's servers need the opposite: a signal is the normal way to
stop (the command exits 0), and tests, ``--detach`` and ``prefctl demo`` wait on start-up instead
of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

    from prefctl.errors import UsageError
    from prefctl.servers.connections import ConnectionRegistry


_log = logging.getLogger("prefctl.servers")

# Addresses that bind every interface: clients on this machine reach such a server through
# loopback, and from elsewhere by a name the server cannot know.
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def is_wildcard_host(host: str) -> bool:
    """Whether ``--host`` binds every interface (``0.0.0.0``, ``::``) rather than one address."""
    return host in WILDCARD_HOSTS


def exposure(host: str) -> str | None:
    """Why binding ``host`` exposes the server beyond this machine; None for a loopback address."""
    import ipaddress

    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:  # a host name: it may resolve to any interface
        pass
    shown = host or "''"
    reach = "every interface" if is_wildcard_host(host) else shown
    return (
        f"--host {shown} is not a loopback address: other machines can reach this server "
        f"on {reach}; it is meant for this machine"
    )


def cannot_listen(host: str, port: int, exc: OSError) -> UsageError:
    """Why ``host:port`` cannot be listened on, in words (exit 2): a port in use, an address
    this machine does not have, a port below 1024 without the right to it."""
    import errno

    from prefctl.errors import UsageError

    where = f"[{host}]" if ":" in host else host or "every interface"
    if exc.errno == errno.EADDRINUSE:
        return UsageError(
            f"port {port} on {where} is already in use (another program is listening there)",
            hint="choose another with --port",
        )
    if exc.errno == errno.EACCES:
        return UsageError(
            f"port {port} on {where} needs administrator rights (ports below 1024 do)",
            hint="choose a port from 1024 up with --port",
        )
    if isinstance(exc, socket.gaierror) or (exc.errno or 0) < 0:  # the resolver's codes
        return UsageError(f"cannot listen on {where}: no such host name", hint="check --host")
    if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
        return UsageError(
            f"cannot listen on {where}: it is not an address of this machine",
            hint="check --host (127.0.0.1 listens on this machine only)",
        )
    # socket.create_server adds "(while attempting to bind on address …)": the message says it.
    reason = (exc.strerror or type(exc).__name__).split(" (while attempting")[0].lower()
    return UsageError(
        f"cannot listen on port {port} of {where}: {reason}", hint="check --host and --port"
    )


def run_server(
    server: uvicorn.Server,
    sockets: list[socket.socket],
    connections: ConnectionRegistry | None = None,
) -> None:
    """Serve on ``sockets`` until the server stops, on prefctl's event loop, which accepts a
    burst of new connections at once and keeps ``connections`` at their ceiling
    (``servers.loop``)."""
    from prefctl.servers.loop import new_event_loop

    with asyncio.Runner(loop_factory=lambda: new_event_loop(connections)) as runner:
        runner.run(server.serve(sockets=sockets))


def quiet_server(
    config: uvicorn.Config,
    on_started: Callable[[], None],
    on_signal: Callable[[], None] | None = None,
) -> uvicorn.Server:
    """A uvicorn server that calls ``on_started`` once it listens and, on SIGINT or SIGTERM,
    calls ``on_signal`` and stops gracefully without re-raising the signal. Signals are only
    handled when it runs on the main thread (a server in a test thread is stopped directly).

    It overrides three methods of ``uvicorn.Server`` that are not its public interface
    (``startup``, ``capture_signals``, ``handle_exit``), after checking them
    (``uvicorn_seams``). Without them it serves as uvicorn's own ``Server``: ``on_started`` is
    then called by a watcher of the public ``started`` flag, and signals are uvicorn's (it stops
    gracefully, then re-raises the signal, so the process's exit status tells of the signal).
    """
    import uvicorn

    from prefctl.servers.seams import seam_problem

    problem = seam_problem(uvicorn.Server, _SERVER_METHODS)
    if problem is not None:
        _log.info("signals are handled by uvicorn: %s", problem)
        return _watched_server(config, on_started)

    class QuietServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                on_started()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def handle_exit(self, sig: int, frame: Any) -> None:
            if on_signal is not None:
                on_signal()
            super().handle_exit(sig, frame)

    server: uvicorn.Server = QuietServer(config)
    return server


_SERVER_METHODS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("startup", ("sockets",)),
    ("capture_signals", ()),
    ("handle_exit", ("sig", "frame")),
)


def _watched_server(config: uvicorn.Config, on_started: Callable[[], None]) -> uvicorn.Server:
    """uvicorn's own ``Server``, through its public interface only (``serve``, ``started``,
    ``should_exit``), calling ``on_started`` once it listens."""
    import uvicorn

    class WatchedServer(uvicorn.Server):
        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            watcher = asyncio.get_running_loop().create_task(self._watch())
            try:
                await super().serve(sockets=sockets)
            finally:
                watcher.cancel()

        async def _watch(self) -> None:
            while not self.started:
                if self.should_exit:
                    return
                await asyncio.sleep(0.005)
            on_started()

    server: uvicorn.Server = WatchedServer(config)
    return server
