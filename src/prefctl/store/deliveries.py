"""The delivery queue: one row per (event, subscription), claimed by the dispatcher as leases.

States (docs/dispatcher.md)::

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

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson

from prefctl.store._dialect import any_of, is_postgres, notify_due, portable
from prefctl.store.db import atomic, execute_rows
from prefctl.store.timestamps import wire_time
from prefctl.webhooks.envelope import build_event, encode

if TYPE_CHECKING:
    from prefctl.store import Store
    from prefctl.store.postgres import PgStore

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
    "dead_letter_pending",
    "drop_pending",
    "enqueue",
    "hold_queued",
    "record_results",
    "release_claims",
    "release_held",
    "release_orphans",
    "requeue",
]

DeliveryState = Literal["held", "queued", "in_flight", "delivered", "dead_lettered"]
# What happened to one attempt: answered 200; any other answer or a connection error; no answer
# in time; not sent (endpoint on probation); a 200 that came after the attempt timed out.
AttemptOutcome = Literal["delivered", "failed", "timed_out", "skipped", "late_delivered"]
FINAL_STATES: tuple[DeliveryState, ...] = ("delivered", "dead_lettered")


# Not frozen: made for every delivery queued (50 per profile write), where a frozen dataclass's
# __init__ (object.__setattr__ per field) cost ~5x a plain one. Treat it as immutable.
@dataclass(slots=True)
class NewDelivery:
    """A delivery to create: ``held`` for a paused subscription that catches up on resume."""

    event_rowid: int
    subscription_id: int
    held: bool = False


# Not frozen: made once per delivery on the dispatcher's hot path, where a frozen dataclass's
# __init__ (object.__setattr__ per field) cost ~5x a plain one. Treat it as immutable.
@dataclass(slots=True)
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
        """The notification body of docs/webhooks.md (``webhooks.envelope``), with the stored Data
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
# One statement leases the due rows and returns what sending needs: the UPDATE picks the oldest
# due (the subquery runs first, in full), RETURNING reads each row's subscription and event by
# primary key. It replaced a SELECT then an UPDATE: a claim is every cycle's work, and each
# statement costs a simulated cycle far more than its rows do.
_CLAIM_SQL = """
UPDATE deliveries SET state = 'in_flight', lease_owner = :owner, lease_until = :until
WHERE id IN (
    SELECT d.id FROM deliveries d INDEXED BY deliveries_due
    CROSS JOIN subscriptions s ON s.id = d.subscription_id
    WHERE d.state = 'queued' AND d.next_attempt_at <= :now
      AND s.state = 'Active' {account}
      AND (s.provisioning_state = 'Succeeded'
           OR d.event_time <= :expired_before OR d.attempts >= :max_attempts)
    ORDER BY d.next_attempt_at
    LIMIT :limit
)
RETURNING id, subscription_id,
    (SELECT service_client_id FROM subscriptions WHERE id = subscription_id),
    (SELECT url FROM subscriptions WHERE id = subscription_id),
    (SELECT event_id FROM events WHERE id = event_rowid),
    (SELECT event_type FROM events WHERE id = event_rowid),
    (SELECT entity FROM events WHERE id = event_rowid),
    (SELECT profile_id FROM events WHERE id = event_rowid),
    (SELECT original_event_time FROM events WHERE id = event_rowid),
    event_time, attempts, first_attempt_at, next_attempt_at,
    (SELECT data FROM events WHERE id = event_rowid),
    (SELECT previous_data FROM events WHERE id = event_rowid)
"""
_CLAIM_ALL = _CLAIM_SQL.format(account="")
_CLAIM_ACCOUNT = _CLAIM_SQL.format(account="AND s.service_client_id = :account")
# On PostgreSQL several dispatchers (on several machines) claim from one queue at once: the due
# rows are locked as they are picked, and rows another claimer holds locked are stepped over
# (SKIP LOCKED), so no two claimers ever wait on each other or lease the same row. The UPDATE
# reads the subscription and the event by a join rather than a subquery per column.
_CLAIM_POSTGRES = """
WITH due AS (
    SELECT d.id FROM deliveries d
    JOIN subscriptions s ON s.id = d.subscription_id
    WHERE d.state = 'queued' AND d.next_attempt_at <= :now
      AND s.state = 'Active' {account}
      AND (s.provisioning_state = 'Succeeded'
           OR d.event_time <= :expired_before OR d.attempts >= :max_attempts)
    ORDER BY d.next_attempt_at
    LIMIT :limit
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE deliveries d SET state = 'in_flight', lease_owner = :owner, lease_until = :until
FROM due, subscriptions s, events e
WHERE d.id = due.id AND s.id = d.subscription_id AND e.id = d.event_rowid
RETURNING d.id, d.subscription_id, s.service_client_id, s.url, e.event_id, e.event_type,
    e.entity, e.profile_id, e.original_event_time, d.event_time, d.attempts,
    d.first_attempt_at, d.next_attempt_at, e.data::text, e.previous_data::text
"""
_CLAIM_ALL_POSTGRES = _CLAIM_POSTGRES.format(account="")
_CLAIM_ACCOUNT_POSTGRES = _CLAIM_POSTGRES.format(account="AND s.service_client_id = :account")
# What SQLite's INDEXED BY deliveries_due says: walk the due index in order and stop at the
# limit. PostgreSQL has no such hint, and its planner, with statistics taken before a burst of
# writes (a new store, or a backlog growing faster than autovacuum analyzes), estimates a few
# due rows, reads every due row once per subscription and sorts them all: 100-300 ms per claim
# at 200,000 queued instead of 5 ms (bench/api.py). Ruling out a sort and a bitmap scan for the
# claim's transaction leaves it the index's order whatever the statistics say.
_DUE_IN_ORDER_POSTGRES = "SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off"
# Expired leases are taken back the same way: rows another claimer is taking back are skipped.
_TAKE_BACK_POSTGRES = """
UPDATE deliveries SET state = 'queued', lease_owner = NULL, lease_until = NULL
WHERE id IN (
    SELECT id FROM deliveries WHERE state = 'in_flight' AND lease_until <= ?
    FOR UPDATE SKIP LOCKED
)
"""


def claim_due(
    conn: Store,
    now: float,
    limit: int,
    lease_seconds: float,
    owner: str,
    *,
    account: str | None = None,
    expired_before: float | None = None,
    max_attempts: int | None = None,
) -> list[ClaimedDelivery]:
    """Lease up to ``limit`` due deliveries to ``owner`` until ``now + lease_seconds``, oldest
    ``next_attempt_at`` first, across every subscription (of ``account`` when given) that is
    Active and Succeeded. Leases that expired by ``now`` are taken back first.

    One write transaction: concurrent claimers (threads or processes) never get the same row.
    Queued rows of a subscription that is not receiving (provisioning again after a Url change,
    or Failed) stay queued and are stepped over until it is, except those the caller will
    dead-letter at due time: an EventTime at or before ``expired_before`` (past its TTL) or
    ``max_attempts`` attempts made. Those are claimed too, so that the limits are checked when
    the next attempt comes due whatever the subscription's state (spec: "Time-to-live expiry is
    checked only at the next scheduled attempt"); the caller must not send them.
    """
    lease_until = now + lease_seconds
    if conn.dialect == "postgresql":
        return _claim_due_postgres(
            conn, now, limit, lease_until, owner, account, expired_before, max_attempts
        )
    with atomic(conn):
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
        params = {
            "owner": owner,
            "until": lease_until,
            "now": now,
            "limit": limit,
            "expired_before": expired_before,  # None: compares as unknown, i.e. never
            "max_attempts": max_attempts,
        }
        if account is None:
            rows: list[_ClaimRow] = cursor.execute(_CLAIM_ALL, params).fetchall()
        else:
            rows = cursor.execute(_CLAIM_ACCOUNT, {**params, "account": account}).fetchall()
    # RETURNING has no order: oldest due first, as the index gave them (ties by id).
    rows.sort(key=_claim_order)
    # Positional: RETURNING lists the fields in declaration order (this is the hot path).
    return [ClaimedDelivery(*row, lease_until=lease_until) for row in rows]


def _claim_order(row: _ClaimRow) -> tuple[float, int]:
    return row[12], row[0]


def _claim_due_postgres(
    conn: PgStore,
    now: float,
    limit: int,
    lease_until: float,
    owner: str,
    account: str | None,
    expired_before: float | None,
    max_attempts: int | None,
) -> list[ClaimedDelivery]:
    params = {
        "owner": owner,
        "until": lease_until,
        "now": now,
        "limit": limit,
        "expired_before": expired_before,
        "max_attempts": max_attempts,
    }
    with atomic(conn):
        conn.execute(_DUE_IN_ORDER_POSTGRES)
        conn.execute(_TAKE_BACK_POSTGRES, (now,))
        if account is None:
            rows: list[_ClaimRow] = conn.execute(
                _CLAIM_ALL_POSTGRES, params, tuples=True
            ).fetchall()
        else:
            params["account"] = account
            rows = conn.execute(_CLAIM_ACCOUNT_POSTGRES, params, tuples=True).fetchall()
    claimed = [ClaimedDelivery(*row, lease_until=lease_until) for row in rows]
    claimed.sort(key=lambda d: (d.next_attempt_at, d.delivery_id))
    return claimed


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


def release_claims(conn: Store, owner: str) -> int:
    """Give back every lease ``owner`` holds (a clean shutdown), unchanged and due as before."""
    with atomic(conn):
        cursor = conn.execute(
            portable(
                conn,
                "UPDATE deliveries INDEXED BY deliveries_leases"
                " SET state = 'queued', lease_owner = NULL, lease_until = NULL"
                " WHERE state = 'in_flight' AND lease_owner = ?",
            ),
            (owner,),
        )
    return cursor.rowcount


def release_orphans(conn: Store, owner_prefix: str, keep: Iterable[int]) -> int:
    """Give back the leases of the owners named ``owner_prefix…`` (one engine's cycles) on
    deliveries other than ``keep``: the engine's connection broke as a claim committed, so it
    never heard of those claims and will never send them. Returns how many."""
    condition, ids = any_of(conn, "id", keep)
    sql = f"{_ORPHANS} AND NOT {condition}"
    with atomic(conn):
        cursor = conn.execute(sql, (len(owner_prefix), owner_prefix, ids))
    return cursor.rowcount


_ORPHANS = (
    "UPDATE deliveries SET state = 'queued', lease_owner = NULL, lease_until = NULL"
    " WHERE state = 'in_flight' AND substr(lease_owner, 1, ?) = ?"
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
