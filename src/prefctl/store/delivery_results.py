"""Recording the results of delivery attempts: each delivery's next state and its attempt log.

The store records what the dispatcher tells it and decides nothing: ``dispatcher/policy.py`` picks
the next state, the next due time, whether an attempt counts and the dead-letter reason. A result
changes its delivery only while its claimer still holds the lease (or, with no owner, while the
delivery is not final); its attempt is logged anyway if the delivery exists.
``record_results`` is one transaction (or joins the caller's) and never touches pydantic, so a
dispatcher cycle costs two transactions whatever its size: the claim (``delivery_claims.py``)
and this.

    >>> record_results(conn, [DeliveryResult(d.delivery_id, "delivered", d.attempts + 1, at=t,
    ...                                      owner="engine-1", attempt=...) for d in batch])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from prefctl.store._dialect import any_of
from prefctl.store.db import atomic
from prefctl.store.deliveries import FINAL_STATES

if TYPE_CHECKING:
    from prefctl.store import Store
    from prefctl.store.postgres import PgStore

__all__ = ["Attempt", "AttemptOutcome", "DeliveryResult", "RecordOutcome", "record_results"]


# What happened to one attempt: answered 200; any other answer or a connection error; no answer
# in time; not sent (endpoint on probation); a 200 that came after the attempt timed out.
AttemptOutcome = Literal["delivered", "failed", "timed_out", "skipped", "late_delivered"]


# Not frozen: made once per delivery on the dispatcher's hot path, where a frozen dataclass's
# __init__ (object.__setattr__ per field) cost ~5x a plain one. Treat it as immutable.
@dataclass(slots=True)
class Attempt:
    """One attempt as the dispatcher saw it; ``skipped`` attempts were not sent."""

    attempt_number: int
    started_at: float
    finished_at: float
    outcome: AttemptOutcome
    status: int | None = None
    error: str | None = None
    latency_ms: float | None = None


# Not frozen: made once per delivery on the dispatcher's hot path, where a frozen dataclass's
# __init__ (object.__setattr__ per field) cost ~5x a plain one. Treat it as immutable.
@dataclass(slots=True)
class DeliveryResult:
    """What to record for one delivery: its next state and the attempt that led there.

    ``owner`` is the lease holder reporting: the state changes only while it still holds the
    lease. ``owner=None`` (a late success, an operator) changes any delivery not yet final.
    ``attempts`` is the new attempt count; a ``queued`` result needs ``next_attempt_at``; ``at`` is
    when the decision was made (the finish time of a final state). A counted attempt (not
    ``skipped``) sets first/last attempt times, last status and last error; ``last_attempt_at``
    overrides the last attempt time when a later attempt than ``attempt`` was sent (a late
    success that arrived after its retry went out).
    """

    delivery_id: int
    state: Literal["queued", "delivered", "dead_lettered"]
    attempts: int
    at: float
    owner: str | None = None
    next_attempt_at: float | None = None
    attempt: Attempt | None = None
    dead_letter_reason: str | None = None
    last_attempt_at: float | None = None


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """Which results changed their delivery, and which found it re-leased, final or gone (their
    attempts are still logged when the delivery exists)."""

    applied: list[int]
    stale: list[int]


# A counted attempt sets the attempt fields; a skipped one or none leaves them as they were.
# Each changes the row only if its result may (the claimer's lease still holds or, for a result
# with no owner, the delivery is not final) and says so by returning its id.
_RECORD_COUNTED = """
UPDATE deliveries SET state = ?, attempts = ?, next_attempt_at = ?,
    lease_owner = NULL, lease_until = NULL, first_attempt_at = coalesce(first_attempt_at, ?),
    last_attempt_at = ?, last_status = ?, last_error = ?, dead_letter_reason = ?, finished_at = ?
WHERE id = ? AND {may_change}
RETURNING id
"""
_RECORD_UNCOUNTED = """
UPDATE deliveries SET state = ?, attempts = ?, next_attempt_at = ?,
    lease_owner = NULL, lease_until = NULL, dead_letter_reason = ?, finished_at = ?
WHERE id = ? AND {may_change}
RETURNING id
"""
_OWNED = "state = 'in_flight' AND lease_owner = ?"
_UNOWNED = "state NOT IN ({})".format(", ".join(f"'{state}'" for state in FINAL_STATES))
# [counted][owned]
_RECORD_SQL = {
    counted: {
        owned: sql.format(may_change=_OWNED if owned else _UNOWNED) for owned in (True, False)
    }
    for counted, sql in ((True, _RECORD_COUNTED), (False, _RECORD_UNCOUNTED))
}
_RECORD_ATTEMPT = """
INSERT INTO delivery_attempts
    (delivery_id, attempt_number, started_at, finished_at, outcome, status, error, latency_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""


def record_results(conn: Store, results: Sequence[DeliveryResult]) -> RecordOutcome:
    """Record a batch of outcomes (one per delivery) in one transaction: new states and the
    attempt log.

    One conditional UPDATE per result says whether it applied (no read of the rows first: in a
    simulated day that read was a sixth of the store's work per cycle); the attempts go in one
    batched INSERT."""
    ids = [result.delivery_id for result in results]
    if len(set(ids)) != len(ids):
        raise ValueError("a batch holds at most one result per delivery")
    for result in results:
        if result.state == "queued" and result.next_attempt_at is None:
            raise ValueError(
                f"delivery {result.delivery_id}: a queued result needs next_attempt_at"
            )
    if conn.dialect == "postgresql":
        return _record_results_postgres(conn, results, ids)
    applied: set[int] = set()
    with atomic(conn):
        cursor = conn.cursor()
        cursor.row_factory = None
        for r in results:
            final = r.state != "queued"
            next_at = None if final else r.next_attempt_at
            reason = r.dead_letter_reason if r.state == "dead_lettered" else None
            finished = r.at if final else None
            a = r.attempt
            params: tuple[Any, ...]
            if a is not None and a.outcome != "skipped":
                counted = True
                last = a.started_at if r.last_attempt_at is None else r.last_attempt_at
                fields = (r.state, r.attempts, next_at, a.started_at, last, a.status)
                params = (*fields, a.error, reason, finished, r.delivery_id)
            else:
                counted = False
                params = (r.state, r.attempts, next_at, reason, finished, r.delivery_id)
            owned = r.owner is not None
            if owned:
                params = (*params, r.owner)
            if cursor.execute(_RECORD_SQL[counted][owned], params).fetchall():
                applied.add(r.delivery_id)
        _log_attempts(conn, results, applied)
    return RecordOutcome([i for i in ids if i in applied], [i for i in ids if i not in applied])


# PostgreSQL: the whole batch in one statement (a statement per result is a round trip per
# result to the server). Each result's row of the arrays carries what its UPDATE would bind:
# whether its attempt counts (1 or 0: flags bind as integers), and its owner (NULL: a result
# that may change any pending row).
_RECORD_POSTGRES = """
UPDATE deliveries d SET state = r.state, attempts = r.attempts, next_attempt_at = r.next_at,
    lease_owner = NULL, lease_until = NULL,
    first_attempt_at = CASE WHEN r.counted = 1 THEN coalesce(d.first_attempt_at, r.started_at)
                            ELSE d.first_attempt_at END,
    last_attempt_at = CASE WHEN r.counted = 1 THEN r.last_at ELSE d.last_attempt_at END,
    last_status = CASE WHEN r.counted = 1 THEN r.status ELSE d.last_status END,
    last_error = CASE WHEN r.counted = 1 THEN r.error ELSE d.last_error END,
    dead_letter_reason = r.reason, finished_at = r.finished
FROM unnest(?::bigint[], ?::text[], ?::integer[], ?::double precision[], ?::integer[],
            ?::double precision[], ?::double precision[], ?::integer[], ?::text[], ?::text[],
            ?::double precision[], ?::text[])
    AS r(id, state, attempts, next_at, counted, started_at, last_at, status, error, reason,
         finished, owner)
WHERE d.id = r.id AND CASE WHEN r.owner IS NULL
    THEN d.state NOT IN ('delivered', 'dead_lettered')
    ELSE d.state = 'in_flight' AND d.lease_owner = r.owner END
RETURNING d.id
"""


def _record_results_postgres(
    conn: PgStore, results: Sequence[DeliveryResult], ids: list[int]
) -> RecordOutcome:
    columns: list[list[Any]] = [[] for _ in range(12)]
    for r in results:
        final = r.state != "queued"
        a = r.attempt
        counted = a is not None and a.outcome != "skipped"
        row = (
            r.delivery_id,
            r.state,
            r.attempts,
            None if final else r.next_attempt_at,
            counted,
            a.started_at if counted and a is not None else None,
            (a.started_at if r.last_attempt_at is None else r.last_attempt_at)
            if counted and a is not None
            else None,
            a.status if counted and a is not None else None,
            a.error if counted and a is not None else None,
            r.dead_letter_reason if r.state == "dead_lettered" else None,
            r.at if final else None,
            r.owner,
        )
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    with atomic(conn):
        applied = {int(row[0]) for row in conn.execute(_RECORD_POSTGRES, columns).fetchall()}
        _log_attempts(conn, results, applied)
    return RecordOutcome([i for i in ids if i in applied], [i for i in ids if i not in applied])


def _log_attempts(conn: Store, results: Sequence[DeliveryResult], applied: set[int]) -> None:
    """Log the results' attempts: a stale result's attempt too, if its delivery exists
    (re-leased, final). Both backends' ``record_results`` end with it."""
    stale = [
        r.delivery_id for r in results if r.attempt is not None and r.delivery_id not in applied
    ]
    exists = applied | _existing(conn, stale) if stale else applied
    attempts = [
        _attempt_row(r.delivery_id, a)
        for r in results
        if (a := r.attempt) is not None and r.delivery_id in exists
    ]
    if attempts:
        conn.executemany(_RECORD_ATTEMPT, attempts)


def _existing(conn: Store, ids: list[int]) -> set[int]:
    condition, param = any_of(conn, "id", ids)
    rows = conn.execute(f"SELECT id FROM deliveries WHERE {condition}", (param,))  # noqa: S608
    return {row[0] for row in rows}


def _attempt_row(delivery_id: int, a: Attempt) -> tuple[Any, ...]:
    return (
        delivery_id,
        a.attempt_number,
        a.started_at,
        a.finished_at,
        a.outcome,
        a.status,
        a.error,
        a.latency_ms,
    )
