"""The delivery queue, one row per (event, subscription): creating rows and moving pending ones.

States (docs/dispatcher.md)::

    held ──resume──▶ queued ──claim_due──▶ in_flight ──record_results──▶ queued | delivered
      (paused with                ▲            │ lease expired                  | dead_lettered
       CatchUpOnResume)           └────────────┘

Here: creating deliveries (``add_deliveries``, one per fan-out target of an event) and the
state changes of one subscription's pending deliveries (pause: ``hold_queued``,
``drop_pending``; resume: ``release_held``; a Url that failed validation:
``dead_letter_pending``) and redrives (``requeue``, ``enqueue``). The dispatcher's leases are in
``delivery_claims.py`` (``claim_due``), what it reports back in ``delivery_results.py``
(``record_results``); inspection (listing, dead letters, the attempt timeline) lives in
``delivery_history.py``.

    >>> add_deliveries(conn, [NewDelivery(event_rowid, subscription_id)], now=clock_now)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from prefctl.store._dialect import any_of, is_postgres, notify_due, portable
from prefctl.store.db import atomic, execute_rows

if TYPE_CHECKING:
    from prefctl.store import Store

__all__ = [
    "FINAL_STATES",
    "DeliveryState",
    "NewDelivery",
    "add_deliveries",
    "dead_letter_pending",
    "drop_pending",
    "enqueue",
    "hold_queued",
    "release_held",
    "requeue",
]

DeliveryState = Literal["held", "queued", "in_flight", "delivered", "dead_lettered"]
FINAL_STATES: tuple[DeliveryState, ...] = ("delivered", "dead_lettered")


# Not frozen: made for every delivery queued (50 per profile write), where a frozen dataclass's
# __init__ (object.__setattr__ per field) cost ~5x a plain one. Treat it as immutable.
@dataclass(slots=True)
class NewDelivery:
    """A delivery to create: ``held`` for a paused subscription that catches up on resume."""

    event_rowid: int
    subscription_id: int
    held: bool = False


def add_deliveries(conn: Store, deliveries: Iterable[NewDelivery], *, now: float | None) -> int:
    """Create deliveries (queued, or held), in order; returns how many. A queued delivery's
    EventTime is ``now``, or with ``now`` None its event's own time (the simulator's load, whose
    events happen over a stretch of time, is written in one call)."""
    rows = [(d.event_rowid, d.subscription_id, d.held) for d in deliveries]
    # A profile write adds about 50 rows: a statement per row (executemany) or rows unpacked from
    # JSON in SQL cost more than the rows themselves.
    if not is_postgres(conn):
        execute_rows(conn, _insert_sql, rows, first=(now,))
        return len(rows)
    if not rows:
        return 0
    # PostgreSQL takes the rows as three arrays: one statement of four parameters, planned once
    # and sent in one round trip, where VALUES lists cost a statement per power of two of rows
    # and the writer's time binding their 150 parameters (bench/api.py).
    events, targets, held = (_int_array(column) for column in zip(*rows, strict=True))
    with atomic(conn):
        conn.execute(_INSERT_SQL_POSTGRES, (now, events, targets, held))
        if not all(d[2] for d in rows):
            notify_due(conn)
    return len(rows)


def _int_array(values: Iterable[int]) -> str:
    """PostgreSQL's text form of an array of integers (booleans as 0 and 1): written here in
    one join, where psycopg's list adapter costs the writer some 10 % of a profile write."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


# One row of a deliveries INSERT: ?1 is now, then each row binds its event rowid (e),
# subscription id (s) and held flag (h). Only these parameter numbers are formatted in.
_AT = "IIF(?{h}, NULL, coalesce(?1, (SELECT original_event_time FROM events WHERE id = ?{e})))"
_ROW = "(?{e}, ?{s}, IIF(?{h}, 'held', 'queued'), " + _AT + ", " + _AT + ")"
# PostgreSQL's: the rows' columns as arrays (the held flags as 0 or 1), a queued row due at ?1
# or else at its event's time.
_INSERT_SQL_POSTGRES = """
INSERT INTO deliveries (event_rowid, subscription_id, state, event_time, next_attempt_at)
SELECT e, s, CASE WHEN h = 1 THEN 'held' ELSE 'queued' END, due, due
FROM unnest(?2::bigint[], ?3::bigint[], ?4::bigint[]) AS r(e, s, h),
    LATERAL (SELECT CASE WHEN h = 1 THEN NULL ELSE coalesce(?1::double precision,
        (SELECT original_event_time FROM events WHERE id = e)) END AS due) AS t
"""


@functools.cache
def _insert_sql(rows: int) -> str:
    values = ", ".join(_ROW.format(e=3 * i + 2, s=3 * i + 3, h=3 * i + 4) for i in range(rows))
    return _INSERT + values


_INSERT = (
    "INSERT INTO deliveries (event_rowid, subscription_id, state, event_time, next_attempt_at)"
    " VALUES "
)


def hold_queued(conn: Store, subscription_id: int) -> int:
    """Pause with catch-up: queued deliveries wait as ``held`` (they get a new EventTime later)."""
    cursor = conn.execute(
        portable(
            conn,
            "UPDATE deliveries INDEXED BY deliveries_due"
            " SET state = 'held', event_time = NULL, next_attempt_at = NULL"
            " WHERE subscription_id = ? AND state = 'queued'",
        ),
        (subscription_id,),
    )
    return cursor.rowcount


def drop_pending(conn: Store, subscription_id: int) -> int:
    """Pause without catch-up: queued and held deliveries are dropped."""
    # One statement per state, so that each reads its partial index (schema 0008).
    queued = conn.execute(
        portable(
            conn,
            "DELETE FROM deliveries INDEXED BY deliveries_due"
            " WHERE subscription_id = ? AND state = 'queued'",
        ),
        (subscription_id,),
    )
    held = conn.execute(
        portable(
            conn,
            "DELETE FROM deliveries INDEXED BY deliveries_held"
            " WHERE subscription_id = ? AND state = 'held'",
        ),
        (subscription_id,),
    )
    return queued.rowcount + held.rowcount


def dead_letter_pending(conn: Store, subscription_id: int, *, reason: str, now: float) -> int:
    """The subscription can no longer receive (its new Url failed validation): queued and held
    deliveries are dead-lettered at ``now`` with ``reason`` (a held one gets EventTime ``now``)."""
    cursor = conn.execute(
        "UPDATE deliveries SET state = 'dead_lettered', dead_letter_reason = ?, finished_at = ?,"
        " event_time = coalesce(event_time, ?), next_attempt_at = NULL"
        " WHERE subscription_id = ? AND (state = 'queued' OR state = 'held')",
        (reason, now, now, subscription_id),
    )
    return cursor.rowcount


def release_held(conn: Store, subscription_id: int, *, now: float) -> int:
    """Resume: held deliveries are queued, due now, with EventTime ``now``."""
    with atomic(conn):
        cursor = conn.execute(
            portable(
                conn,
                "UPDATE deliveries INDEXED BY deliveries_held"
                " SET state = 'queued', event_time = ?, next_attempt_at = ?"
                " WHERE subscription_id = ? AND state = 'held'",
            ),
            (now, now, subscription_id),
        )
        if cursor.rowcount:
            notify_due(conn)
    return cursor.rowcount


# A finished delivery starting over: attempts from zero, a new EventTime, due at once.
_REQUEUE_SQL = """
UPDATE deliveries SET state = 'queued', attempts = 0, event_time = :now, next_attempt_at = :now,
    first_attempt_at = NULL, dead_letter_reason = NULL, finished_at = NULL
WHERE {ids} AND state IN ('delivered', 'dead_lettered')
"""
_ENQUEUE_SQL = """
INSERT INTO deliveries (event_rowid, subscription_id, state, event_time, next_attempt_at)
VALUES (:event_rowid, :subscription_id, 'queued', :now, :now)
ON CONFLICT (event_rowid, subscription_id) DO UPDATE SET
    state = 'queued', attempts = 0, event_time = :now, next_attempt_at = :now,
    first_attempt_at = NULL, dead_letter_reason = NULL, finished_at = NULL
WHERE deliveries.state IN ('delivered', 'dead_lettered')
RETURNING id
"""


def requeue(conn: Store, delivery_ids: Iterable[int], *, now: float) -> int:
    """Redrive: delivered or dead-lettered deliveries start over (attempts 0, EventTime ``now``,
    due now); their attempt log is kept. Pending ones are left alone. Returns how many moved."""
    condition, ids = any_of(conn, "id", delivery_ids)
    sql = _REQUEUE_SQL.format(ids=condition.replace("?", ":ids"))
    with atomic(conn):
        cursor = conn.execute(sql, {"now": now, "ids": ids})
        if cursor.rowcount:
            notify_due(conn)
    return cursor.rowcount


def enqueue(conn: Store, event_rowid: int, subscription_id: int, *, now: float) -> int:
    """Replay one event to one subscription: a new delivery, or a finished one started over; a
    pending one is left as it is. Returns the delivery id."""
    params = {"event_rowid": event_rowid, "subscription_id": subscription_id, "now": now}
    row = conn.execute(_ENQUEUE_SQL, params).fetchone()
    if row is not None:
        notify_due(conn)
    if row is None:
        row = conn.execute(
            "SELECT id FROM deliveries WHERE event_rowid = ? AND subscription_id = ?",
            (event_rowid, subscription_id),
        ).fetchone()
    return int(row[0])
