"""What every route of the emulator shares: ``EmulatorContext`` (the store, the clock, the random
source, the time scale and the public URLs) and the background ``Service``s it runs.

    >>> ctx = EmulatorContext(store_path=Path("emulator.db"), base_url="http://127.0.0.1:8750")
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefctl.clock import Clock, SystemClock
from prefctl.store import Store

if TYPE_CHECKING:
    from prefctl.dispatcher.handshake import HandshakeRunner
    from prefctl.emulator.group_writer import GroupWriter
    from prefctl.emulator.import_runs import ImportRuns
    from prefctl.emulator.keys import KeyRing, VerifiedTokens

__all__ = ["API_PATH", "EmulatorContext", "Service", "group_writer"]

API_PATH = "/api/v1"


Service = Callable[["EmulatorContext"], AbstractAsyncContextManager[None]]


@dataclass(eq=False)
class EmulatorContext:
    """What every route of the emulator shares.

    ``base_url`` is the public ``scheme://host:port`` (no trailing slash): the token issuer and the
    root of every URL the emulator hands out. ``time_scale`` divides every delivery-rule duration
    (docs/architecture.md); timestamps stay wall-clock. ``settings`` carries options of later features, each
    key owned by the feature that reads it.
    """

    store_path: Path | str  # a SQLite file, or a PostgreSQL database's URL
    base_url: str
    clock: Clock = field(default_factory=SystemClock)
    rng: random.Random = field(default_factory=random.Random)
    time_scale: float = 1.0
    # What the dispatcher's Signatures are the Base64 of (``raw`` digest or ``hex`` text): a
    # deployment's choice the emulator can play (``emulator start --signature-encoding``).
    signature_encoding: str = "raw"
    settings: dict[str, Any] = field(default_factory=dict)
    # The emulator's pid, which ``/healthz`` reports: this process's, or in an API worker of
    # ``emulator start --workers N`` the supervising process's (``emulator.workers``).
    pid: int = field(default_factory=os.getpid)
    services: list[Service] = field(default_factory=list)
    # Why the store cannot serve, once a request found it damaged (``/healthz`` then says 503).
    store_fault: str | None = None
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _connections: list[Store] = field(default_factory=list, repr=False)
    # The features' long-lived helpers, each made on first use by the function that owns it
    # (``oauth.key_ring``, ``oauth.verified_tokens``, ``provisioning.handshake_runner``,
    # ``context.group_writer``, ``routes.imports``), under ``lock``.
    key_ring: KeyRing | None = field(default=None, repr=False)
    verified_tokens: VerifiedTokens | None = field(default=None, repr=False)
    handshake_runner: HandshakeRunner | None = field(default=None, repr=False)
    group_writer: GroupWriter | None = field(default=None, repr=False)
    import_runs: ImportRuns | None = field(default=None, repr=False)
    # Held by the API's write transactions, so that they queue in order (``routes.write_lock``).
    write_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError("time_scale must be greater than 0")
        self.base_url = self.base_url.rstrip("/")

    @property
    def auth_url(self) -> str:
        """Base of the token service (the ``iss`` of every token)."""
        return self.base_url

    @property
    def api_url(self) -> str:
        """Base of the REST API: resources live under ``{api_url}/{service_client_id}``."""
        return self.base_url + API_PATH

    @property
    def token_url(self) -> str:
        return self.auth_url + "/oauth2/v1/token"

    def scaled(self, seconds: float) -> float:
        """A delivery-rule duration under ``--time-scale``: ``seconds / time_scale``."""
        return seconds / self.time_scale

    def connection(self) -> Store:
        """This thread's connection to the store (opened on first use, closed by ``close``)."""
        conn: Store | None = getattr(self._local, "conn", None)
        if conn is None:
            from prefctl.store.db import connect

            conn = connect(self.store_path)
            self._local.conn = conn
            with self.lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        """Close every connection opened through ``connection``."""
        with self.lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()


def group_writer(ctx: EmulatorContext) -> GroupWriter:
    """The context's writer process for profile writes (made on first use)."""
    writer = ctx.group_writer
    if writer is None:
        from prefctl.emulator.group_writer import GroupWriter

        with ctx.lock:
            if ctx.group_writer is None:
                ctx.group_writer = GroupWriter(ctx.store_path)
            writer = ctx.group_writer
    return writer
