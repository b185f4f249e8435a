"""Running the emulator: ``serve(config)`` in the foreground, ``start_in_thread(config)`` in-process.

Both prepare the same way: resolve the data dir, open (and on first use bootstrap) the store, bind
the port, build the app, and, when ``config.config_path`` is set, write profile ``local``.

- ``serve`` blocks until SIGINT or SIGTERM, then shuts down cleanly and returns (exit 0). While it
  runs, ``emulator.pid`` in the data dir records it for ``emulator status`` and ``stop``.
- ``start_in_thread`` returns a ``RunningEmulator`` once uvicorn has started (waited on an event,
  not a sleep); ``.stop()`` shuts it down. It writes no pid file: ``emulator stop`` must never signal
  the process that embeds it (a test run, ``prefctl demo``).

    >>> running = start_in_thread(EmulatorConfig(port=0, data_dir=tmp))
    >>> running.auth_url, running.account.client_id
    >>> running.stop()
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prefctl.clock import SystemClock, utc_timestamp
from prefctl.config import paths
from prefctl.dispatcher.alerts.mail import SMTP_SETTING
from prefctl.emulator import daemon
from prefctl.emulator.app import EmulatorContext, create_app
from prefctl.emulator.local_profile import (
    PROFILE_NAME,
    LocalAccount,
    ca_bundle_for,
    write_local_profile,
)
from prefctl.emulator.startup import (
    EmulatorConfig,
    bind,
    check_free_space,
    disk_full_refused,
    url_host,
)
from prefctl.errors import PrefctlError, UnreachableError, UsageError
from prefctl.logs import register_secret
from prefctl.private_files import make_private_dir, os_reason
from prefctl.servers.connections import ConnectionRegistry, guarded_protocol
from prefctl.servers.server import run_server
from prefctl.store import Store
from prefctl.store.db import QUICK_CHECK_SECONDS, check_integrity, in_use

__all__ = [
    "EmulatorConfig",
    "Prepared",
    "RunningEmulator",
    "emulator_url",
    "make_server",
    "new_context",
    "open_account",
    "pid_record",
    "prepare",
    "serve",
    "start_in_thread",
]

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 15.0


@dataclass
class RunningEmulator:
    """An emulator that has started: where it answers and with which account."""

    url: str
    data_dir: Path
    account: LocalAccount
    context: EmulatorContext
    pid: int
    created: bool = False
    profile: str | None = PROFILE_NAME
    config_path: Path | None = None
    ca_bundle: Path | None = None
    workers: int = 1  # API processes (``emulator.workers``)
    _server: Any = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def auth_url(self) -> str:
        return self.context.auth_url

    @property
    def api_url(self) -> str:
        return self.context.api_url

    @property
    def token_url(self) -> str:
        return self.context.token_url

    @property
    def store(self) -> Path | str:
        """The store served: the SQLite file, or the PostgreSQL database's URL."""
        return self.context.store_path

    @property
    def store_path(self) -> Path:
        """The SQLite store's file (an emulator on PostgreSQL has none: see ``store``)."""
        location = self.context.store_path
        if not isinstance(location, Path):
            raise ValueError("this emulator serves a PostgreSQL store: it has no store file")
        return location

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def write_profile(self, config_path: Path) -> RunningEmulator:
        """Write profile ``local`` for this emulator into ``config_path``; returns a view of the
        same running emulator that knows it (``.config_path``, ``.profile``)."""
        write_local_profile(
            config_path,
            auth_url=self.auth_url,
            api_url=self.api_url,
            account=self.account,
            ca_bundle=self.ca_bundle,
        )
        return replace(self, config_path=config_path, profile=PROFILE_NAME)

    def ready_record(self) -> dict[str, Any]:
        """The ``{"type": "ready", …}`` line ``emulator start -o json`` prints (no secrets)."""
        return {
            "type": "ready",
            "url": self.url,
            "auth_url": self.auth_url,
            "api_url": self.api_url,
            "data_dir": str(self.data_dir),
            "profile": self.profile,
            "pid": self.pid,
            "workers": self.workers,
        }

    def stop(self, timeout: float = 10.0) -> None:
        """Shut down an emulator started by ``start_in_thread`` and wait for it (bounded)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise UnreachableError(f"the emulator at {self.url} did not stop in {timeout} s")
        self.context.close()


@dataclass
class Prepared:
    running: RunningEmulator
    uvicorn_config: Any
    sock: socket.socket
    connections: ConnectionRegistry


def serve(
    config: EmulatorConfig, *, on_ready: Callable[[RunningEmulator], None] | None = None
) -> None:
    """Run the emulator in this process until SIGINT or SIGTERM; ``on_ready`` once it listens.
    With ``config.workers`` above 1, this process supervises that many API processes and runs
    the dispatcher (``emulator.workers``)."""
    config.validate()
    data_dir = config.resolved_data_dir()
    # Before the port: an emulator already serving this data dir holds it, and "already
    # running (pid, URL)" says more than "port in use".
    daemon.ensure_not_running(data_dir)
    # A busy port fails before anything is created.
    if config.workers > 1:
        from prefctl.emulator import workers

        sockets = workers.bind_workers(config.host, config.port, config.workers)
    else:
        sockets = [bind(config.host, config.port)]
    try:
        check_free_space(data_dir)  # a full disk too, before the data dir is made
        with disk_full_refused():
            make_private_dir(data_dir, "the data folder")
        # A SQLite store is marked in use (emulator reset waits); a PostgreSQL one is the server's.
        store = config.resolved_store()
        using = contextlib.nullcontext() if config.store else in_use(store)
        with daemon.holding_data_dir(data_dir), using:
            daemon.ensure_not_running(data_dir)  # one that started before locks existed
            if config.workers > 1:
                workers.supervise(config, data_dir, sockets, on_ready)  # (imported above)
            else:
                _serve(config, data_dir, sockets[0], on_ready)
    finally:
        for sock in sockets:
            sock.close()


def _serve(
    config: EmulatorConfig,
    data_dir: Path,
    sock: socket.socket,
    on_ready: Callable[[RunningEmulator], None] | None,
) -> None:
    prepared = prepare(config, sock)
    running = prepared.running

    def started() -> None:
        if on_ready is not None:
            on_ready(running)

    server = make_server(prepared.uvicorn_config, started)
    running._server = server
    try:
        # Before the server starts, which would log a failure here (a full disk) as a traceback;
        # the socket listens already, so ``status`` finds it answering at once.
        with disk_full_refused():
            daemon.write_pid_file(data_dir, pid_record(running))
        run_server(server, [prepared.sock], prepared.connections)
    finally:
        daemon.remove_pid_file(data_dir, os.getpid())
        running.context.close()
    if not server.started:
        raise PrefctlError("the emulator failed to start", hint="run again with -vv for details")


def start_in_thread(
    config: EmulatorConfig, *, timeout: float = START_TIMEOUT_SECONDS
) -> RunningEmulator:
    """Start the emulator on a background thread of this process; returns once it listens."""
    config.validate()
    if config.workers != 1:
        raise UsageError("an emulator started in a thread serves with one worker")
    prepared = prepare(config, bind(config.host, config.port))
    running = prepared.running
    ready = threading.Event()
    server = make_server(prepared.uvicorn_config, ready.set)

    def run() -> None:
        try:
            run_server(server, [prepared.sock], prepared.connections)
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="prefctl-emulator", daemon=True)
    running._server, running._thread = server, thread
    thread.start()
    if not ready.wait(timeout) or not server.started:
        server.should_exit = True
        thread.join(timeout)
        running.context.close()
        raise UnreachableError(f"the emulator at {running.url} did not start within {timeout} s")
    return running


def prepare(
    config: EmulatorConfig, sock: socket.socket, *, emulator_pid: int | None = None
) -> Prepared:
    """Everything but serving, on the socket bound already (closed if this fails).
    ``emulator_pid`` is given in an API worker: the supervisor's pid, which ``/healthz`` reports
    as the emulator's (the worker then leaves the store check and profile ``local`` to it)."""
    try:
        with disk_full_refused():
            return _prepare_on(config, sock, emulator_pid)
    except BaseException:
        sock.close()
        raise


def open_account(
    config: EmulatorConfig, *, check: bool = True
) -> tuple[LocalAccount, bool, set[str]]:
    """The store's account (created and seeded on first use; the store checked first unless
    ``check`` is false), whether it was created now, and the ids of the store's clients (the
    profiles to point at this emulator); its secrets are registered for redaction."""
    from prefctl.emulator import admin
    from prefctl.store import accounts

    data_dir = config.resolved_data_dir()
    check_free_space(data_dir)
    with admin.open_admin_store(data_dir, config.store) as conn:
        if check and config.store is None:  # a PostgreSQL store is the server's to keep sound
            _check_store(conn, data_dir)
        clock = config.clock or SystemClock()
        boot = admin.bootstrap(conn, clock)
        # Every account's clients: the profiles of all of them follow this emulator.
        client_ids = {client.client_id for client in accounts.list_clients(conn)}
    register_secret(boot.credentials.client_secret)
    register_secret(boot.account.hashkey)
    account = LocalAccount(
        service_client_id=boot.account.service_client_id,
        user_id=boot.credentials.user_id,
        client_id=boot.credentials.client_id,
        client_secret=boot.credentials.client_secret,
        hashkey=boot.account.hashkey,
        signature_user_id=boot.account.signature_user_id,
        environment=boot.account.environment,
    )
    return account, boot.created, client_ids


def emulator_url(config: EmulatorConfig, sock: socket.socket) -> str:
    """The public ``scheme://host:port`` of an emulator listening on ``sock``."""
    scheme = "https" if config.tls_cert else "http"
    return f"{scheme}://{url_host(config.host)}:{sock.getsockname()[1]}"


def new_context(config: EmulatorConfig, url: str, *, pid: int | None = None) -> EmulatorContext:
    """The context of an emulator at ``url`` with ``config``'s options."""
    return EmulatorContext(
        store_path=config.resolved_store(),
        base_url=url,
        clock=config.clock or SystemClock(),
        rng=random.Random(config.seed),
        time_scale=config.time_scale,
        signature_encoding=config.signature_encoding,
        settings={**config.settings, SMTP_SETTING: config.smtp},
        pid=pid if pid is not None else os.getpid(),
    )


def _prepare_on(config: EmulatorConfig, sock: socket.socket, emulator_pid: int | None) -> Prepared:
    import uvicorn

    from prefctl.emulator import oauth

    data_dir = config.resolved_data_dir()
    worker = emulator_pid is not None
    account, created, client_ids = open_account(config, check=not worker)
    ctx: EmulatorContext | None = None
    try:
        url = emulator_url(config, sock)
        ctx = new_context(config, url, pid=emulator_pid)
        app = create_app(ctx)
        connections = ConnectionRegistry(config.limits)
        oauth.key_ring(ctx)  # create the signing key now rather than on the first request
        server_config = uvicorn.Config(
            app,
            host=config.host,
            port=sock.getsockname()[1],
            http=guarded_protocol(connections),
            log_config=None,  # logs go through prefctl's redacting handler
            # Off unless -vvv shows it: uvicorn builds each access line's arguments (client
            # address, quoted path) before the logger drops it, ~2.5 µs a request.
            access_log=logging.getLogger("uvicorn.access").isEnabledFor(logging.INFO),
            proxy_headers=False,
            server_header=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
            ssl_certfile=str(config.tls_cert) if config.tls_cert else None,
            ssl_keyfile=str(config.tls_key) if config.tls_key else None,
        )
        _load_tls(server_config, config)
        ca_bundle = ca_bundle_for(config.tls_cert) if config.tls_cert else None
        if config.config_path is not None and not worker:
            write_local_profile(
                config.config_path,
                auth_url=ctx.auth_url,
                api_url=ctx.api_url,
                account=account,
                ca_bundle=ca_bundle,
                client_ids=client_ids,
            )
    except BaseException:
        if ctx is not None:
            ctx.close()
        raise
    running = RunningEmulator(
        url=url,
        data_dir=data_dir,
        account=account,
        context=ctx,
        pid=ctx.pid,
        created=created,
        profile=PROFILE_NAME if config.config_path is not None else None,
        config_path=config.config_path,
        ca_bundle=ca_bundle,
    )
    return Prepared(running, server_config, sock, connections)


def _check_store(conn: Store, data_dir: Path) -> None:
    """Refuse to serve a damaged store (exit 2, naming the file)."""
    if not check_integrity(conn, paths.store_path(data_dir)):
        log.warning(
            "the store %s was not checked: it is too large to check in %g s",
            paths.store_path(data_dir),
            QUICK_CHECK_SECONDS,
        )


def _load_tls(server_config: Any, config: EmulatorConfig) -> None:
    import ssl

    try:
        server_config.load()
    except (ssl.SSLError, OSError, ValueError) as exc:
        if config.tls_cert is None:
            raise
        raise UsageError(
            f"cannot use {config.tls_cert} and {config.tls_key} for TLS: {os_reason(exc)}",
            hint="give a PEM certificate and its unencrypted private key (prefctl certs issue)",
        ) from None


def pid_record(running: RunningEmulator, worker_pids: tuple[int, ...] = ()) -> daemon.PidRecord:
    """What ``emulator.pid`` says of ``running`` (and of its API workers, if it has them)."""
    return daemon.PidRecord(
        pid=running.pid,
        url=running.url,
        auth_url=running.auth_url,
        api_url=running.api_url,
        data_dir=str(running.data_dir),
        ca_bundle=str(running.ca_bundle) if running.ca_bundle else None,
        profile=running.profile,
        started_at=utc_timestamp(running.context.clock.now()),
        workers=max(1, len(worker_pids)),
        worker_pids=list(worker_pids) or [running.pid],
        store=_recorded_store(running.store),
    )


def _recorded_store(store: Path | str) -> str | None:
    """The PostgreSQL store as the pid file records it, so that the operator commands find it
    (``prefctl deliveries``…): without its password, which stays where it was given."""
    from prefctl.store.postgres import is_postgres_location, redacted

    return redacted(str(store)) if is_postgres_location(store) else None


def make_server(server_config: Any, on_started: Callable[[], None]) -> Any:
    from prefctl.servers.server import quiet_server

    # SIGTERM and Ctrl-C are the normal way to stop the emulator, and it exits 0.
    return quiet_server(server_config, on_started)
