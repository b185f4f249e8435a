"""``/imports``: bulk import — initiate, stage records, execute, status. No events, ever.

    POST /imports                      → 201, the import (State Initiated) and its Location
    POST /imports/{ImportId}/records   → 200, records added (State Staging); repeatable
    POST /imports/{ImportId}/execute   → 202, State Queued; a background thread runs it
    GET  /imports/{ImportId}           → the import: State, counters and the first 100 errors

Records are a JSON array of profile objects (``application/json``) or one object per line
(``application/x-ndjson``). Each is an upsert (``store.imports``): with the ProfileId of an existing
profile it replaces it, without one it creates a profile; invalid records become per-record errors.

Execution runs on its own thread and connection, one transaction per batch, so GET shows the state
move through Queued → Processing → Completed (or Failed). Executing a Queued or Processing import
that no thread of this emulator is running — one interrupted by a stop or a crash — resumes it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import Annotated, Any

import orjson
from fastapi import Depends, Path, Request
from pydantic import Field
from starlette.responses import Response

from prefctl.emulator.app import EmulatorContext
from prefctl.emulator.routes._common import (
    JSON_MEDIA_TYPE,
    ProblemError,
    ProfilesRead,
    ProfilesWrite,
    RawBody,
    accepts,
    account_router,
    account_url,
    connection,
    created,
    get_ctx,
    json_response,
    parse_json,
    problems,
    write_lock,
)
from prefctl.models._base import WireModel
from prefctl.store import imports as store
from prefctl.store.db import connect, transaction
from prefctl.store.timestamps import epoch

__all__ = ["NDJSON_MEDIA_TYPE", "ImportStatus", "router"]

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
def initiate(request: Request, principal: ProfilesWrite) -> Response:
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
def execute(request: Request, principal: ProfilesWrite, import_id: ImportId) -> Response:
    ctx = get_ctx(request)
    account = principal.service_client_id
    conn = connection(request)
    with write_lock(request), transaction(conn):
        job = _require_state(
            conn, account, import_id, ("Staging", "Queued", "Processing"), "executed"
        )
        if job.state == "Staging":
            job = store.queue_import(conn, account, import_id, now=epoch(ctx.clock.now()))
        else:  # resumed: answer with its errors so far, as GET does
            job = store.get_import(conn, account, import_id) or job
    if not _runs(ctx).start(account, import_id):
        raise ProblemError(
            409, "Conflict", f"import {import_id} is {job.state}; it cannot be executed twice"
        )
    location = account_url(request, "imports", import_id)
    return json_response(job.to_wire(), 202, {"Location": location})


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
    conn: sqlite3.Connection, account: str, import_id: int, allowed: tuple[str, ...], action: str
) -> store.ImportJob:
    job = store.get_import(conn, account, import_id, error_limit=0)
    if job is None:
        raise ProblemError(404, "Not Found", f"import {import_id} not found")
    if job.state not in allowed:
        detail = "has no records yet" if job.state == "Initiated" else f"is {job.state}"
        raise ProblemError(409, "Conflict", f"import {import_id} {detail}; it cannot be {action}")
    return job


class _ImportRuns:
    """The imports this emulator is running, one thread each (never two for one import)."""

    def __init__(self, ctx: EmulatorContext) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._running: set[tuple[str, int]] = set()

    def start(self, account: str, import_id: int) -> bool:
        """Run the import on a new thread unless one is running it already."""
        key = (account, import_id)
        with self._lock:
            if key in self._running:
                return False
            self._running.add(key)
        thread = threading.Thread(
            target=self._run, args=key, name=f"prefctl-import-{import_id}", daemon=True
        )
        thread.start()
        return True

    def _run(self, account: str, import_id: int) -> None:
        conn = connect(self._ctx.store_path)
        try:
            store.run_import(conn, account, import_id, clock=self._ctx.clock)
        except Exception:
            # run_import has marked the import Failed with the error; GET shows it.
            log.exception("import %s of %s failed", import_id, account)
        finally:
            conn.close()
            with self._lock:
                self._running.discard((account, import_id))


def _runs(ctx: EmulatorContext) -> _ImportRuns:
    return ctx.shared("imports.runs", lambda: _ImportRuns(ctx))
