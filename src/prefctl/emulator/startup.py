"""What an emulator starts with, and what is checked before anything is created.

``EmulatorConfig`` is the options of one run, validated together; ``probe_port`` and
``check_free_space`` are the checks ``prefctl emulator start`` (and ``--detach``, before its child
starts) makes first, so that a busy port or a full disk creates nothing; ``bind`` opens the
listening socket the server then serves on.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefctl.clock import Clock
from prefctl.config import paths
from prefctl.dispatcher.alerts.mail import SmtpSettings
from prefctl.dispatcher.rule_time import check_time_scale
from prefctl.errors import DiskFullError, UsageError
from prefctl.servers.connections import ConnectionLimits
from prefctl.store.db import is_disk_full
from prefctl.webhooks.signature import RAW, check_encoding

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MAX_WORKERS",
    "MIN_FREE_BYTES",
    "EmulatorConfig",
    "bind",
    "check_free_space",
    "disk_full_refused",
    "probe_port",
    "url_host",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8750
# API worker processes at most: each is a whole API server with a writer process of its own.
MAX_WORKERS = 64


@dataclass(frozen=True)
class EmulatorConfig:
    """The options of one emulator run, validated together by ``validate``.

    ``port`` 0 picks a free port. ``data_dir`` None means ``PREFCTL_DATA_DIR`` or the platform's
    data dir. ``config_path`` is the ``profiles.toml`` that receives profile ``local`` (None: leave
    profiles alone). ``clock``, ``seed`` and ``settings`` are seams for tests and later features.
    ``smtp`` sends failure alerts by SMTP (None: into ``alerts.mbox`` in the data dir).
    ``store`` is a PostgreSQL database's ``postgresql://`` URL to serve instead of the data dir's
    SQLite store (the data dir still holds the pid file, the log and ``alerts.mbox``).
    """

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    data_dir: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    time_scale: float = 1.0
    signature_encoding: str = RAW
    config_path: Path | None = None
    clock: Clock | None = field(default=None, compare=False)
    seed: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    smtp: SmtpSettings | None = None
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    store: str | None = None
    # API processes serving the port (``emulator.workers``); 1 serves everything in this process.
    workers: int = 1

    def resolved_data_dir(self) -> Path:
        return paths.resolve_data_dir(self.data_dir)

    def resolved_store(self) -> Path | str:
        """The store served: ``store`` when given, else the data dir's SQLite file."""
        return self.store or paths.store_path(self.resolved_data_dir())

    def validate(self) -> None:
        """Raise UsageError (exit 2) for options that cannot work together."""
        if not 0 <= self.port <= 65535:
            raise UsageError(f"port must be 0 to 65535, not {self.port}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise UsageError(f"--workers must be 1 to {MAX_WORKERS}, not {self.workers}")
        check_time_scale(self.time_scale)
        check_encoding(self.signature_encoding)
        problem = self.limits.problem()
        if problem is not None:
            raise UsageError(problem)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise UsageError("--tls-cert and --tls-key go together")
        for path in (self.tls_cert, self.tls_key):
            if path is not None and not path.is_file():
                raise UsageError(f"{path} does not exist or is not a file")
        if self.tls_cert is not None:
            self._check_certificate_host(self.tls_cert)
        if self.smtp is not None:
            self.smtp.validate()

    def _check_certificate_host(self, tls_cert: Path) -> None:
        # Profile ``local`` and the readiness check reach the emulator at the host of its URL,
        # so a certificate that does not cover that host would fail every client.
        from prefctl.certs import require_host
        from prefctl.servers.server import is_wildcard_host

        urls = "profile local's URLs" if self.config_path is not None else "the emulator's URL"
        if is_wildcard_host(self.host):
            bind = self.host or "''"
            role = f"the loopback host in {urls} for --host {bind}"
        else:
            role = f"the host in {urls}"
        require_host(tls_cert, url_host(self.host), role=role)


# Free space the data dir's disk must have for the emulator to start (its store's write-ahead
# log, the pid file): with less, every write would fail.
MIN_FREE_BYTES = 1024 * 1024


def check_free_space(data_dir: Path) -> None:
    """Refuse to start on a disk without room to write (exit 2): every write would fail. A data
    dir not made yet is checked on the disk it would be made on."""
    existing = data_dir
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    try:
        disk = os.statvfs(existing)
    except OSError:
        return  # not knowable here: the writes themselves will say
    free = disk.f_bavail * disk.f_frsize
    if free < MIN_FREE_BYTES:
        store = paths.store_path(data_dir)
        kept = "the store is intact" if store.exists() else "nothing was created"
        raise DiskFullError(
            f"the disk of {data_dir} is full ({free // 1024} KiB free; the emulator needs"
            f" {MIN_FREE_BYTES // 1024} KiB to start)",
            hint=f"free some space on it, or use another --data-dir; {kept}",
        )


@contextmanager
def disk_full_refused() -> Iterator[None]:
    """A full disk met while starting (ENOSPC writing a file) as one line, exit 2."""
    try:
        yield
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        where = f" of {exc.filename}" if exc.filename else ""
        raise DiskFullError(
            f"the disk{where} is full: the emulator cannot start",
            hint="free some space on it, or use another --data-dir",
        ) from None


def probe_port(host: str, port: int) -> None:
    """UsageError when ``host:port`` cannot be listened on now (in use, unknown host): what
    ``--detach`` checks before it creates the data dir, as its child binds the port itself."""
    if port != 0:
        bind(host, port).close()


def bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A socket listening on ``host:port``; ``reuse_port`` sets ``SO_REUSEPORT`` first, so that
    the API workers' sockets can share the port (``emulator.workers`` says why)."""
    from prefctl.servers.server import cannot_listen

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise cannot_listen(host, port, exc) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            running = _emulator_listening(host, port)
            if running is not None:
                raise running from None
        raise cannot_listen(host, port, exc) from None
    return sock


def _emulator_listening(host: str, port: int) -> UsageError | None:
    """ "an emulator already runs at URL (pid N)" when the program on a busy port is a prefctl
    emulator (its ``/healthz`` says so, with its pid); None for any other program."""
    import httpx

    url = f"http://{url_host(host)}:{port}"
    try:
        health = httpx.get(f"{url}/healthz", timeout=1.0, trust_env=False).json()
    except (httpx.HTTPError, ValueError, OSError):
        return None
    if not isinstance(health, dict) or not isinstance(health.get("pid"), int):
        return None
    return UsageError(
        f"an emulator already runs at {url} (pid {health['pid']})",
        hint="use it as it is, stop it with 'prefctl emulator stop --data-dir DIR' "
        "(its data dir), or choose another port with --port",
    )


def url_host(host: str) -> str:
    # A wildcard bind is reached through loopback from this machine.
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
