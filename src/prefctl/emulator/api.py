"""The emulator's REST API extension (docs/api.md): routers, RFC 9457 errors, limits, OpenAPI.

``register(app, ctx)`` (called by ``app.create_app``) does four things:

1. includes the routers of ``prefctl.emulator.routes`` (profiles, imports, programs, events,
   settings, and subscriptions and the validation URL once those modules exist), and the
   background ``service`` a route module may have (the imports' runs);
2. answers **every** error as ``application/problem+json`` ``{type, title, status, detail,
   errors?}``: ``ProblemError``s, ``PrefctlError``s (see ``routes._common.problem_for``), FastAPI's
   request validation (400, ``errors: [{field, message}]`` with the wire path of each field),
   Starlette's HTTP errors (404 for an unknown path, 405 with ``Allow``), and anything unexpected
   (500, logged; the test suite fuzzes the API to prove none happen). A store still locked by
   another process after the busy timeout is a 503 with ``Retry-After``, a full disk a 507, a
   damaged store file a 503 (see ``routes._common.store_problem``; the log says why);
3. refuses request bodies over ``MAX_BODY_BYTES`` with 413: at once when ``Content-Length`` says
   so, else while the body is read, so an oversized body is never held in memory;
4. serves an OpenAPI at ``/openapi.json`` that says so: FastAPI's 422 answers replaced by the 400
   problem, every account route documents 400, 401, 403 (and 404, 413, 415 where they apply) and
   the permission it requires (``x-permission``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from prefctl.emulator.context import API_PATH, EmulatorContext, group_writer
from prefctl.emulator.routes._common import (
    ACCOUNT_PREFIX,
    MAX_BODY_BYTES,
    PROBLEM_MEDIA_TYPE,
    ProblemError,
    get_ctx,
    permission_of,
    problem_for,
    problem_response,
    store_problem,
)
from prefctl.emulator.routes._lanes import check_lanes, lane_routes
from prefctl.errors import DiskFullError, PrefctlError
from prefctl.models.problem import FieldError, Problem, problem_from_validation_errors
from prefctl.store.db import (
    DRIVER_ERROR,
    StoreDamagedError,
    damage_found,
    is_damaged,
    is_disk_full,
    store_error,
)
from prefctl.store.errors import StoreError

__all__ = ["BodyLimit", "register"]

log = logging.getLogger(__name__)

# Route modules under prefctl.emulator.routes, each exposing ``router``; optional ones are
# included when they exist (they are built separately).
ROUTERS: tuple[str, ...] = ("profiles", "imports", "programs", "events", "settings")
OPTIONAL_ROUTERS: tuple[str, ...] = ("subscriptions", "validation")

_BODY_METHODS = frozenset({"post", "put", "patch"})
_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_STANDARD_ERRORS = {
    "400": "The request is invalid: a parameter or the body (each field in `errors`).",
    "401": "The Bearer token is missing, malformed, expired, tampered with or revoked.",
    "403": "The token belongs to another account, or its user lacks the permission.",
}
_BODY_ERRORS = {
    "413": f"The request body is larger than {MAX_BODY_BYTES} bytes.",
    "415": "The Content-Type is not one this operation accepts.",
}
_NOT_FOUND = "The resource does not exist in this account."


def register(app: FastAPI, ctx: EmulatorContext) -> None:
    """Add the REST API to the emulator's ``app`` (see the module docstring)."""
    # Routes reach the context through the request (routes._common.get_ctx).
    ctx.services.append(_group_writer_service)
    _install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.add_middleware(NulRefused)
    app.add_middleware(WritesStopOnDamage, ctx=ctx)
    modules = [f"prefctl.emulator.routes.{name}" for name in ROUTERS]
    modules += [
        module
        for module in (f"prefctl.emulator.routes.{name}" for name in OPTIONAL_ROUTERS)
        if importlib.util.find_spec(module) is not None
    ]
    loaded = [importlib.import_module(module) for module in modules]
    routers: list[APIRouter] = [module.router for module in loaded]
    # A route module's background work (``service``) stops before the writer process it uses.
    ctx.services += [module.service for module in loaded if hasattr(module, "service")]
    for router in routers:
        app.include_router(router)
    # Every API route with its own path, for the Allow header of a 405 (see _allowed).
    app.state.api_routes = [route for router in routers for route in router.routes]
    # Routes with a direct lane are matched first, without walking the table (see LaneRoute),
    # when FastAPI is a release they were tested with.
    check_lanes()
    app.router.routes[:0] = lane_routes(routers)
    permissions = _permissions(routers)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app, permissions)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def _group_writer_service(ctx: EmulatorContext) -> AsyncIterator[None]:
    """Starts the writer process with the server, so that the first write does not wait for
    its start-up; lets the profile writes still queued finish when the server stops."""
    group_writer(ctx).start()
    try:
        yield
    finally:
        await asyncio.to_thread(group_writer(ctx).stop)


# -- errors ----------------------------------------------------------------------------------------
Handler = Callable[[Request, Any], Awaitable[Response]]


def _install_error_handlers(app: FastAPI) -> None:
    handlers: dict[type[Exception], Handler] = {
        ProblemError: _on_problem,
        HTTPException: _on_http_error,
        RequestValidationError: _on_validation_error,
        PrefctlError: _on_prefctl_error,
        ClientDisconnect: _on_client_disconnect,
        StoreError: _on_store_error,
        DRIVER_ERROR: _on_driver_error,
        Exception: _on_unexpected_error,
    }
    for exc_class, handler in handlers.items():
        app.add_exception_handler(exc_class, handler)


async def _on_problem(_request: Request, exc: ProblemError) -> Response:
    return problem_response(exc.problem, exc.headers)


async def _on_http_error(request: Request, exc: HTTPException) -> Response:
    # Starlette's own errors: 404 (no such path), 405 (with Allow), and any HTTPException a
    # dependency raises. Their detail defaults to the status phrase, which the title already says.
    problem = ProblemError(exc.status_code).problem
    if exc.status_code == 404:
        problem.detail = f"no resource at {request.url.path}"
    elif exc.status_code == 405:
        problem.detail = f"{request.method} is not allowed on {request.url.path}"
        # Starlette names the methods of the first route of the path only; the path may have
        # one route per method, and Allow must list them all (RFC 9110 §15.5.6).
        return problem_response(problem, {**(exc.headers or {}), "Allow": _allowed(request)})
    elif exc.detail and exc.detail != problem.title:
        problem.detail = str(exc.detail)
    return problem_response(problem, exc.headers)


def _allowed(request: Request) -> str:
    from starlette.routing import Match

    methods: set[str] = set()
    for route in request.app.state.api_routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods.update(route.methods or ())
    return ", ".join(sorted(methods))


async def _on_validation_error(_request: Request, exc: RequestValidationError) -> Response:
    errors = list(exc.errors())
    for error in errors:
        if error.get("type") == "json_invalid":
            reason = (error.get("ctx") or {}).get("error", "malformed JSON")
            problem = Problem(
                title="Invalid request body",
                status=400,
                detail=f"the request body is not valid JSON: {reason}",
            )
            return problem_response(problem)
    in_body = any(tuple(error.get("loc", ()))[:1] == ("body",) for error in errors)
    title = "Invalid request body" if in_body else "Invalid request"
    return problem_response(problem_from_validation_errors(errors, title=title))


async def _on_prefctl_error(request: Request, exc: PrefctlError) -> Response:
    damaged = is_damaged(exc)  # a store found damaged by one of its checks
    if damaged or isinstance(exc, DiskFullError):
        _log_store_fault(request, exc)
    problem = (store_problem(exc, get_ctx(request).store_path) if damaged else None) or problem_for(
        exc
    )
    return problem_response(problem.problem, problem.headers)


async def _on_client_disconnect(_request: Request, _exc: ClientDisconnect) -> Response:
    # The client hung up while sending its body; nobody reads this answer.
    return problem_response(ProblemError(400, "Client Disconnected").problem)


async def _on_driver_error(request: Request, exc: Exception) -> Response:
    # A plain read (outside a transaction) lets the driver's error through: the store words it.
    translated = store_error(exc) or exc
    if store_problem(translated, get_ctx(request).store_path) is None:
        return await _on_unexpected_error(request, exc)
    return await _on_store_error(request, translated)


async def _on_store_error(request: Request, exc: Exception) -> Response:
    problem = store_problem(exc, get_ctx(request).store_path)
    if problem is None:
        return await _on_unexpected_error(request, exc)
    _log_store_fault(request, exc)
    return problem_response(problem.problem, problem.headers)


def _log_store_fault(request: Request, exc: BaseException) -> None:
    """Say in the log why a write or read failed (a full disk, a damaged store file); a damaged
    store also turns ``/healthz`` to 503."""
    ctx = get_ctx(request)
    if is_damaged(exc):
        why = exc.reason if isinstance(exc, StoreError) else exc
        reason = ctx.store_fault = f"the store {ctx.store_path} is damaged: {why}"
    elif isinstance(exc, DiskFullError):
        reason = str(exc)
    elif is_disk_full(exc):
        reason = f"the disk is full: {exc}"
    else:
        return  # busy: an ordinary wait, not a fault
    log.error("%s (%s %s)", reason, request.method, request.url.path)


async def _on_unexpected_error(request: Request, exc: Exception) -> Response:
    if is_disk_full(exc):  # a file other than the store (OSError ENOSPC)
        _log_store_fault(request, exc)
        return problem_response(problem_for(DiskFullError("the disk is full")).problem)
    # A damaged store may fail in any way (a stored body that no longer parses, a row of the
    # wrong shape): an unexpected error on a store SQLite finds damaged is the damage's.
    ctx = get_ctx(request)
    if ctx.store_fault is None:
        ctx.store_fault = await asyncio.to_thread(damage_found, ctx.store_path)  # names the store
    if ctx.store_fault is not None:
        log.error("%s (%s %s)", ctx.store_fault, request.method, request.url.path)
        damaged = store_problem(StoreDamagedError(ctx.store_fault), ctx.store_path)
        assert damaged is not None  # a damaged store is a 503
        return problem_response(damaged.problem, damaged.headers)
    # Starlette re-raises after answering, so the server logs the traceback once.
    log.error("unexpected %s on %s %s", type(exc).__name__, request.method, request.url.path)
    problem = Problem(
        title="Internal Server Error",
        status=500,
        detail="the emulator failed unexpectedly; its log has the details",
    )
    return problem_response(problem)


# -- a damaged store -------------------------------------------------------------------------------
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


class WritesStopOnDamage:
    """ASGI middleware: once the store was found damaged (``ctx.store_fault``), every request
    that may write is answered 503 naming the store before it reaches a route, so nothing more
    is written to it (reads go on: they answer what is still sound, or 503)."""

    def __init__(self, app: ASGIApp, ctx: EmulatorContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fault = self.ctx.store_fault
        if fault is not None and scope["type"] == "http" and scope["method"] not in _READS:
            log.error("%s (%s %s: refused)", fault, scope["method"], scope["path"])
            damaged = store_problem(StoreDamagedError(fault), self.ctx.store_path)
            assert damaged is not None  # a damaged store is a 503
            await problem_response(damaged.problem, damaged.headers)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class NulRefused:
    """ASGI middleware: 400 for a query string that holds the NUL character (``%00``): no
    parameter is meant to hold it and PostgreSQL's text cannot, so both backends refuse it alike
    (bodies: ``routes._common.refuse_nul``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and b"%00" in scope["query_string"]:
            problem = Problem(
                title="Invalid request",
                status=400,
                detail="the query holds a NUL character (%00), which no parameter accepts",
            )
            await problem_response(problem)(scope, receive, send)
            return
        await self.app(scope, receive, send)


# -- body size -------------------------------------------------------------------------------------
class BodyLimit:
    """ASGI middleware: 413 for request bodies over ``max_bytes``, checked before and while the
    body is read (a chunked body has no Content-Length to trust)."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            response = problem_response(self._too_large().problem, {"Connection": "close"})
            await response(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise self._too_large()
            return message

        await self.app(scope, limited_receive, send)

    def _too_large(self) -> ProblemError:
        return ProblemError(
            413,
            "Content Too Large",
            f"the request body is larger than {self.max_bytes} bytes",
        )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


# -- OpenAPI ---------------------------------------------------------------------------------------
def _permissions(routers: list[APIRouter]) -> dict[tuple[str, str], str]:
    """(path, method) → the permission its ``require`` dependency checks."""
    found: dict[tuple[str, str], str] = {}
    for router in routers:
        for route in router.routes:
            if isinstance(route, APIRoute):
                permission = _required_permission(route.dependant)
                if permission is not None:
                    for method in route.methods or ():
                        found[(route.path, method.lower())] = permission
    return found


def _required_permission(dependant: Dependant) -> str | None:
    # FastAPI's internals, read with defaults: without them the document only lacks x-permission.
    for sub in getattr(dependant, "dependencies", ()):
        permission = permission_of(getattr(sub, "call", None)) or _required_permission(sub)
        if permission is not None:
            return permission
    return None


def document(app: FastAPI, permissions: dict[tuple[str, str], str]) -> dict[str, Any]:
    """The OpenAPI document of ``app`` with the problem answers and each operation's permission
    (``x-permission``) described (see the module docstring)."""
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=(
            "The prefctl emulator: the preference and consent service on your machine. "
            f"Account resources live under `{ACCOUNT_PREFIX}` and take an `Authorization: "
            "Bearer` token from the token endpoint. Errors are RFC 9457 problem details."
        ),
        routes=app.routes,
    )
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    problem_schema.pop("$defs", None)
    schemas["Problem"] = problem_schema
    schemas["FieldError"] = FieldError.model_json_schema()
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            if isinstance(operation, dict) and "responses" in operation:
                _document_errors(path, method, operation)
                permission = permissions.get((path, method))
                if permission is not None:
                    operation["x-permission"] = permission
                    note = f"Requires the permission `{permission}`."
                    described = operation.get("description")
                    operation["description"] = f"{described}\n\n{note}" if described else note
    return schema


def _document_errors(path: str, method: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation["responses"]
    had_validation = responses.pop("422", None) is not None
    wanted: dict[str, str] = {}
    if path.startswith(ACCOUNT_PREFIX):
        wanted.update(_STANDARD_ERRORS)
        if method in _BODY_METHODS:
            wanted["413"] = _BODY_ERRORS["413"]
        if "requestBody" in operation:
            wanted["415"] = _BODY_ERRORS["415"]
        if path.count("{") > 1:
            wanted["404"] = _NOT_FOUND
    elif had_validation or path.startswith(API_PATH):
        wanted["400"] = _STANDARD_ERRORS["400"]
    for status, description in wanted.items():
        responses.setdefault(status, {"description": description})
    for status, response in responses.items():
        if status[:1] in ("4", "5"):
            response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": _PROBLEM_REF}}
