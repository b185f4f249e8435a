"""Plumbing every REST route of the emulator shares (docs/api.md).

A route module builds its router with ``account_router(tag)`` (prefix ``ACCOUNT_PREFIX``, JSON
bodies parsed by orjson: see ``WireRoute``) and declares, per operation, the permission it needs;
the dependency authenticates the bearer token, checks that its ``scid`` is the
``{service_client_id}`` of the path and that its user holds the permission, and hands the route the
``Principal``::

    router = account_router("profiles")

    @router.get("/profiles/{profile_id}", responses=problems(404))
    def get_profile(request: Request, profile_id: int, principal: ProfilesRead) -> Response:
        profile = profiles.get_profile(connection(request), principal.service_client_id, profile_id)
        if profile is None:
            raise ProblemError(404, "Not Found", f"profile {profile_id} not found")
        return json_response(profile)

Errors are raised, never returned: ``ProblemError(status, title, detail, errors)`` becomes an RFC
9457 ``application/problem+json`` answer (``prefctl.emulator.api`` installs the handlers), and so do
``PrefctlError``s that reach the framework (``NotFoundError`` → 404, ``UsageError`` → 400,
``AuthError`` → 403; see ``problem_for``).

Routes that read the store are plain ``def`` functions: FastAPI runs them in its thread pool, and
``connection(request)`` is that thread's SQLite connection (``EmulatorContext.connection``). Write
transactions run under ``write_lock(request)`` so that the API's writers queue in order instead of
in SQLite's busy handler; profile writes are ``async`` routes that queue their write for the
emulator's writer process (``emulator.group_writer``). The one store access on the event loop is
the token check of ``require`` (see there).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import APIRouter, Depends, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from prefctl.emulator.context import API_PATH, EmulatorContext
from prefctl.emulator.oauth import (
    InvalidTokenError,
    Principal,
    authenticate_bearer,
    one_authorization,
)
from prefctl.emulator.routes._lanes import WireRoute
from prefctl.errors import AuthError, DiskFullError, NotFoundError, PrefctlError, UsageError
from prefctl.models.problem import FieldError, Problem, problem_from_validation_errors
from prefctl.store import Store

__all__ = [
    "ACCOUNT_PREFIX",
    "JSON_MEDIA_TYPE",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "PROBLEM_MEDIA_TYPE",
    "EventsRead",
    "JsonContent",
    "NoBody",
    "Principal",
    "ProblemError",
    "ProfilesRead",
    "ProfilesWrite",
    "ProgramsRead",
    "RawBody",
    "SettingsRead",
    "SettingsWrite",
    "SubscriptionsRead",
    "SubscriptionsWrite",
    "accepts",
    "account_router",
    "account_url",
    "check_depth",
    "connection",
    "created",
    "get_ctx",
    "json_response",
    "no_content",
    "parse_json",
    "permission_of",
    "problem_for",
    "problem_response",
    "problems",
    "raw_body",
    "refuse_nul",
    "require",
    "require_media_type",
    "store_problem",
    "validate",
    "write_lock",
]

M = TypeVar("M", bound=BaseModel)

# Every account resource lives under {api_url}/{service_client_id}.
ACCOUNT_PREFIX = API_PATH + "/{service_client_id}"
JSON_MEDIA_TYPE = "application/json"
PROBLEM_MEDIA_TYPE = "application/problem+json"
# Request bodies above this size are refused with 413 while they are read (prefctl.emulator.api).
MAX_BODY_BYTES = 1024 * 1024
# Levels of arrays and objects in a JSON request body at most (see ``check_depth``).
MAX_JSON_DEPTH = 64
# The ``EmulatorContext.shared`` key of the writer lock (see ``write_lock``).
_REALM = 'Bearer realm="prefctl-emulator"'

# Documents the Bearer scheme in the OpenAPI; the header itself is read and checked by ``require``.
_BEARER = HTTPBearer(
    auto_error=False,
    bearerFormat="JWT",
    description="An access token from POST {auth_url}/oauth2/v1/token (client credentials).",
)


class ProblemError(HTTPException):
    """An RFC 9457 problem to answer with: ``raise ProblemError(404, "Not Found", "…")``.

    ``errors`` lists invalid fields as ``FieldError``s or ``{"field", "message"}`` mappings;
    ``headers`` are sent with the answer (``WWW-Authenticate``, ``Allow``…). It subclasses
    Starlette's ``HTTPException`` so that FastAPI lets it through untouched wherever it is raised
    (inside a dependency, or while a body is being read).
    """

    def __init__(
        self,
        status: int,
        title: str | None = None,
        detail: str | None = None,
        errors: Iterable[FieldError | Mapping[str, str]] | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        type: str = "about:blank",  # the RFC 9457 member name
    ) -> None:
        super().__init__(status_code=status, detail=detail, headers=dict(headers or {}))
        self.problem = Problem(
            type=type,
            title=title or _phrase(status),
            status=status,
            detail=detail,
            errors=None if errors is None else [_field_error(e) for e in errors],
        )


def _field_error(error: FieldError | Mapping[str, str]) -> FieldError:
    if isinstance(error, FieldError):
        return error
    return FieldError(field=str(error.get("field", "")), message=str(error.get("message", "")))


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


# -- responses -------------------------------------------------------------------------------------
def json_response(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """A JSON answer serialized with orjson (wire dicts are already JSON-ready)."""
    return Response(orjson.dumps(body), status, dict(headers or {}), JSON_MEDIA_TYPE)


def created(body: Any, location: str) -> Response:
    """``201 Created`` with ``body`` and ``Location: location`` (see ``account_url``)."""
    return json_response(body, 201, {"Location": location})


def no_content() -> Response:
    return Response(status_code=204)


def problem_response(problem: Problem, headers: Mapping[str, str] | None = None) -> Response:
    """The ``application/problem+json`` answer of ``problem``."""
    return Response(
        orjson.dumps(problem.to_json_dict()),
        problem.status,
        dict(headers or {}),
        PROBLEM_MEDIA_TYPE,
    )


def problem_for(exc: PrefctlError) -> ProblemError:
    """The problem a core error becomes: NotFoundError 404, UsageError 400, InvalidTokenError
    401, AuthError 403, any other PrefctlError 409 (the request conflicts with the state of the
    resource, e.g. an import already executed); DiskFullError 507 (see ``store_problem``)."""
    if isinstance(exc, DiskFullError):
        return _disk_full()
    if isinstance(exc, NotFoundError):
        return ProblemError(404, "Not Found", exc.message)
    if isinstance(exc, UsageError):
        return ProblemError(400, "Bad Request", exc.message)
    if isinstance(exc, InvalidTokenError):
        return _unauthorized(exc)
    if isinstance(exc, AuthError):
        return ProblemError(403, "Forbidden", exc.message)
    return ProblemError(409, "Conflict", exc.message)


def store_problem(exc: BaseException, store: object = None) -> ProblemError | None:
    """The problem a failure of the store becomes, or None when it is not one the emulator
    expects (a bug: 500). A full disk is a 507 (nothing of the write was stored); a store locked
    by another process past the busy timeout a 503 with ``Retry-After``; a damaged store file a
    503 naming the ``store`` file (``/healthz`` then answers 503 too)."""
    from prefctl.store.db import is_busy, is_damaged, is_disk_full

    if is_disk_full(exc):
        return _disk_full()
    if is_busy(exc):  # a long admin command held the write lock
        detail = "the store is busy; retry in a moment"
        return ProblemError(503, "Service Unavailable", detail, headers={"Retry-After": "1"})
    if is_damaged(exc):
        where = "" if store is None else f" {store}"
        detail = f"the emulator's store{where} is damaged and cannot be read; its log says how"
        return ProblemError(503, "Service Unavailable", detail)
    return None


def _disk_full() -> ProblemError:
    detail = (
        "the disk of the emulator's store is full: nothing was written; retry once it has space"
    )
    return ProblemError(507, "Insufficient Storage", detail)


def account_url(request: Request, *segments: object) -> str:
    """The absolute URL of a resource of the request's account:
    ``account_url(request, "profiles", 1001)`` → ``{api_url}/DEMO_CORP/profiles/1001``."""
    base = f"{get_ctx(request).api_url}/{request.path_params['service_client_id']}"
    return "/".join([base, *(str(segment) for segment in segments)])


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` for route-specific error statuses (409, 404…), as problem bodies.
    401, 403, 400, 413 and 415 are added to every account route by ``prefctl.emulator.api``."""
    return {status: {"model": Problem, "description": _phrase(status)} for status in statuses}


# -- routers ---------------------------------------------------------------------------------------
def account_router(tag: str) -> APIRouter:
    """The router of one resource under ``ACCOUNT_PREFIX`` (routes are ``WireRoute``s)."""
    return APIRouter(prefix=ACCOUNT_PREFIX, tags=[tag], route_class=WireRoute)


# -- request context -------------------------------------------------------------------------------
def get_ctx(request: Request) -> EmulatorContext:
    """The emulator's context (set by ``create_app``)."""
    ctx: EmulatorContext = request.app.state.ctx
    return ctx


def connection(request: Request) -> Store:
    """The store connection of the thread serving this request (call from a ``def`` route)."""
    return get_ctx(request).connection()


def write_lock(request: Request) -> threading.Lock:
    """The emulator's one writer lock: hold it around a store write transaction.

    SQLite admits one writer; threads that collide on ``BEGIN IMMEDIATE`` wait in SQLite's busy
    handler, which sleeps in steps of up to 100 ms instead of waking when the lock frees. Taking
    this lock first queues this process's writers (settings, imports) in order instead. Profile
    writes run in the writer process (``emulator.group_writer``), which cannot take it: they meet
    these rarer writes, and the dispatcher's, in SQLite's busy handler.
    """
    return get_ctx(request).write_lock


# -- authentication and authorization --------------------------------------------------------------
Authorize = Callable[..., Awaitable[Principal]]


def require(permission: str) -> Authorize:
    """The dependency that admits a request holding ``permission`` and returns its Principal.

    401 (``WWW-Authenticate: Bearer … error="invalid_token"``) when the Authorization header is
    missing or its token does not authenticate, and (``error="invalid_request"``) when the request
    has two Authorization headers; 403 when the token belongs to another account than
    the path's ``{service_client_id}`` or its user lacks ``permission``.

    It runs on the event loop: the token's signature is verified once per token (cached), and
    what remains is one read of four primary-key lookups that WAL readers never wait for; a
    thread-pool hop for it cost more CPU than the read, on every request (bench/api.py).
    """
    return _requirement(permission)


@functools.cache
def _requirement(permission: str) -> Authorize:
    async def authorize(
        request: Request,
        service_client_id: Annotated[
            str, Path(description="The account (service client id) the resource belongs to.")
        ],
        _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    ) -> Principal:
        try:
            authorization = one_authorization(request.headers.getlist("authorization"))
            principal = authenticate_bearer(get_ctx(request), authorization)
        except InvalidTokenError as exc:
            raise _unauthorized(exc) from None
        if principal.service_client_id != service_client_id:
            raise ProblemError(
                403, "Forbidden", "the access token belongs to another account than the path names"
            )
        if not principal.allows(permission):
            raise ProblemError(
                403,
                "Forbidden",
                f"user {principal.user_id!r} lacks the permission {permission!r}",
                headers={"WWW-Authenticate": f'{_REALM}, error="insufficient_scope"'},
            )
        return principal

    authorize.__name__ = f"require_{permission.replace(':', '_')}"
    _PERMISSIONS[authorize] = permission
    return authorize


_PERMISSIONS: dict[Authorize, str] = {}


def permission_of(dependency: Callable[..., Any] | None) -> str | None:
    """The permission a ``require`` dependency checks (None for any other callable); the OpenAPI
    lists it per operation."""
    return _PERMISSIONS.get(dependency) if dependency is not None else None


def _unauthorized(exc: InvalidTokenError) -> ProblemError:
    description = exc.message.replace('"', "'")
    return ProblemError(
        401,
        "Unauthorized",
        exc.message,
        headers={
            "WWW-Authenticate": (
                f'{_REALM}, error="{exc.error}", error_description="{description}"'
            )
        },
    )


# -- request bodies --------------------------------------------------------------------------------
def require_media_type(request: Request, *media_types: str) -> str:
    """The request's media type when it is one of ``media_types``; 415 otherwise (with the
    accepted types in ``Accept`` for POST/PUT, ``Accept-Patch`` for PATCH)."""
    raw = request.headers.get("content-type", "")
    media_type = raw.partition(";")[0].strip().lower()
    if media_type in media_types:
        return media_type
    accepted = ", ".join(media_types)
    header = "Accept-Patch" if request.method == "PATCH" else "Accept"
    shown = f"{media_type!r}" if media_type else "no Content-Type"
    raise ProblemError(
        415,
        "Unsupported Media Type",
        f"{shown} is not accepted here; send {accepted}",
        headers={header: accepted},
    )


def accepts(*media_types: str) -> Callable[[Request], Awaitable[str | None]]:
    """A dependency answering 415 unless a request body comes with one of ``media_types``;
    returns the media type, or None when the request has no body. Declare it after the
    permission so that 401/403 come first: ``_: Annotated[str | None, Depends(accepts(…))]``."""
    return _acceptor(media_types)


@functools.cache
def _acceptor(media_types: tuple[str, ...]) -> Callable[[Request], Awaitable[str | None]]:
    async def check_media_type(request: Request) -> str | None:
        if not _has_body(request):
            return None
        return require_media_type(request, *media_types)

    return check_media_type


def _has_body(request: Request) -> bool:
    headers = request.headers
    if "content-type" in headers or "transfer-encoding" in headers:
        return True
    return headers.get("content-length", "0").strip() not in ("", "0")


async def raw_body(request: Request) -> bytes:
    """A dependency giving the request body as bytes (the size limit applies while reading)."""
    return await request.body()


def parse_json(raw: bytes) -> Any:
    """The JSON value of a request body; 400 when it is not JSON, or nested deeper than
    ``MAX_JSON_DEPTH``."""
    if not raw.strip():
        raise ProblemError(400, "Invalid request body", "the request body is empty")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProblemError(
            400, "Invalid request body", f"the request body is not valid JSON: {exc}"
        ) from None
    check_depth(raw, value, "the request body")
    refuse_nul(raw, value, "the request body")
    return value


def refuse_nul(raw: bytes, value: Any, what: str) -> None:
    """400 when a text in ``value`` (parsed from ``raw``) holds the NUL character (``\\u0000``):
    no field of the API is meant to hold it, and PostgreSQL's text cannot, so the emulator refuses
    it on either backend alike (docs/api.md). A body without that escape is not walked."""
    if b"\\u0000" not in raw:
        return  # the only way JSON spells NUL: the common case, without a walk
    pending: list[Any] = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            pending.extend(node.keys())
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, str) and "\x00" in node:
            raise ProblemError(
                400,
                "Invalid request body",
                f"{what} holds a NUL character (\\u0000), which no text of the API accepts",
            )


def check_depth(raw: bytes, value: Any, what: str) -> None:
    """400 when ``value`` (parsed from ``raw``) nests arrays and objects more than
    ``MAX_JSON_DEPTH`` levels deep: no resource of the API is nested more than a few levels, and
    a value nested hundreds deep fails to pickle for the writer process or to be stored."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return  # too few brackets to nest that deep: the common case, without a walk
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(MAX_JSON_DEPTH):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            return
    raise ProblemError(
        400, "Invalid request body", f"{what} is nested more than {MAX_JSON_DEPTH} levels deep"
    )


def validate(model: type[M], data: Any) -> M:
    """``data`` validated by ``model``; 400 listing each invalid field by its wire path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problem = problem_from_validation_errors(exc.errors(include_url=False), model=model)
        raise ProblemError(400, problem.title, problem.detail, problem.errors) from None


# A request body with Content-Type application/json (or none at all), else 415.
JsonContent = Annotated[str | None, Depends(accepts(JSON_MEDIA_TYPE))]


async def no_body(request: Request) -> None:
    """A dependency for an operation that takes no body: none at all, or JSON that is ignored
    (clients often send ``{}``). A body that is not JSON at all is 400, as for every other
    route (docs/api.md), and JSON in another media type 415: nothing is read or written."""
    if not _has_body(request):
        return
    raw = await request.body()
    if raw.strip():
        parse_json(raw)
    require_media_type(request, JSON_MEDIA_TYPE)


# For an operation without a request body: see ``no_body``.
NoBody = Annotated[None, Depends(no_body)]
RawBody = Annotated[bytes, Depends(raw_body)]

# Route parameters admitting a request that holds one permission (docs/api.md):
# ``def route(principal: ProfilesRead) -> Response``.
ProfilesRead = Annotated[Principal, Depends(require("profiles:read"))]
ProfilesWrite = Annotated[Principal, Depends(require("profiles:write"))]
SubscriptionsRead = Annotated[Principal, Depends(require("subscriptions:read"))]
SubscriptionsWrite = Annotated[Principal, Depends(require("subscriptions:write"))]
SettingsRead = Annotated[Principal, Depends(require("settings:read"))]
SettingsWrite = Annotated[Principal, Depends(require("settings:write"))]
ProgramsRead = Annotated[Principal, Depends(require("programs:read"))]
EventsRead = Annotated[Principal, Depends(require("events:read"))]
