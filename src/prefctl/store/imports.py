"""Bulk import: initiate, stage records (repeatable), execute, status — and no events.

States::

    Initiated ──stage──▶ Staging ──execute──▶ Queued ──steps──▶ Processing ──▶ Completed
                                                                     └── an error ──▶ Failed

Each record is an upsert: with the ProfileId of an existing profile it replaces that profile,
without a ProfileId it creates one (next id of the account); an unknown ProfileId, or a record
that is not a valid profile, becomes a per-record error and the others go on. Records are
numbered 1, 2, … in staging order. Profiles are written as the REST path writes them (Edited
stamped with the importing user) but the spec says bulk import produces no events, so none are
stored and nothing is delivered.

Execution is a series of **steps**, each one transaction: ``run_import_step`` processes the records
after ``ProcessedRecords`` — at most ``batch_size`` of them and stopping once ``budget`` seconds
have passed — and moves the counters in the same transaction, so a step is applied whole or not
at all. A run cut short (a stop, a crash, a killed writer process) leaves the import Processing
with counters that match the profiles written, and the next step resumes after the last committed
one: no record is lost or applied twice. The last step marks the import Completed; ``fail_import``
marks it Failed with the error that stopped it. The emulator runs each step as a job of its writer
process (``ImportStep``), so profile writes queued meanwhile go in between steps; ``run_import``
runs them all on one connection (tests, tools).

``initiate_import``, ``stage_records``, ``queue_import``, ``get_import``, ``run_import_step`` and
``fail_import`` run in the caller's transaction when one is open; ``run_import`` opens its own,
one per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson

from prefctl.clock import Clock, FakeClock
from prefctl.errors import NotFoundError, UsageError
from prefctl.store import profiles
from prefctl.store._dialect import lock_account
from prefctl.store.db import atomic, transaction
from prefctl.store.timestamps import epoch, from_epoch, wire_time

if TYPE_CHECKING:
    from prefctl.store import Store

__all__ = [
    "BATCH_SIZE",
    "STEP_SECONDS",
    "ImportJob",
    "ImportState",
    "ImportStep",
    "RecordError",
    "fail_import",
    "failure_reason",
    "get_import",
    "initiate_import",
    "queue_import",
    "run_import",
    "run_import_step",
    "stage_records",
    "unfinished_imports",
]

ImportState = Literal["Initiated", "Staging", "Queued", "Processing", "Completed", "Failed"]
# One step (one transaction) processes at most this many records, and stops early once
# STEP_SECONDS have passed: the store's write lock is held for tens of milliseconds at a time, so
# the API's profile writes are served between steps while a large import runs.
BATCH_SIZE = 500
STEP_SECONDS = 0.05
_EXECUTABLE = ("Queued", "Processing")


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


def initiate_import(conn: Store, account: str, *, actor: str, now: float) -> ImportJob:
    """A new, empty import in state Initiated."""
    cursor = conn.execute(
        "INSERT INTO imports (service_client_id, state, created_at, created_by, modified_at)"
        " VALUES (?, 'Initiated', ?, ?, ?) RETURNING id",
        (account, now, actor, now),
    )
    return _require(conn, account, int(cursor.fetchone()[0]))


def stage_records(
    conn: Store,
    account: str,
    import_id: int,
    records: Sequence[Mapping[str, Any]],
    *,
    now: float,
) -> ImportJob:
    """Add records to an Initiated or Staging import (state becomes Staging)."""
    lock_account(conn, account)  # the state and the record count read, then written
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


def queue_import(conn: Store, account: str, import_id: int, *, now: float) -> ImportJob:
    """Execute: a Staging import with records becomes Queued, for ``run_import`` to process."""
    lock_account(conn, account)
    job = _require(conn, account, import_id)
    if job.state != "Staging":
        detail = "has no records" if job.state == "Initiated" else f"is already {job.state}"
        raise UsageError(f"import {import_id} {detail}; stage records, then execute once")
    conn.execute(
        "UPDATE imports SET state = 'Queued', modified_at = ? WHERE id = ?", (now, import_id)
    )
    return _require(conn, account, import_id)


def run_import(
    conn: Store,
    account: str,
    import_id: int,
    *,
    clock: Clock,
    batch_size: int = BATCH_SIZE,
    budget: float = STEP_SECONDS,
) -> ImportJob:
    """Process a Queued (or interrupted Processing) import to Completed, one transaction per
    step (``run_import_step``). A finished import is returned as it is. An error that stops the
    run marks the import Failed with the error and is raised again."""
    job = _require(conn, account, import_id)
    if _finished(job):
        return job
    try:
        while job.state in _EXECUTABLE:
            with transaction(conn):
                job = run_import_step(
                    conn, account, import_id, clock=clock, batch_size=batch_size, budget=budget
                )
    except Exception as exc:
        fail_import(conn, account, import_id, error=failure_reason(exc), now=epoch(clock.now()))
        raise
    return _require(conn, account, import_id)


def run_import_step(
    conn: Store,
    account: str,
    import_id: int,
    *,
    clock: Clock,
    batch_size: int = BATCH_SIZE,
    budget: float = STEP_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> ImportJob:
    """One step of a Queued or Processing import, in one transaction (the caller's when one is
    open): the records after ProcessedRecords, at most ``batch_size`` and no more once ``budget``
    seconds (by ``monotonic``) have passed, at least one. The import becomes Processing, and
    Completed when its last record is done. A finished import is returned as it is."""
    with atomic(conn):
        lock_account(conn, account)  # one step of an import at a time
        job = _require(conn, account, import_id)
        if _finished(job):
            return job
        deadline = monotonic() + budget
        actor = job.created_by or ""
        last = job.processed_records
        created = replaced = 0
        errors = []
        # One row at a time: a step never holds more than the record it is writing.
        rows = conn.execute(
            "SELECT seq, body FROM import_records WHERE import_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (import_id, last, max(1, batch_size)),
        )
        for seq, body in rows:
            outcome = _import_record(conn, account, orjson.loads(body), actor, clock)
            if outcome == "created":
                created += 1
            elif outcome == "replaced":
                replaced += 1
            else:
                errors.append((import_id, seq, outcome))
            last = seq
            if monotonic() >= deadline:
                break
        rows.close()
        conn.executemany(
            "INSERT INTO import_errors (import_id, seq, message) VALUES (?, ?, ?)", errors
        )
        # Records done are not kept: a store would grow by each import's size for good.
        conn.execute(
            "DELETE FROM import_records WHERE import_id = ? AND seq <= ?", (import_id, last)
        )
        state = "Completed" if last >= job.total_records else "Processing"
        conn.execute(
            "UPDATE imports SET state = ?, processed_records = ?,"
            " created_profiles = created_profiles + ?, replaced_profiles = replaced_profiles + ?,"
            " failed_records = failed_records + ?, modified_at = ? WHERE id = ?",
            (state, last, created, replaced, len(errors), epoch(clock.now()), import_id),
        )
        return _require(conn, account, import_id)


def _finished(job: ImportJob) -> bool:
    """Whether ``job`` is Completed or Failed; UsageError when it has not been executed."""
    if job.state in ("Completed", "Failed"):
        return True
    if job.state not in _EXECUTABLE:
        raise UsageError(f"import {job.id} is {job.state}; execute it first")
    return False


def fail_import(conn: Store, account: str, import_id: int, *, error: str, now: float) -> ImportJob:
    """Mark an import that has not finished Failed with ``error`` (why it stopped); a finished
    one is returned as it is."""
    with atomic(conn):
        failed = conn.execute(
            "UPDATE imports SET state = 'Failed', error = ?, modified_at = ?"
            " WHERE id = ? AND service_client_id = ? AND state NOT IN ('Completed', 'Failed')",
            (error, now, import_id, account),
        ).rowcount
        if failed:  # a Failed import never runs again: its records are dropped
            conn.execute("DELETE FROM import_records WHERE import_id = ?", (import_id,))
        return _require(conn, account, import_id)


def failure_reason(exc: BaseException) -> str:
    """The ``Error`` of an import stopped by ``exc``."""
    return f"{type(exc).__name__}: {exc}"


def unfinished_imports(conn: Store) -> list[tuple[str, int]]:
    """(account, ImportId) of every Queued or Processing import, oldest first: those a stop or
    a crash cut short."""
    rows = conn.execute(
        "SELECT service_client_id, id FROM imports WHERE state IN ('Queued', 'Processing')"
        " ORDER BY id"
    )
    return [(str(account), int(import_id)) for account, import_id in rows]


@dataclass(frozen=True, slots=True)
class ImportStep:
    """``run_import_step`` as a job of the emulator's writer process (it pickles): one step of
    ``import_id`` of ``account``, stamped ``now`` (Unix seconds, taken when it is queued, so the
    emulator's clock stamps the profiles). Returns the import's state after the step."""

    account: str
    import_id: int
    now: float
    batch_size: int = BATCH_SIZE
    budget: float = STEP_SECONDS

    def __call__(self, conn: Store) -> ImportState:
        job = run_import_step(
            conn,
            self.account,
            self.import_id,
            clock=FakeClock(from_epoch(self.now)),  # stands still at ``now``
            batch_size=self.batch_size,
            budget=self.budget,
        )
        return job.state


def get_import(
    conn: Store, account: str, import_id: int, *, error_limit: int = 100
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


def _import_record(conn: Store, account: str, record: Any, actor: str, clock: Clock) -> str:
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
    profiles.save_profile(conn, account, profile, now=epoch(now), previous=previous)
    return "replaced" if previous else "created"


def _require(conn: Store, account: str, import_id: int) -> ImportJob:
    job = get_import(conn, account, import_id, error_limit=0)
    if job is None:
        raise NotFoundError(f"import {import_id} not found")
    return job
