"""The emulator's ASGI application: ``create_app(ctx)`` builds it from an ``EmulatorContext``.

The context is everything the routes share: the store, the clock, the random source, the time
scale and the public URLs. Features plug in through ``EXTENSIONS``: each module listed there exposes
``register(app: FastAPI, ctx: EmulatorContext) -> None``, adds its routes, and may append a
background service to ``ctx.services`` (an async context manager factory entered when the server
starts and left when it stops; the dispatcher runs this way).

    >>> ctx = EmulatorContext(store_path=Path("emulator.db"), base_url="http://127.0.0.1:8750")
    >>> app = create_app(ctx)          # serve with uvicorn; see prefctl.emulator.serve
"""

from __future__ import annotations

import importlib
import os
import random
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from prefctl.clock import Clock, SystemClock

if TYPE_CHECKING:
    from fastapi import FastAPI

# Route modules, in registration order. Each exposes register(app, ctx).
EXTENSIONS: tuple[str, ...] = (
    "prefctl.emulator.oauth",
    "prefctl.emulator.provisioning",
    "prefctl.emulator.api",
    "prefctl.dispatcher.service",
)

API_PATH = "/api/v1"

T = TypeVar("T")

Service = Callable[["EmulatorContext"], AbstractAsyncContextManager[None]]


@dataclass(eq=False)
class EmulatorContext:
    """What every route of the emulator shares.

    ``base_url`` is the public ``scheme://host:port`` (no trailing slash): the token issuer and the
    root of every URL the emulator hands out. ``time_scale`` divides every delivery-rule duration
    (DESIGN §2); timestamps stay wall-clock. ``settings`` carries options of later features, each
    key owned by the feature that reads it.
    """

    store_path: Path
    base_url: str
    clock: Clock = field(default_factory=SystemClock)
    rng: random.Random = field(default_factory=random.Random)
    time_scale: float = 1.0
    settings: dict[str, Any] = field(default_factory=dict)
    services: list[Service] = field(default_factory=list)
    # Why the store cannot serve, once a request found it damaged (``/healthz`` then says 503).
    store_fault: str | None = None
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _connections: list[sqlite3.Connection] = field(default_factory=list, repr=False)
    _shared: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

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

    def shared(self, key: str, factory: Callable[[], T]) -> T:
        """One object per context under ``key``, made by ``factory`` on first use (the token
        signing keys, a feature's long-lived helpers)."""
        with self._lock:
            if key not in self._shared:
                self._shared[key] = factory()
            value: T = self._shared[key]
            return value

    def connection(self) -> sqlite3.Connection:
        """This thread's connection to the store (opened on first use, closed by ``close``)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            from prefctl.store.db import connect

            conn = connect(self.store_path)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        """Close every connection opened through ``connection``."""
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()


def create_app(ctx: EmulatorContext) -> FastAPI:
    """The emulator's application: health, the token service and every extension's routes.

    The store at ``ctx.store_path`` must exist and be migrated (``prefctl.emulator.admin.bootstrap``
    does both); signing keys are created on first use.
    """
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from prefctl import __version__

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for service in ctx.services:
                await stack.enter_async_context(service(ctx))
            yield
        ctx.close()

    app = FastAPI(
        title="prefctl emulator",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        # /profiles/5/ is no resource: a 404 problem, not a redirect built from the Host header.
        redirect_slashes=False,
        # FastAPI's OpenTelemetry bridge looks up three global providers on every request
        # (~4 µs); the emulator exports no telemetry.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.ctx = ctx

    @app.get("/healthz", summary="Readiness", response_model=None)
    def healthz() -> JSONResponse:
        fault = ctx.store_fault
        if fault is None:
            try:
                ctx.connection().execute("SELECT 1 FROM accounts LIMIT 1").fetchall()
            except sqlite3.Error as exc:
                fault = f"the store cannot be read: {exc}"
        if fault is not None:
            unavailable = {"status": "unavailable", "reason": fault, "pid": os.getpid()}
            return JSONResponse(unavailable, status_code=503)
        return JSONResponse(
            {
                "status": "ready",
                "version": __version__,
                "pid": os.getpid(),
                "auth_url": ctx.auth_url,
                "api_url": ctx.api_url,
            }
        )

    for name in EXTENSIONS:
        importlib.import_module(name).register(app, ctx)
    return app
