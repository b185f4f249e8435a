"""The emulator's ASGI application: ``create_app(ctx)`` builds it from an ``EmulatorContext``.

Each feature module exposes ``register(app: FastAPI, ctx: EmulatorContext) -> None``: it adds its
routes, and may append a background service to ``ctx.services`` (an async context manager factory
entered when the server starts and left when it stops; the dispatcher runs this way).
``create_app`` calls them in order: the token service, subscription provisioning, the REST API,
the embedded dispatcher.

    >>> ctx = EmulatorContext(store_path=Path("emulator.db"), base_url="http://127.0.0.1:8750")
    >>> app = create_app(ctx)          # serve with uvicorn; see prefctl.emulator.serve
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

from prefctl.emulator import api, dispatcher_service, oauth, provisioning
from prefctl.emulator.context import API_PATH, EmulatorContext
from prefctl.store.db import check_readable
from prefctl.store.errors import StoreError

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["API_PATH", "EmulatorContext", "create_app"]


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
                check_readable(ctx.connection())
            except StoreError as exc:
                fault = f"the store cannot be read: {exc.reason}"
        if fault is not None:
            unavailable = {
                "status": "unavailable",
                "reason": fault,
                "pid": ctx.pid,
                "worker_pid": os.getpid(),
            }
            return JSONResponse(unavailable, status_code=503)
        return JSONResponse(
            {
                "status": "ready",
                "version": __version__,
                "pid": ctx.pid,
                "worker_pid": os.getpid(),
                "auth_url": ctx.auth_url,
                "api_url": ctx.api_url,
            }
        )

    for feature in (oauth, provisioning, api, dispatcher_service):
        feature.register(app, ctx)
    return app
