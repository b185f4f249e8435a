"""The delivery queue: one row per (event, subscription), claimed by the dispatcher as leases.

States (DESIGN §9.2)::

    held ──resume──▶ queued ──claim_due──▶ in_flight ──record_results──▶ queued | delivered
      (paused with                ▲            │ lease expired                  | dead_lettered
       CatchUpOnResume)           └────────────┘

The store records what the dispatcher tells it and decides nothing: ``dispatcher/policy.py`` picks
the next state, the next due time, whether an attempt counts and the dead-letter reason. Claims are
leases: a claimer that dies leaves rows ``in_flight`` until ``lease_until``, after which the next
``claim_due`` takes them back (at least once; never lost). ``claim_due`` and ``record_results`` are
each one transaction (or join the caller's), read rows into plain dataclasses and never touch
pydantic, so a cycle costs two transactions whatever its size.

    >>> batch = claim_due(conn, now=clock_now, limit=500, lease_seconds=60, owner="engine-1")
    >>> record_results(conn, [DeliveryResult(d.delivery_id, "delivered", d.attempts + 1, at=t,
    ...                                      owner="engine-1", attempt=...) for d in batch])

Inspection (listing, dead letters, the attempt timeline) lives in ``delivery_history.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, cast

import orjson

from prefctl.store.db import transaction
from prefctl.store.timestamps import wire_time
from prefctl.webhooks.envelope import build_event, encode

__all__ = [
    "FINAL_STATES",
    "Attempt",
    "AttemptOutcome",
    "ClaimedDelivery",
    "DeliveryResult",
    "DeliveryState",
    "NewDelivery",
    "RecordOutcome",
    "add_deliveries",
    "claim_due",
    "drop_pending",
    "enqueue",
    "hold_queued",
    "record_results",
    "release_claims",
    "release_held",
    "requeue",
]

DeliveryState = Literal["held", "queued", "in_flight", "delivered", "dead_lettered"]
# What happened to one attempt: answered 200; any other answer or a connection error; no answer
# in time; not sent (endpoint on probation); a 200 that came after the attempt timed out.
AttemptOutcome = Literal["delivered", "failed", "timed_out", "skipped", "late_delivered"]
FINAL_STATES: tuple[DeliveryState, ...] = ("delivered", "dead_lettered")


@dataclass(frozen=True, slots=True)
class NewDelivery:
    """A delivery to create: ``held`` for a paused subscription that catches up on resume."""

    event_rowid: int
    subscription_id: int
    held: bool = False


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A delivery leased to one claimer, with everything needed to send it.

    ``data_json``/``previous_data_json`` are the stored JSON text, spliced into ``body()``
    without being parsed again; ``event_time`` is this subscription's EventTime.
    """

    delivery_id: int
    subscription_id: int
    service_client_id: str
    url: str
    event_id: str
    event_type: str
    entity: str
    profile_id: int | None
    original_event_time: float
    event_time: float
    attempts: int
    first_attempt_at: float | None
    next_attempt_at: float
    data_json: str
    previous_data_json: str | None
    lease_until: float

    def body(self) -> bytes:
        """The notification body of DESIGN §7.3 (``webhooks.envelope``), with the stored Data
        and PreviousData spliced in as they are."""
        previous = self.previous_data_json
        message = build_event(
            event_id=self.event_id,
            event_type=self.event_type,
            entity=self.entity,
            subscription_id=self.subscription_id,
            client_id=self.service_client_id,
            profile_id=cast("int", self.profile_id),
            event_time=wire_time(self.event_time),
            original_event_time=wire_time(self.original_event_time),
            data=cast("dict[str, Any]", orjson.Fragment(self.data_json)),
            previous_data=None if previous is None else cast("Any", orjson.Fragment(previous)),
        )
        return encode(message)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt as the dispatcher saw it; ``skipped`` attempts were not sent."""

    attempt_number: int
    started_at: float
    finished_at: float
    outcome: AttemptOutcome
    status: int | None = None
    error: str | None = None
    latency_ms: float | None = None


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What to record for one delivery: its next state and the attempt that led there.

    ``owner`` is the lease holder reporting: the state changes only while it still holds the
    lease. ``owner=None`` (a late success, an operator) changes any delivery not yet final.
    ``attempts`` is the new attempt count; a ``queued`` result needs ``next_attempt_at``; ``at`` is
    when the decision was made (the finish time of a final state). A counted attempt (not
    ``skipped``) sets first/last attempt times, last status and last error.
    """

    delivery_id: int
    state: Literal["queued", "delivered", "dead_lettered"]
    attempts: int
    at: float
    owner: str | None = None
    next_attempt_at: float | None = None
    attempt: Attempt | None = None
    dead_letter_reason: str | None = None


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """Which results changed their delivery, and which found it re-leased, final or gone (their
    attempts are still logged when the delivery exists)."""

    applied: list[int]
    stale: list[int]


@contextmanager
def _atomic(conn: sqlite3.Connection) -> Iterator[None]:
    """A transaction of its own, or a part of the caller's when one is open."""
    if conn.in_transaction:
        yield
    else:
        with transaction(conn):
            yield


def add_deliveries(
    conn: sqlite3.Connection, deliveries: Iterable[NewDelivery], *, now: float | None
) -> int:
    """Create deliveries (queued, or held), in order; returns how many. A queued delivery's
    EventTime is ``now``, or with ``now`` None its event's own time (the simulator's load, whose
    events happen over a stretch of time, is written in one call)."""
    rows = [(d.event_rowid, d.subscription_id, int(d.held)) for d in deliveries]
    if rows:
        # One statement for every row: a profile write adds about 50, and a step per row from
        # Python cost more than the rows themselves (and gave up the GIL 50 times; bench/api.py).
        conn.execute(_ADD_SQL, {"now": now, "rows": orjson.dumps(rows)})
    return len(rows)


_ADD_SQL = """
INSERT INTO deliveries (event_rowid, subscription_id, state, event_time, next_attempt_at)
SELECT event_rowid, subscription_id, IIF(held, 'held', 'queued'), IIF(held, NULL, at), IIF(held, NULL, at)
FROM (
    SELECT json_extract(value, '$[0]') AS event_rowid, json_extract(value, '$[1]') AS subscription_id,
           json_extract(value, '$[2]') AS held,
           coalesce(:now, (SELECT original_event_time FROM events
                           WHERE id = json_extract(value, '$[0]'))) AS at,
           key
    FROM json_each(:rows)
)
ORDER BY key
"""


# The columns of _CLAIM_SQL: ClaimedDelivery's fields but the last, in order.
_ClaimRow = tuple[
    int,
    int,
    str,
    str,
    str,
    str,
    str,
    int | None,
    float,
    float,
    int,
    float | None,
    float,
    str,
    str | None,
]
_CLAIM_SQL = """
SELECT d.id, d.subscription_id, s.service_client_id, s.url, e.event_id, e.event_type, e.entity,
       e.profile_id, e.original_event_time, d.event_time, d.attempts, d.first_attempt_at,
       d.next_attempt_at, e.data, e.previous_data
FROM deliveries d INDEXED BY deliveries_due
CROSS JOIN subscriptions s ON s.id = d.subscription_id
CROSS JOIN events e ON e.id = d.event_rowid
WHERE d.state = 'queued' AND d.next_attempt_at <= ?
  AND s.state = 'Active' AND s.provisioning_state = 'Succeeded' {account}
ORDER BY d.next_attempt_at
LIMIT ?
"""


def claim_due(
    conn: sqlite3.Connection,
    now: float,
    limit: int,
    lease_seconds: float,
    owner: str,
    *,
    account: str | None = None,
) -> list[ClaimedDelivery]:
    """Lease up to ``limit`` due deliveries to ``owner`` until ``now + lease_seconds``, oldest
    ``next_attempt_at`` first, across every subscription (of ``account`` when given) that is
    Active and Succeeded. Leases that expired by ``now`` are taken back first.

    One write transaction: concurrent claimers (threads or processes) never get the same row.
    Queued rows of a subscription that is not receiving (provisioning again after a Url change)
    stay queued and are stepped over until it is.
    """
    lease_until = now + lease_seconds
    with _atomic(conn):
        # A write statement costs several reads: look before taking back (expiries are rare).
        expired = conn.execute(
            "SELECT 1 FROM deliveries INDEXED BY deliveries_leases"
            " WHERE state = 'in_flight' AND lease_until <= ? LIMIT 1",
            (now,),
        ).fetchone()
        if expired is not None:
            conn.execute(
                "UPDATE deliveries INDEXED BY deliveries_leases"
                " SET state = 'queued', lease_owner = NULL, lease_until = NULL"
                " WHERE state = 'in_flight' AND lease_until <= ?",
                (now,),
            )
        cursor = conn.cursor()
        cursor.row_factory = None  # plain tuples: the hot path skips sqlite3.Row
        rows: list[_ClaimRow]
        if account is None:
            rows = cursor.execute(_CLAIM_SQL.format(account=""), (now, limit)).fetchall()
        else:
            sql = _CLAIM_SQL.format(account="AND s.service_client_id = ?")
            rows = cursor.execute(sql, (now, account, limit)).fetchall()
        if rows:
            conn.execute(
                "UPDATE deliveries SET state = 'in_flight', lease_owner = ?, lease_until = ?"
                " WHERE id IN (SELECT value FROM json_each(?))",
                (owner, lease_until, orjson.dumps([row[0] for row in rows]).decode()),
            )
    # Positional: the SELECT lists the fields in declaration order (this is the hot path).
    return [ClaimedDelivery(*row, lease_until=lease_until) for row in rows]


# A counted attempt sets the attempt fields; a skipped one or none leaves them as they were.
_RECORD_COUNTED = """
UPDATE deliveries SET state = ?, attempts = ?, next_attempt_at = ?,
    lease_owner = NULL, lease_until = NULL, first_attempt_at = coalesce(first_attempt_at, ?),
    last_attempt_at = ?, last_status = ?, last_error = ?, dead_letter_reason = ?, finished_at = ?
WHERE id = ?
"""
_RECORD_UNCOUNTED = """
UPDATE deliveries SET state = ?, attempts = ?, next_attempt_at = ?,
    lease_owner = NULL, lease_until = NULL, dead_letter_reason = ?, finished_at = ?
WHERE id = ?
"""
_RECORD_ATTEMPT = """
INSERT INTO delivery_attempts
    (delivery_id, attempt_number, started_at, finished_at, outcome, status, error, latency_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""


def record_results(conn: sqlite3.Connection, results: Sequence[DeliveryResult]) -> RecordOutcome:
    """Record a batch of outcomes (one per delivery) in one transaction: new states and the
    attempt log. The statements are batched, so a batch costs about one round trip."""
    ids = [result.delivery_id for result in results]
    if len(set(ids)) != len(ids):
        raise ValueError("a batch holds at most one result per delivery")
    for result in results:
        if result.state == "queued" and result.next_attempt_at is None:
            raise ValueError(
                f"delivery {result.delivery_id}: a queued result needs next_attempt_at"
            )
    with _atomic(conn):
        # Inside the write transaction nothing changes between this read and the updates.
        current = {
            row[0]: (row[1], row[2])
            for row in conn.execute(
                "SELECT id, state, lease_owner FROM deliveries"
                " WHERE id IN (SELECT value FROM json_each(?))",
                (orjson.dumps(ids).decode(),),
            )
        }
        applied = [r for r in results if _may_change(current.get(r.delivery_id), r.owner)]
        counted: list[tuple[Any, ...]] = []
        uncounted: list[tuple[Any, ...]] = []
        for r in applied:
            final = r.state != "queued"
            next_at = None if final else r.next_attempt_at
            reason = r.dead_letter_reason if r.state == "dead_lettered" else None
            finished = r.at if final else None
            a = r.attempt
            if a is not None and a.outcome != "skipped":
                fields = (r.state, r.attempts, next_at, a.started_at, a.started_at, a.status)
                counted.append((*fields, a.error, reason, finished, r.delivery_id))
            else:
                uncounted.append((r.state, r.attempts, next_at, reason, finished, r.delivery_id))
        attempts = [
            _attempt_row(r.delivery_id, a)
            for r in results
            if (a := r.attempt) is not None and r.delivery_id in current
        ]
        # An executemany costs a statement step even with no rows; a batch rarely has all three.
        for sql, rows in (
            (_RECORD_COUNTED, counted),
            (_RECORD_UNCOUNTED, uncounted),
            (_RECORD_ATTEMPT, attempts),
        ):
            if rows:
                conn.executemany(sql, rows)
    applied_ids = {r.delivery_id for r in applied}
    return RecordOutcome(
        [i for i in ids if i in applied_ids], [i for i in ids if i not in applied_ids]
    )


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


def _may_change(current: tuple[str, str | None] | None, owner: str | None) -> bool:
    if current is None:
        return False  # gone with its subscription or event
    state, lease_owner = current
    if owner is not None:
        return state == "in_flight" and lease_owner == owner
    return state not in FINAL_STATES


def release_claims(conn: sqlite3.Connection, owner: str) -> int:
    """Give back every lease ``owner`` holds (a clean shutdown), unchanged and due as before."""
    with _atomic(conn):
        cursor = conn.execute(
            "UPDATE deliveries INDEXED BY deliveries_leases"
            " SET state = 'queued', lease_owner = NULL, lease_until = NULL"
            " WHERE state = 'in_flight' AND lease_owner = ?",
            (owner,),
        )
    return cursor.rowcount


def hold_queued(conn: sqlite3.Connection, subscription_id: int) -> int:
    """Pause with catch-up: queued deliveries wait as ``held`` (they get a new EventTime later)."""
    cursor = conn.execute(
        "UPDATE deliveries SET state = 'held', event_time = NULL, next_attempt_at = NULL"
        " WHERE subscription_id = ? AND state = 'queued'",
        (subscription_id,),
    )
    return cursor.rowcount


def drop_pending(conn: sqlite3.Connection, subscription_id: int) -> int:
    """Pause without catch-up: queued and held deliveries are dropped."""
    cursor = conn.execute(
        "DELETE FROM deliveries WHERE subscription_id = ? AND state IN ('queued', 'held')",
        (subscription_id,),
    )
    return cursor.rowcount


def release_held(conn: sqlite3.Connection, subscription_id: int, *, now: float) -> int:
    """Resume: held deliveries are queued, due now, with EventTime ``now``."""
    cursor = conn.execute(
        "UPDATE deliveries SET state = 'queued', event_time = ?, next_attempt_at = ?"
        " WHERE subscription_id = ? AND state = 'held'",
        (now, now, subscription_id),
    )
    return cursor.rowcount


# A finished delivery starting over: attempts from zero, a new EventTime, due at once.
_REQUEUE_SQL = """
UPDATE deliveries SET state = 'queued', attempts = 0, event_time = :now, next_attempt_at = :now,
    first_attempt_at = NULL, dead_letter_reason = NULL, finished_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('delivered', 'dead_lettered')
"""
_ENQUEUE_SQL = """
INSERT INTO deliveries (event_rowid, subscription_id, state, event_time, next_attempt_at)
VALUES (:event_rowid, :subscription_id, 'queued', :now, :now)
ON CONFLICT (event_rowid, subscription_id) DO UPDATE SET
    state = 'queued', attempts = 0, event_time = :now, next_attempt_at = :now,
    first_attempt_at = NULL, dead_letter_reason = NULL, finished_at = NULL
WHERE state IN ('delivered', 'dead_lettered')
RETURNING id
"""


def requeue(conn: sqlite3.Connection, delivery_ids: Iterable[int], *, now: float) -> int:
    """Redrive: delivered or dead-lettered deliveries start over (attempts 0, EventTime ``now``,
    due now); their attempt log is kept. Pending ones are left alone. Returns how many moved."""
    ids = orjson.dumps(list(delivery_ids)).decode()
    cursor = conn.execute(_REQUEUE_SQL, {"now": now, "ids": ids})
    return cursor.rowcount


def enqueue(conn: sqlite3.Connection, event_rowid: int, subscription_id: int, *, now: float) -> int:
    """Replay one event to one subscription: a new delivery, or a finished one started over; a
    pending one is left as it is. Returns the delivery id."""
    params = {"event_rowid": event_rowid, "subscription_id": subscription_id, "now": now}
    row = conn.execute(_ENQUEUE_SQL, params).fetchone()
    if row is None:
        row = conn.execute(
            "SELECT id FROM deliveries WHERE event_rowid = ? AND subscription_id = ?",
            (event_rowid, subscription_id),
        ).fetchone()
    return int(row[0])
