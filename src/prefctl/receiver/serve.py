"""Run the receiver: ``ReceiverConfig`` → ``serve(config)`` (blocking) or ``start_in_thread(config)``.

``prefctl receive`` only forwards its options here; tests, ``endpoint check``, the dispatcher tests
and ``prefctl demo`` call the same functions::

    config = ReceiverConfig(port=0, credentials=creds)          # port 0: any free port
    with start_in_thread(config) as receiver:
        post_events_to(receiver.webhook_url)
        verdicts = receiver.wait_for(3, timeout=5)          # Verdict objects, flags filled in

The server is uvicorn (httptools, uvloop, no access log) on a socket bound here first, so that a
busy port is a clean ``UsageError`` and port 0 works; its event loop (``prefctl.servers.loop``) accepts
every waiting connection at once, where libuv would take one per loop iteration. The verdict stream reaches
``config.on_verdicts`` in batches, from the verdict pump's task on the event loop, off the request
path: a sink must be quick, and hand blocking output to a ``pump.BackgroundWriter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefctl.errors import PrefctlError, UsageError
from prefctl.receiver.app import ReceiverApp
from prefctl.receiver.config import (
    DEFAULT_PORT,
    ExitAfterNotReached,
    ReceiverConfig,
    ReceiverSummary,
)
from prefctl.receiver.faults import FaultState, FaultStep
from prefctl.receiver.forward import Forwarder
from prefctl.receiver.pump import Sink, VerdictPump
from prefctl.receiver.recorder import Recorder
from prefctl.receiver.validation import AutoValidator, TrustedHosts
from prefctl.receiver.verdict import Verdict
from prefctl.servers.connections import ConnectionRegistry
from prefctl.servers.loop import new_event_loop
from prefctl.webhooks.signature import Verifier

if TYPE_CHECKING:
    import uvicorn

    from prefctl.receiver.inspector import Inspector

__all__ = [
    "DEFAULT_PORT",
    "ReceiverConfig",
    "ReceiverSummary",
    "RunningReceiver",
    "bind_socket",
    "check_certificate_host",
    "new_event_loop",
    "serve",
    "start_in_thread",
    "uvicorn_config",
]

STARTUP_TIMEOUT_SECONDS = 15.0


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port); a busy port is a UsageError."""
    try:
        return socket.create_server((host, port), backlog=2048, reuse_port=False)
    except OSError as exc:
        from prefctl.servers.server import cannot_listen

        raise cannot_listen(host, port, exc) from None


def check_certificate_host(config: ReceiverConfig) -> None:
    """UsageError (exit 2) when ``--tls-cert`` does not cover the ``--host`` of the URL the ready
    line announces: a sender using that URL would refuse the certificate.

    A wildcard ``--host`` (0.0.0.0, ::) is not checked: senders reach it by a name only they know.
    """
    from prefctl.servers.server import is_wildcard_host

    if config.tls_cert is None or is_wildcard_host(config.host):
        return
    from prefctl.certs import require_host

    require_host(config.tls_cert, config.host, role="the host in the receiver's URL")


def uvicorn_config(
    app: Any,
    *,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    client_ca: Path | None = None,
    http: type[asyncio.Protocol] | str = "httptools",
) -> uvicorn.Config:
    """uvicorn tuned for throughput; the receiver and the benchmark's bare app both use it.

    ``http`` is uvicorn's HTTP protocol: the receiver passes its own (``receiver.protocol``), which
    answers the webhook path without the ASGI round trip.
    """
    import uvicorn

    config = uvicorn.Config(
        app,
        http=http,
        loop="uvloop",
        ws="none",
        lifespan="off",
        interface="asgi3",
        access_log=False,
        log_level="warning",
        log_config=None,
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=5,
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
        ssl_ca_certs=str(client_ca) if client_ca else None,
        ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca else ssl.CERT_NONE,
    )
    try:
        config.load()
    except (OSError, ssl.SSLError) as exc:
        from prefctl.private_files import os_reason

        for path in (tls_cert, tls_key, client_ca):
            if path is not None and not path.is_file():
                raise UsageError(f"{path} does not exist or is not a file") from None
        raise UsageError(f"cannot load the TLS certificate, key or CA: {os_reason(exc)}") from None
    return config


class _Server:
    """A uvicorn server that reports start-up and turns signals into a normal stop."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        from prefctl.servers.server import quiet_server

        self.signalled = False
        # serve() returns normally after a signal; its caller decides the exit code.
        self.server = quiet_server(config, on_started, on_signal=self._signalled)

    def _signalled(self) -> None:
        self.signalled = True


class _Receiver:
    """One run of the receiver: pump, sinks, app and server, on a bound socket."""

    def __init__(self, config: ReceiverConfig, sock: socket.socket, sinks: Sequence[Sink]) -> None:
        self.config = config
        self.sock = sock
        self.port = int(sock.getsockname()[1])
        self.recorder = Recorder(config.record, redact=config.redact) if config.record else None
        all_sinks: list[Sink] = [self.recorder.write] if self.recorder else []
        self.inspector = _inspector(config)
        if self.inspector is not None:
            all_sinks.append(self.inspector.sink)
        if config.on_verdicts is not None:
            all_sinks.append(config.on_verdicts)
        all_sinks.extend(sinks)
        self.pump = VerdictPump(
            all_sinks,
            exit_after=config.exit_after,
            on_exit_after=self.request_stop,
            on_error=self._failed,
        )
        self.error: BaseException | None = None
        self._server: _Server | None = None
        self._faults: FaultState | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.connections = ConnectionRegistry(config.limits)
        self._stop_requested = False
        self.timed_out = False

    def _failed(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.request_stop()

    def request_stop(self) -> None:
        """Ask the server to stop (from any thread)."""
        self._stop_requested = True
        if self._server is not None:
            self._server.server.should_exit = True

    def run(self, on_ready: Callable[[dict[str, Any]], None] | None = None) -> ReceiverSummary:
        try:
            with asyncio.Runner(loop_factory=lambda: new_event_loop(self.connections)) as runner:
                runner.run(self._main(on_ready))
        finally:
            self.sock.close()
            if self.recorder is not None:
                try:
                    self.recorder.close()
                except PrefctlError as exc:
                    self._failed(exc)
        return self._summary()

    async def _main(self, on_ready: Callable[[dict[str, Any]], None] | None) -> None:
        from prefctl.receiver.protocol import webhook_protocol  # imports uvicorn

        config = self.config
        forwarder = (
            Forwarder(config.forward_to, timeout=config.forward_timeout)
            if config.forward_to
            else None
        )
        validator = (
            AutoValidator(
                self.pump.push,
                config.clock,
                TrustedHosts(config.validation_hosts),
                timeout=config.validation_timeout,
            )
            if config.auto_validate
            else None
        )
        self._faults = FaultState(config.faults, config.rng) if config.faults else None
        self._loop = asyncio.get_running_loop()
        app = ReceiverApp(
            push=self.pump.push,
            clock=config.clock,
            path=config.path,
            verifier=Verifier(config.credentials, tolerance=config.tolerance)
            if config.verify and config.credentials
            else None,
            faults=self._faults,
            manual_validation=config.manual_validation,
            validator=validator,
            forwarder=forwarder,
            max_body_bytes=config.max_body_bytes,
            keep_request=self.recorder is not None
            or self.inspector is not None
            or self.config.keep_requests,
        )
        info = config.ready_info(self.port)
        server = _Server(
            uvicorn_config(
                app,
                tls_cert=config.tls_cert,
                tls_key=config.tls_key,
                client_ca=config.client_ca,
                http=webhook_protocol(app, self.connections),
            ),
            on_started=lambda: on_ready(info) if on_ready else None,
        )
        self._server = server
        server.server.should_exit = self._stop_requested
        if self.inspector is not None:
            self.inspector.attach(app, should_stop=lambda: server.server.should_exit)
        for helper in (forwarder, validator):
            if helper is not None:
                await helper.start()
        loop = asyncio.get_running_loop()
        timer = loop.call_later(config.timeout, self._time_up) if config.timeout else None
        pump_task = loop.create_task(self.pump.run(), name="prefctl-verdicts")
        try:
            await server.server.serve(sockets=[self.sock])
        finally:
            if timer is not None:
                timer.cancel()
            for helper in (forwarder, validator):
                if helper is not None:
                    await helper.close()
            pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump_task
            self.pump.flush()

    def inject_fault(self, step: FaultStep, timeout: float) -> None:
        """Hand ``step`` to the fault state on the event loop; returns once it is applied."""
        faults, loop = self._faults, self._loop
        if faults is None or loop is None:
            raise UsageError(
                "this receiver has no fault plan to add a fault to",
                hint="start it with faults=FaultPlan() (an empty plan) to control faults",
            )
        applied = threading.Event()

        def apply() -> None:
            faults.inject(step)
            applied.set()

        try:
            loop.call_soon_threadsafe(apply)
        except RuntimeError:  # the loop is closed: the receiver has stopped
            raise PrefctlError("the receiver has stopped") from None
        if not applied.wait(timeout):
            raise PrefctlError(f"the receiver did not take the fault within {timeout:g} s")

    def _time_up(self) -> None:
        self.timed_out = True
        self.request_stop()

    def _summary(self) -> ReceiverSummary:
        pump = self.pump
        if self.error is not None:
            raise self.error
        if pump.exit_reached:
            reason = "exit_after"
        elif self.timed_out:
            reason = "timeout"
        elif self._server is not None and self._server.signalled:
            reason = "signal"
        else:
            reason = "stopped"
        summary = ReceiverSummary(requests=pump.requests, events=pump.events, reason=reason)
        wanted = self.config.exit_after
        if wanted is not None and reason in ("timeout", "signal"):
            how = f"timed out after {self.config.timeout:g} s" if reason == "timeout" else "stopped"
            raise ExitAfterNotReached(f"{how}: {pump.events} of {wanted} events arrived", summary)
        return summary


def _inspector(config: ReceiverConfig) -> Inspector | None:
    if not config.ui:
        return None
    from prefctl.receiver.inspector import Inspector

    return Inspector(token=config.ui_token, redact=config.redact, rng=config.rng)


def serve(
    config: ReceiverConfig, *, on_ready: Callable[[dict[str, Any]], None] | None = None
) -> ReceiverSummary:
    """Run the receiver until it is stopped; blocking.

    ``on_ready`` gets the ready information once uvicorn listens. Returns when ``exit_after``
    events arrived, the ``timeout`` passed, or on SIGINT/SIGTERM; when ``exit_after`` was not
    reached by then, raises ``ExitAfterNotReached`` (a ``PrefctlError`` carrying the summary).
    A busy port, an unreadable certificate or one for another host is a ``UsageError``.

    ``serve`` expects to own its process (``prefctl receive``): it moves every object that exists
    before serving out of the garbage collector's sight (``gc.freeze``), so that the collections
    caused by request traffic only scan what the server itself creates.
    """
    check_certificate_host(config)
    sock = bind_socket(config.host, config.port)
    receiver = _Receiver(config, sock, ())
    gc.freeze()
    try:
        return receiver.run(on_ready)
    finally:
        gc.unfreeze()


class RunningReceiver:
    """A receiver serving on a background thread (tests, ``endpoint check``, ``demo``).

    ``url`` is the base URL (``http://127.0.0.1:PORT``), ``webhook_url`` the URL to subscribe.
    Every verdict also lands in ``verdicts`` (a ``queue.Queue``); ``wait_for(n)`` takes them.
    """

    def __init__(self, config: ReceiverConfig, sock: socket.socket) -> None:
        self.verdicts: queue.Queue[Verdict] = queue.Queue()
        self._receiver = _Receiver(config, sock, [self._collect])
        self._started = threading.Event()
        self._summary: ReceiverSummary | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"prefctl-receiver-{self.port}", daemon=True
        )
        host = f"[{config.host}]" if ":" in config.host else config.host
        self.url = f"{config.scheme}://{host}:{self.port}"
        self.webhook_url = self.url + config.path

    @property
    def port(self) -> int:
        return self._receiver.port

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def tracked_bytes(self) -> int:
        """The estimated memory the duplicate and order tracking holds (bounded, in bytes)."""
        return self._receiver.pump.tracker.memory_used

    def _collect(self, batch: Sequence[Verdict]) -> None:
        for verdict in batch:
            self.verdicts.put(verdict)

    def _run(self) -> None:
        try:
            self._summary = self._receiver.run(on_ready=lambda _info: self._started.set())
        except BaseException as exc:  # handed to the caller by start() or stop()
            self._error = exc
        finally:
            self._started.set()

    def _start(self, timeout: float) -> None:
        self._thread.start()
        if not self._started.wait(timeout):
            self._receiver.request_stop()
            raise PrefctlError(f"the receiver did not start within {timeout:g} s")
        if self._error is not None:
            self._thread.join()
            raise self._error

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Verdict]:
        """The next ``count`` verdicts, waiting at most ``timeout`` seconds in all."""
        deadline = time.monotonic() + timeout
        got: list[Verdict] = []
        while len(got) < count:
            try:
                got.append(self.verdicts.get(timeout=max(deadline - time.monotonic(), 0.0)))
            except queue.Empty:
                raise TimeoutError(f"{len(got)} of {count} verdicts within {timeout:g} s") from None
        return got

    def inject_fault(self, step: FaultStep, timeout: float = 5.0) -> None:
        """Apply ``step`` to the next authentic events, ahead of the rest of the fault plan.

        Returns once the server's event loop holds it, so the next event meets it. The receiver
        must have been started with a fault plan (``FaultPlan()`` when none is wanted yet): the
        answer path with faults differs from the one without, and it is chosen at start.
        """
        self._receiver.inject_fault(step, timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the receiver stops by itself (``exit_after``, ``timeout``); True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self) -> ReceiverSummary | None:
        """Stop the server, wait for it, and re-raise what ended it abnormally."""
        self._receiver.request_stop()
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._summary

    def __enter__(self) -> RunningReceiver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.stop()
            return
        # The block already failed: stop, but do not hide its exception behind the receiver's.
        try:
            self.stop()
        except Exception:  # noqa: S110
            pass


def start_in_thread(
    config: ReceiverConfig, *, startup_timeout: float = STARTUP_TIMEOUT_SECONDS
) -> RunningReceiver:
    """Start the receiver on a daemon thread; returns once uvicorn has started listening."""
    check_certificate_host(config)
    running = RunningReceiver(config, bind_socket(config.host, config.port))
    running._start(startup_timeout)
    return running
