"""Bulk import: initiate, stage records (repeatable), execute, status — and no events.

States::

    Initiated ──stage──▶ Staging ──execute──▶ Queued ──run_import──▶ Processing ──▶ Completed
                                                                          └── an error ──▶ Failed

Each record is an upsert: with the ProfileId of an existing profile it replaces that profile,
without a ProfileId it creates one (next id of the account); an unknown ProfileId, or a record
that is not a valid profile, becomes a per-record error and the others go on. Records are
numbered 1, 2, … in staging order. ``run_import`` commits one transaction per batch and counts
what it processed, so an import interrupted by a crash resumes where it stopped. Profiles are
written as the REST path writes them (Edited stamped with the importing user) but the spec says
bulk import produces no events, so none are stored and nothing is delivered.

``initiate_import``, ``stage_records``, ``queue_import`` and ``get_import`` run in the caller's
transaction; ``run_import`` opens its own, one per batch.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from prefctl.clock import Clock
from prefctl.errors import NotFoundError, UsageError
from prefctl.store import profiles
from prefctl.store.db import transaction
from prefctl.store.timestamps import epoch, wire_time

__all__ = [
    "ImportJob",
    "ImportState",
    "RecordError",
    "get_import",
    "initiate_import",
    "queue_import",
    "run_import",
    "stage_records",
]

ImportState = Literal["Initiated", "Staging", "Queued", "Processing", "Completed", "Failed"]
BATCH_SIZE = 500


@dataclass(frozen=True, slots=True)
class RecordError:
    record: int
    message: str


@dataclass(frozen=True, slots=True)
class ImportJob:
    """An import and its counters; ``errors`` are filled by ``get_import``."""

    id: int
    service_client_id: str
    state: ImportState
    created_at: float
    created_by: str | None
    modified_at: float
    total_records: int
    processed_records: int
    created_profiles: int
    replaced_profiles: int
    failed_records: int
    error: str | None
    errors: list[RecordError] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        """The import status of ``GET /imports/{id}`` (PascalCase)."""
        wire: dict[str, Any] = {
            "ImportId": self.id,
            "State": self.state,
            "TotalRecords": self.total_records,
            "ProcessedRecords": self.processed_records,
            "CreatedProfiles": self.created_profiles,
            "ReplacedProfiles": self.replaced_profiles,
            "FailedRecords": self.failed_records,
            "Errors": [{"Record": e.record, "Message": e.message} for e in self.errors],
            "Edited": {
                "CreateDate": wire_time(self.created_at),
                "CreatedBy": self.created_by,
                "ModifiedDate": wire_time(self.modified_at),
            },
        }
        if self.error is not None:
            wire["Error"] = self.error
        return wire


def initiate_import(conn: sqlite3.Connection, account: str, *, actor: str, now: float) -> ImportJob:
    """A new, empty import in state Initiated."""
    cursor = conn.execute(
        "INSERT INTO imports (service_client_id, state, created_at, created_by, modified_at)"
        " VALUES (?, 'Initiated', ?, ?, ?)",
        (account, now, actor, now),
    )
    return _require(conn, account, int(cursor.lastrowid or 0))


def stage_records(
    conn: sqlite3.Connection,
    account: str,
    import_id: int,
    records: Sequence[Mapping[str, Any]],
    *,
    now: float,
) -> ImportJob:
    """Add records to an Initiated or Staging import (state becomes Staging)."""
    job = _require(conn, account, import_id)
    if job.state not in ("Initiated", "Staging"):
        raise UsageError(
            f"import {import_id} is {job.state}; records can be staged only before execute"
        )
    start = job.total_records
    conn.executemany(
        "INSERT INTO import_records (import_id, seq, body) VALUES (?, ?, ?)",
        [(import_id, start + n, orjson.dumps(r).decode()) for n, r in enumerate(records, 1)],
    )
    conn.execute(
        "UPDATE imports SET state = 'Staging', total_records = ?, modified_at = ? WHERE id = ?",
        (start + len(records), now, import_id),
    )
    return _require(conn, account, import_id)


def queue_import(
    conn: sqlite3.Connection, account: str, import_id: int, *, now: float
) -> ImportJob:
    """Execute: a Staging import with records becomes Queued, for ``run_import`` to process."""
    job = _require(conn, account, import_id)
    if job.state != "Staging":
        detail = "has no records" if job.state == "Initiated" else f"is already {job.state}"
        raise UsageError(f"import {import_id} {detail}; stage records, then execute once")
    conn.execute(
        "UPDATE imports SET state = 'Queued', modified_at = ? WHERE id = ?", (now, import_id)
    )
    return _require(conn, account, import_id)


def run_import(
    conn: sqlite3.Connection,
    account: str,
    import_id: int,
    *,
    clock: Clock,
    batch_size: int = BATCH_SIZE,
) -> ImportJob:
    """Process a Queued (or interrupted Processing) import to Completed, one transaction per
    batch. A finished import is returned as it is. An error that stops the run marks the import
    Failed with the error and is raised again."""
    job = _require(conn, account, import_id)
    if job.state in ("Completed", "Failed"):
        return job
    if job.state not in ("Queued", "Processing"):
        raise UsageError(f"import {import_id} is {job.state}; execute it first")
    try:
        with transaction(conn):
            conn.execute(
                "UPDATE imports SET state = 'Processing', modified_at = ? WHERE id = ?",
                (epoch(clock.now()), import_id),
            )
        while _run_batch(conn, account, import_id, job.created_by or "", clock, batch_size):
            pass
        with transaction(conn):
            conn.execute(
                "UPDATE imports SET state = 'Completed', modified_at = ? WHERE id = ?",
                (epoch(clock.now()), import_id),
            )
    except Exception as exc:
        with transaction(conn):
            conn.execute(
                "UPDATE imports SET state = 'Failed', error = ?, modified_at = ? WHERE id = ?",
                (f"{type(exc).__name__}: {exc}", epoch(clock.now()), import_id),
            )
        raise
    return _require(conn, account, import_id)


def get_import(
    conn: sqlite3.Connection, account: str, import_id: int, *, error_limit: int = 100
) -> ImportJob | None:
    """The import with its first ``error_limit`` record errors, or None."""
    row = conn.execute(
        "SELECT * FROM imports WHERE id = ? AND service_client_id = ?", (import_id, account)
    ).fetchone()
    if row is None:
        return None
    errors = [
        RecordError(seq, message)
        for seq, message in conn.execute(
            "SELECT seq, message FROM import_errors WHERE import_id = ? ORDER BY seq LIMIT ?",
            (import_id, error_limit),
        )
    ]
    return ImportJob(
        id=row["id"],
        service_client_id=row["service_client_id"],
        state=row["state"],
        created_at=row["created_at"],
        created_by=row["created_by"],
        modified_at=row["modified_at"],
        total_records=row["total_records"],
        processed_records=row["processed_records"],
        created_profiles=row["created_profiles"],
        replaced_profiles=row["replaced_profiles"],
        failed_records=row["failed_records"],
        error=row["error"],
        errors=errors,
    )


def _run_batch(
    conn: sqlite3.Connection,
    account: str,
    import_id: int,
    actor: str,
    clock: Clock,
    batch_size: int,
) -> bool:
    """Process the next batch; False when there was nothing left."""
    with transaction(conn):
        (done,) = conn.execute(
            "SELECT processed_records FROM imports WHERE id = ?", (import_id,)
        ).fetchone()
        rows = conn.execute(
            "SELECT seq, body FROM import_records WHERE import_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (import_id, done, batch_size),
        ).fetchall()
        if not rows:
            return False
        created = replaced = 0
        errors = []
        for seq, body in rows:
            outcome = _import_record(conn, account, orjson.loads(body), actor, clock)
            if outcome == "created":
                created += 1
            elif outcome == "replaced":
                replaced += 1
            else:
                errors.append((import_id, seq, outcome))
        conn.executemany(
            "INSERT INTO import_errors (import_id, seq, message) VALUES (?, ?, ?)", errors
        )
        conn.execute(
            "UPDATE imports SET processed_records = ?, created_profiles = created_profiles + ?,"
            " replaced_profiles = replaced_profiles + ?, failed_records = failed_records + ?,"
            " modified_at = ? WHERE id = ?",
            (rows[-1][0], created, replaced, len(errors), epoch(clock.now()), import_id),
        )
    return True


def _import_record(
    conn: sqlite3.Connection, account: str, record: Any, actor: str, clock: Clock
) -> str:
    """Upsert one record: ``created``, ``replaced``, or the error message."""
    from pydantic import ValidationError

    from prefctl.models._base import dump_wire
    from prefctl.models.problem import problem_from_validation_errors
    from prefctl.models.profile import StrictProfile

    try:
        body = dump_wire(StrictProfile.model_validate(record))
    except ValidationError as exc:
        problem = problem_from_validation_errors(exc.errors())
        return "; ".join(
            f"{e.field}: {e.message}" if e.field else e.message for e in problem.errors or []
        )
    previous = None
    if "ProfileId" in body:
        profile_id = int(body["ProfileId"])
        previous = profiles.get_profile(conn, account, profile_id)
        if previous is None:
            return f"ProfileId {profile_id} does not exist; leave it out to create a profile"
    else:
        profile_id = profiles.next_profile_id(conn, account)
    now = clock.now()
    profile = profiles.prepare_profile(
        body, profile_id=profile_id, previous=previous, actor=actor, now=now
    )
    profiles.save_profile(conn, account, profile, now=epoch(now))
    return "replaced" if previous else "created"


def _require(conn: sqlite3.Connection, account: str, import_id: int) -> ImportJob:
    job = get_import(conn, account, import_id, error_limit=0)
    if job is None:
        raise NotFoundError(f"import {import_id} not found")
    return job
