"""``/imports``: bulk import — initiate, stage records, execute, status. No events, ever.

    POST /imports                      → 201, the import (State Initiated) and its Location
    POST /imports/{ImportId}/records   → 200, records added (State Staging); repeatable
    POST /imports/{ImportId}/execute   → 202, State Queued; it runs in the background
    GET  /imports/{ImportId}           → the import: State, counters and the first 100 errors

Records are a JSON array of profile objects (``application/json``) or one object per line
(``application/x-ndjson``). Each is an upsert (``store.imports``): with the ProfileId of an existing
profile it replaces it, without one it creates a profile; invalid records become per-record errors.

Execution is a task on the event loop that hands the import to the emulator's writer process one
step at a time (``store.imports.ImportStep``: at most 500 records or 50 ms, one transaction), so
the profile writes queued meanwhile (``emulator.group_writer``) are served between two steps and
GET shows ProcessedRecords advance through Queued → Processing → Completed (or Failed). An error
that stops a step marks the import Failed with it; a writer process that dies mid-step (the step's
outcome unknown) is retried, as a step is applied whole or not at all.

A stop cancels the runs between two steps; ``service`` (started with the server by
``emulator.api``) resumes every Queued or Processing import when the emulator starts again, and
executing one that nothing in this emulator is running resumes it as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import Depends, Path, Request
from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from prefctl.emulator.context import EmulatorContext, group_writer
from prefctl.emulator.import_runs import ImportRuns
from prefctl.emulator.routes._common import (
    JSON_MEDIA_TYPE,
    NoBody,
    ProblemError,
    ProfilesRead,
    ProfilesWrite,
    RawBody,
    accepts,
    account_router,
    account_url,
    check_depth,
    connection,
    created,
    get_ctx,
    json_response,
    parse_json,
    problems,
    refuse_nul,
    write_lock,
)
from prefctl.models._base import WireModel
from prefctl.store import Store
from prefctl.store import imports as store
from prefctl.store.db import transaction
from prefctl.store.timestamps import epoch

__all__ = ["NDJSON_MEDIA_TYPE", "ImportStatus", "router", "service"]

log = logging.getLogger(__name__)

NDJSON_MEDIA_TYPE = "application/x-ndjson"
MAX_ID = 2**63 - 1

router = account_router("imports")

ImportId = Annotated[int, Path(ge=1, le=MAX_ID, description="The import's ImportId.")]


class ImportRecordError(WireModel):
    record: int = Field(description="The record's number, from 1 in staging order")
    message: str


class ImportStatus(WireModel):
    """An import and its counters (``GET /imports/{ImportId}``)."""

    import_id: int
    state: store.ImportState
    total_records: int
    processed_records: int
    created_profiles: int
    replaced_profiles: int
    failed_records: int
    errors: list[ImportRecordError] = Field(description="The first 100 record errors")
    error: str | None = Field(default=None, description="Why a Failed import stopped")
    edited: dict[str, Any]


_RECORDS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            JSON_MEDIA_TYPE: {
                # Records are checked when the import runs, each on its own: a record that is no
                # valid Profile is staged, then becomes a per-record error, not a 400 for all.
                "schema": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "description": "a Profile; an invalid one becomes a per-record error",
                    },
                }
            },
            NDJSON_MEDIA_TYPE: {
                "schema": {"type": "string", "description": "one profile object per line"}
            },
        },
    }
}


@router.post(
    "/imports",
    status_code=201,
    response_model=ImportStatus,
    summary="Start a bulk import (no events are generated)",
)
def initiate(request: Request, principal: ProfilesWrite, _body: NoBody) -> Response:
    conn = connection(request)
    now = epoch(get_ctx(request).clock.now())
    with write_lock(request), transaction(conn):
        job = store.initiate_import(
            conn, principal.service_client_id, actor=principal.user_id, now=now
        )
    return created(job.to_wire(), account_url(request, "imports", job.id))


@router.post(
    "/imports/{import_id}/records",
    response_model=ImportStatus,
    responses=problems(404, 409),
    summary="Stage records (a JSON array, or NDJSON)",
    openapi_extra=_RECORDS_BODY,
)
def stage(
    request: Request,
    principal: ProfilesWrite,
    import_id: ImportId,
    media_type: Annotated[str | None, Depends(accepts(JSON_MEDIA_TYPE, NDJSON_MEDIA_TYPE))],
    raw: RawBody,
) -> Response:
    records = _records(raw, ndjson=media_type == NDJSON_MEDIA_TYPE)
    account = principal.service_client_id
    conn = connection(request)
    now = epoch(get_ctx(request).clock.now())
    with write_lock(request), transaction(conn):
        _require_state(conn, account, import_id, ("Initiated", "Staging"), "staged")
        job = store.stage_records(conn, account, import_id, records, now=now)
    return json_response(job.to_wire())


@router.post(
    "/imports/{import_id}/execute",
    status_code=202,
    response_model=ImportStatus,
    responses=problems(404, 409),
    summary="Execute a staged import in the background",
)
async def execute(
    request: Request, principal: ProfilesWrite, import_id: ImportId, _body: NoBody
) -> Response:
    ctx = get_ctx(request)
    account = principal.service_client_id
    job = await run_in_threadpool(_queue, request, account, import_id)
    if not _runs(ctx).start(account, import_id):
        raise ProblemError(
            409, "Conflict", f"import {import_id} is {job.state}; it cannot be executed twice"
        )
    location = account_url(request, "imports", import_id)
    return json_response(job.to_wire(), 202, {"Location": location})


def _queue(request: Request, account: str, import_id: int) -> store.ImportJob:
    conn = connection(request)
    with write_lock(request), transaction(conn):
        job = _require_state(
            conn, account, import_id, ("Staging", "Queued", "Processing"), "executed"
        )
        if job.state == "Staging":
            return store.queue_import(
                conn, account, import_id, now=epoch(get_ctx(request).clock.now())
            )
        # resumed: answer with its errors so far, as GET does
        return store.get_import(conn, account, import_id) or job


@router.get(
    "/imports/{import_id}",
    response_model=ImportStatus,
    responses=problems(404),
    summary="Read an import's state and counters",
)
def status(request: Request, principal: ProfilesRead, import_id: ImportId) -> Response:
    job = store.get_import(connection(request), principal.service_client_id, import_id)
    if job is None:
        raise ProblemError(404, "Not Found", f"import {import_id} not found")
    return json_response(job.to_wire())


# -- helpers ---------------------------------------------------------------------------------------
def _records(raw: bytes, *, ndjson: bool) -> list[dict[str, Any]]:
    if ndjson:
        values = []
        for number, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    values.append(orjson.loads(line))
                except orjson.JSONDecodeError as exc:
                    raise ProblemError(
                        400,
                        "Invalid request body",
                        f"line {number} is not valid JSON: {exc}",
                        [{"field": f"line {number}", "message": "not valid JSON"}],
                    ) from None
                check_depth(line, values[-1], f"line {number}")
                refuse_nul(line, values[-1], f"line {number}")
    else:
        values = parse_json(raw)
        if not isinstance(values, list):
            raise ProblemError(400, "Invalid request body", "records are a JSON array of objects")
    if not values:
        raise ProblemError(400, "Invalid request body", "there are no records")
    wrong = [index for index, value in enumerate(values) if not isinstance(value, dict)]
    if wrong:
        raise ProblemError(
            400,
            "Invalid request body",
            "each record is a JSON object (a profile)",
            [{"field": f"[{index}]", "message": "not a JSON object"} for index in wrong[:20]],
        )
    return values


def _require_state(
    conn: Store, account: str, import_id: int, allowed: tuple[str, ...], action: str
) -> store.ImportJob:
    job = store.get_import(conn, account, import_id, error_limit=0)
    if job is None:
        raise ProblemError(404, "Not Found", f"import {import_id} not found")
    if job.state not in allowed:
        detail = "has no records yet" if job.state == "Initiated" else f"is {job.state}"
        raise ProblemError(409, "Conflict", f"import {import_id} {detail}; it cannot be {action}")
    return job


def _runs(ctx: EmulatorContext) -> ImportRuns:
    runs = ctx.import_runs
    if runs is None:
        with ctx.lock:
            if ctx.import_runs is None:
                ctx.import_runs = ImportRuns(lambda: group_writer(ctx), ctx.clock)
            runs = ctx.import_runs
    return runs


@contextlib.asynccontextmanager
async def service(ctx: EmulatorContext) -> AsyncIterator[None]:
    """Resumes the imports a stop or a crash cut short, and stops the running ones, between two
    steps, when the server stops (before the writer process does)."""
    runs = _runs(ctx)
    for account, import_id in await asyncio.to_thread(_unfinished, ctx):
        runs.start(account, import_id)
    try:
        yield
    finally:
        await runs.stop()


def _unfinished(ctx: EmulatorContext) -> list[tuple[str, int]]:
    return store.unfinished_imports(ctx.connection())
