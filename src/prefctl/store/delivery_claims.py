"""Claiming due deliveries: the dispatcher leases them, and gives back the leases it will not use.

Claims are leases: a claimer that dies leaves rows ``in_flight`` until ``lease_until``, after
which the next ``claim_due`` takes them back (at least once; never lost). ``claim_due`` is one
transaction (or joins the caller's), reads rows into plain dataclasses and never touches
pydantic. ``release_claims`` gives back an owner's leases on a clean shutdown,
``release_orphans`` those of claims an engine never heard committed.

    >>> batch = claim_due(conn, now=clock_now, limit=500, lease_seconds=60, owner="engine-1")
    >>> [d.body() for d in batch]  # the notification bodies to send

What a claimer reports back for each is recorded by ``delivery_results.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson

from prefctl.store._dialect import any_of, portable
from prefctl.store.db import atomic
from prefctl.store.timestamps import wire_time
from prefctl.webhooks.envelope import build_event, encode

if TYPE_CHECKING:
    from prefctl.store import Store
    from prefctl.store.postgres import PgStore

__all__ = ["ClaimedDelivery", "claim_due", "release_claims", "release_orphans"]


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
