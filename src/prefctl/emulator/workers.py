"""``prefctl emulator start --workers N``: N API processes serving one port, one dispatcher.

With ``--workers 1`` (the default) the emulator is one process (``emulator.serve``). With more, the
``emulator start`` process becomes the supervisor of N API workers:

- it checks and bootstraps the store, creates the token signing key (so that every worker signs
  and verifies with the same one), and binds N listening sockets on the port (``bind_workers``);
- it starts the workers (``python -m prefctl.emulator.workers``), each a whole API server on one of
  those sockets: health, token endpoint, JWKS, REST API, its own connection ceilings and its own
  writer process (``emulator.group_writer``), but no dispatcher; and waits until each is ready;
- it runs the emulator's one dispatcher itself, writes the pid file (with the workers' pids) and
  profile ``local``, and reports ready;
- SIGINT or SIGTERM (Ctrl-C, ``emulator stop``) stops every worker, waits for them (SIGKILL after
  ``STOP_TIMEOUT_SECONDS``), then stops the dispatcher. The workers run in a process group of
  their own, so a terminal's Ctrl-C reaches the supervisor only. Each worker also watches its stdin, a pipe
  from the supervisor: if the supervisor dies (even by SIGKILL), the pipe ends and the workers
  stop themselves, so no worker outlives it.
- A worker that ends while the emulator serves is logged (which worker, its pid, its exit code or
  signal) and started again on the same socket; connections the kernel queued on that socket
  meanwhile wait for the new worker, as the supervisor keeps the socket open. A worker that fails
  while starting, or more than ``MAX_RESTARTS`` ending within ``RESTART_WINDOW_SECONDS``, stops
  the emulator with a one-line error (exit 1): something is wrong that a restart does not mend.

Everything the workers share lives in the store: accounts, clients, users, issued tokens (so a
token from one worker is accepted by every other) and the signing key.

Why one socket per worker with ``SO_REUSEPORT`` rather than one socket shared by all: with a
shared socket, every worker's event loop wakes for each new connection and the first to run takes
all that are waiting (``servers.loop`` accepts up to 512 at a time); the kernel does not balance,
and a burst of connections opened at once (a load test, a connection pool) lands on one worker
while the others idle. With ``SO_REUSEPORT`` the kernel spreads connections over the sockets by a
hash of their addresses, evenly, without waking the others. Its two known weaknesses are handled
here: a socket's queue of not-yet-accepted connections would be reset when its process dies (the
supervisor holds every socket, so the queue survives for the restarted worker), and any process
of the same user could bind the same port with ``SO_REUSEPORT`` and take a share (a plain bind
of the port is tried first, so a port in use, or another emulator on it, is refused as with one
worker; and a plain bind, as every ``emulator start --workers 1`` makes, is refused while the
workers listen).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefctl.emulator import daemon
from prefctl.emulator.write_process import FrameReader, child_environment, encode, read_frame
from prefctl.errors import PrefctlError, UnreachableError, UsageError

if TYPE_CHECKING:
    from prefctl.emulator.context import EmulatorContext
    from prefctl.emulator.dispatcher_service import EmbeddedDispatcher
    from prefctl.emulator.serve import RunningEmulator
    from prefctl.emulator.startup import EmulatorConfig

__all__ = [
    "MAX_RESTARTS",
    "RESTART_WINDOW_SECONDS",
    "START_TIMEOUT_SECONDS",
    "STOP_TIMEOUT_SECONDS",
    "WorkerSpec",
    "bind_workers",
    "main",
    "supervise",
]

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 30.0  # for every worker to answer ready
STOP_TIMEOUT_SECONDS = 10.0  # for the workers to stop (uvicorn's graceful shutdown is 5 s)
MAX_RESTARTS = 5
RESTART_WINDOW_SECONDS = 60.0
_READ_SIZE = 1 << 12


@dataclass(frozen=True)
class WorkerSpec:
    """What the supervisor hands a worker on its stdin (one frame)."""

    config: EmulatorConfig
    fd: int  # the worker's listening socket, inherited
    index: int
    count: int
    emulator_pid: int
    verbosity: int


def bind_workers(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` sockets listening on ``host:port`` with ``SO_REUSEPORT`` (port 0: one free port
    for all). A plain bind is tried first, so that a port anything listens on is refused with the
    same words as with one worker (the module docstring says why)."""
    from prefctl.emulator.startup import bind, probe_port

    probe_port(host, port)
    sockets = [bind(host, port, reuse_port=True)]
    try:
        bound = sockets[0].getsockname()[1]
        sockets += [bind(host, bound, reuse_port=True) for _ in range(count - 1)]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def supervise(
    config: EmulatorConfig,
    data_dir: Path,
    sockets: list[socket.socket],
    on_ready: Callable[[RunningEmulator], None] | None,
) -> None:
    """Serve with ``len(sockets)`` API workers until SIGINT or SIGTERM (module docstring). Runs on
    the main thread, inside the data dir's lock that ``serve`` holds."""
    from prefctl.emulator import oauth
    from prefctl.emulator.local_profile import PROFILE_NAME, ca_bundle_for, write_local_profile
    from prefctl.emulator.serve import (
        RunningEmulator,
        emulator_url,
        new_context,
        open_account,
        pid_record,
    )
    from prefctl.emulator.startup import disk_full_refused

    if threading.current_thread() is not threading.main_thread():
        raise UsageError("an emulator with several workers runs on the main thread")
    with disk_full_refused():
        account, created, client_ids = open_account(config)
    ctx = new_context(config, emulator_url(config, sockets[0]))
    try:
        oauth.key_ring(ctx)  # the signing key, made once here rather than raced for by workers
        pool = _Pool(config, sockets)
        with pool.signals():
            dispatcher = _start_dispatcher(ctx)
            try:
                if not pool.start():
                    return  # a signal while starting
                ca_bundle = ca_bundle_for(config.tls_cert) if config.tls_cert else None
                if config.config_path is not None:
                    with disk_full_refused():
                        write_local_profile(
                            config.config_path,
                            auth_url=ctx.auth_url,
                            api_url=ctx.api_url,
                            account=account,
                            ca_bundle=ca_bundle,
                            client_ids=client_ids,
                        )
                running = RunningEmulator(
                    url=ctx.base_url,
                    data_dir=data_dir,
                    account=account,
                    context=ctx,
                    pid=ctx.pid,
                    created=created,
                    profile=PROFILE_NAME if config.config_path is not None else None,
                    config_path=config.config_path,
                    ca_bundle=ca_bundle,
                    workers=len(sockets),
                )

                def record() -> None:
                    with disk_full_refused():
                        daemon.write_pid_file(data_dir, pid_record(running, pool.pids()))

                record()
                if on_ready is not None:
                    on_ready(running)
                pool.watch(on_restarted=record)
            finally:
                pool.stop()
                if dispatcher is not None:
                    dispatcher.stop()
                daemon.remove_pid_file(data_dir, os.getpid())
    finally:
        ctx.close()


def _start_dispatcher(ctx: EmulatorContext) -> EmbeddedDispatcher | None:
    from prefctl.emulator.dispatcher_service import SETTING, EmbeddedDispatcher

    if ctx.settings.get(SETTING, True) is False:
        return None
    dispatcher = EmbeddedDispatcher(ctx)
    dispatcher.start()
    return dispatcher


@dataclass(eq=False)
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    started_at: float
    reader: FrameReader = field(default_factory=FrameReader)
    ready: bool = False
    failure: PrefctlError | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


class _Pool:
    """The API workers of one emulator, on the supervisor's main thread."""

    def __init__(self, config: EmulatorConfig, sockets: list[socket.socket]) -> None:
        from prefctl.emulator.dispatcher_service import SETTING

        # The workers serve the API only, on the system clock: the dispatcher is the
        # supervisor's, and a clock object cannot be shared between processes.
        self._config = replace(
            config, clock=None, config_path=None, settings={**config.settings, SETTING: False}
        )
        self._sockets = sockets
        self._workers: list[_Worker | None] = [None] * len(sockets)
        self._selector = selectors.DefaultSelector()
        self._ended: collections.deque[float] = collections.deque()
        self._verbosity = _verbosity()
        self.stopping = False
        self._serving = False  # every worker was ready once: a worker ready now is a new one

    def pids(self) -> tuple[int, ...]:
        return tuple(worker.pid for worker in self._workers if worker is not None)

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """SIGINT and SIGTERM set ``stopping`` and wake the selector."""
        wake_read, wake_write = socket.socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)

        def handle(_sig: int, _frame: Any) -> None:
            self.stopping = True

        previous_fd = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        self._selector.register(wake_read, selectors.EVENT_READ, None)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_fd)
            self._selector.unregister(wake_read)
            self._selector.close()
            wake_read.close()
            wake_write.close()

    def start(self) -> bool:
        """Start every worker and wait until each is ready; False if a signal came first."""
        for index in range(len(self._sockets)):
            self._spawn(index)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self.stopping:
            if all(worker is not None and worker.ready for worker in self._workers):
                self._serving = True
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnreachableError(
                    f"the emulator's API workers did not start within {START_TIMEOUT_SECONDS:g} s",
                    hint="run again with -vv for details",
                )
            self._step(left)
        return False

    def watch(self, on_restarted: Callable[[], None]) -> None:
        """Serve until a signal; start again a worker that ends (module docstring)."""
        while not self.stopping:
            if self._step(None):
                on_restarted()

    def stop(self) -> None:
        """SIGTERM every worker and wait for them all (SIGKILL past the timeout)."""
        self.stopping = True
        workers = [worker for worker in self._workers if worker is not None]
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for worker in workers:
            try:
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    "API worker %s (pid %d) did not stop within %g s; killing it",
                    self._name(worker),
                    worker.pid,
                    STOP_TIMEOUT_SECONDS,
                )
                worker.process.kill()
                worker.process.wait()
            self._close(worker)

    # -- inside ------------------------------------------------------------------------------------
    def _spawn(self, index: int) -> None:
        sock = self._sockets[index]
        spec = WorkerSpec(
            config=self._config,
            fd=sock.fileno(),
            index=index,
            count=len(self._sockets),
            emulator_pid=os.getpid(),
            verbosity=self._verbosity,
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "prefctl.emulator.workers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(sock.fileno(),),
            env=child_environment(),
            # A process group of its own: a terminal's Ctrl-C reaches the supervisor alone, which
            # stops the workers in order, rather than every worker and writer process at once
            # (one still importing when it arrives would die with a traceback).
            process_group=0,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(encode(spec))
        process.stdin.flush()  # the pipe stays open: its end tells the worker to stop
        os.set_blocking(process.stdout.fileno(), False)
        worker = _Worker(index, process, time.monotonic())
        self._workers[index] = worker
        self._selector.register(process.stdout, selectors.EVENT_READ, worker)

    def _step(self, timeout: float | None) -> bool:
        """Act on what the workers said or did; whether a restarted worker became ready."""
        restarted = False
        for key, _ in self._selector.select(timeout):
            worker: _Worker | None = key.data
            if worker is None:  # a signal's wake-up byte
                with contextlib.suppress(OSError):
                    key.fileobj.recv(_READ_SIZE)  # type: ignore[union-attr]
                continue
            assert worker.process.stdout is not None
            try:
                data = os.read(worker.process.stdout.fileno(), _READ_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._ended_worker(worker)
                continue
            for message in worker.reader.feed(data):
                if message[0] == "ready":
                    restarted |= self._serving and not worker.ready
                    worker.ready = True
                elif message[0] == "failed":
                    worker.failure = message[1]
        return restarted

    def _ended_worker(self, worker: _Worker) -> None:
        self._close(worker)
        try:
            code = worker.process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            code = worker.process.wait()
        if self.stopping:
            return
        self._workers[worker.index] = None
        how = _how_it_ended(code)
        if not worker.ready:
            if worker.failure is not None:
                raise worker.failure
            raise PrefctlError(
                f"API worker {self._name(worker)} (pid {worker.pid}) {how} while starting",
                hint="run again with -vv for details",
            )
        now = time.monotonic()
        self._ended.append(now)
        while self._ended and self._ended[0] < now - RESTART_WINDOW_SECONDS:
            self._ended.popleft()
        if len(self._ended) > MAX_RESTARTS:
            raise PrefctlError(
                f"API worker {self._name(worker)} (pid {worker.pid}) {how}, the "
                f"{len(self._ended)}th worker to end within {RESTART_WINDOW_SECONDS:g} s: "
                "the emulator stops",
                hint="the log above says why they ended",
            )
        log.error(
            "API worker %s (pid %d) %s; starting a new one",
            self._name(worker),
            worker.pid,
            how,
        )
        self._spawn(worker.index)

    def _close(self, worker: _Worker) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(worker.process.stdout)  # type: ignore[arg-type]
        for pipe in (worker.process.stdin, worker.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def _name(self, worker: _Worker) -> str:
        return f"{worker.index + 1} of {len(self._sockets)}"


def _how_it_ended(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _verbosity() -> int:
    """The ``-v`` count this process's logging was configured with (``logs.configure``)."""
    if logging.getLogger().level == logging.DEBUG:
        return 3
    level = logging.getLogger("prefctl").getEffectiveLevel()
    return 2 if level <= logging.DEBUG else 1 if level <= logging.INFO else 0


# -- the worker ------------------------------------------------------------------------------------
def main() -> int:
    """An API worker: serve the spec on stdin until SIGINT/SIGTERM or the end of stdin."""
    from prefctl import logs
    from prefctl.emulator.serve import make_server, prepare
    from prefctl.servers.server import run_server

    stdin = sys.stdin.fileno()
    with os.fdopen(os.dup(stdin), "rb") as raw:  # nothing follows the spec to read ahead
        spec: WorkerSpec | None = read_frame(raw)
    if spec is None:
        return 2  # not started by a supervisor
    report = sys.stdout.buffer
    sys.stdout = sys.stderr  # stdout carries frames only
    logs.configure(spec.verbosity)

    def say(*message: Any) -> None:
        report.write(encode(message))
        report.flush()

    sock = socket.socket(fileno=spec.fd)
    try:
        prepared = prepare(spec.config, sock, emulator_pid=spec.emulator_pid)
    except PrefctlError as exc:
        say("failed", exc)
        return exc.exit_code
    server = make_server(prepared.uvicorn_config, lambda: say("ready"))

    def stop_with_supervisor() -> None:
        # Unbuffered: a thread blocked in a buffered read would hold its lock at shutdown.
        with contextlib.suppress(OSError):
            while os.read(stdin, _READ_SIZE):  # until the supervisor closes it, or dies
                pass
        server.should_exit = True

    threading.Thread(target=stop_with_supervisor, name="prefctl-supervisor", daemon=True).start()
    try:
        run_server(server, [sock], prepared.connections)
    finally:
        prepared.running.context.close()
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
