"""Reading the delivery queue: delivery records, dead letters and each delivery's attempt log.

These back ``prefctl deliveries list/show`` and ``prefctl deadletters list/show/export/purge``.
Records print with snake_case keys and RFC 3339 times (``to_dict``), e.g. a dead letter::

    {"delivery_id": 7, "event_id": "…", "event_type": "contacts.email.added",
     "subscription_id": 12, "state": "dead_lettered", "reason": "MaxDeliveryAttemptsExceeded",
     "attempts": 30, "last_status": 503, "last_error": "…", "first_attempt_at": "…", …}
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefctl.store._dialect import any_of
from prefctl.store.deliveries import DeliveryState
from prefctl.store.delivery_results import AttemptOutcome
from prefctl.store.timestamps import wire_time

if TYPE_CHECKING:
    from prefctl.store import Store

__all__ = [
    "AttemptRecord",
    "DeliveryQuery",
    "DeliveryRecord",
    "delete_deliveries",
    "delivery_states",
    "get_deliveries",
    "get_delivery",
    "list_attempts",
    "list_deliveries",
]


def _time(seconds: float | None) -> str | None:
    return None if seconds is None else wire_time(seconds)


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """One delivery with its event's identity; times are Unix seconds."""

    delivery_id: int
    event_id: str
    event_type: str
    profile_id: int | None
    subscription_id: int
    service_client_id: str
    state: DeliveryState
    event_time: float | None
    original_event_time: float
    attempts: int
    next_attempt_at: float | None
    first_attempt_at: float | None
    last_attempt_at: float | None
    last_status: int | None
    last_error: str | None
    dead_letter_reason: str | None
    finished_at: float | None
    lease_owner: str | None
    lease_until: float | None

    def to_dict(self) -> dict[str, Any]:
        """The record as prefctl prints it: snake_case keys, RFC 3339 times."""
        return {
            "delivery_id": self.delivery_id,
            "event_id": self.event_id,
            "event_type": self.event_type,
            "profile_id": self.profile_id,
            "subscription_id": self.subscription_id,
            "state": self.state,
            "reason": self.dead_letter_reason,
            "attempts": self.attempts,
            "last_status": self.last_status,
            "last_error": self.last_error,
            "event_time": _time(self.event_time),
            "original_event_time": _time(self.original_event_time),
            "next_attempt_at": _time(self.next_attempt_at),
            "first_attempt_at": _time(self.first_attempt_at),
            "last_attempt_at": _time(self.last_attempt_at),
            "finished_at": _time(self.finished_at),
        }


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One line of a delivery's attempt timeline."""

    attempt_number: int
    started_at: float
    finished_at: float
    outcome: AttemptOutcome
    status: int | None
    error: str | None
    latency_ms: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt_number,
            "started_at": wire_time(self.started_at),
            "finished_at": wire_time(self.finished_at),
            "outcome": self.outcome,
            "status": self.status,
            "error": self.error,
            "latency_ms": self.latency_ms,
        }


@dataclass(frozen=True, slots=True)
class DeliveryQuery:
    """Filters of a delivery listing; all given ones must hold.

    ``since``/``until`` (inclusive, Unix seconds) apply to the delivery's last activity: when it
    finished, else its last attempt, else when it was queued.
    """

    account: str | None = None
    states: tuple[DeliveryState, ...] = ()
    subscription_id: int | None = None
    event_ids: tuple[str, ...] = ()
    reason: str | None = None
    last_status: int | None = None
    since: float | None = None
    until: float | None = None


_SELECT = """
SELECT d.id, e.event_id, e.event_type, e.profile_id, d.subscription_id, s.service_client_id,
       d.state, d.event_time, e.original_event_time, d.attempts, d.next_attempt_at,
       d.first_attempt_at, d.last_attempt_at, d.last_status, d.last_error, d.dead_letter_reason,
       d.finished_at, d.lease_owner, d.lease_until
FROM deliveries d
JOIN events e ON e.id = d.event_rowid
JOIN subscriptions s ON s.id = d.subscription_id
"""


def list_deliveries(
    conn: Store, query: DeliveryQuery, *, limit: int = 100, after_id: int = 0
) -> list[DeliveryRecord]:
    """Deliveries matching ``query`` in id order, from after ``after_id`` (for paging)."""
    where: list[str] = ["d.id > ?"]
    args: list[Any] = [after_id]
    if query.account is not None:
        where.append("s.service_client_id = ?")
        args.append(query.account)
    if query.states:
        where.append(f"d.state IN ({', '.join('?' * len(query.states))})")
        args += query.states
    if query.subscription_id is not None:
        where.append("d.subscription_id = ?")
        args.append(query.subscription_id)
    if query.event_ids:
        condition, param = any_of(conn, "e.event_id", query.event_ids)
        where.append(condition)
        args.append(param)
    if query.reason is not None:
        where.append("d.dead_letter_reason = ?")
        args.append(query.reason)
    if query.last_status is not None:
        where.append("d.last_status = ?")
        args.append(query.last_status)
    activity = "coalesce(d.finished_at, d.last_attempt_at, d.event_time)"
    if query.since is not None:
        where.append(f"{activity} >= ?")
        args.append(query.since)
    if query.until is not None:
        where.append(f"{activity} <= ?")
        args.append(query.until)
    sql = f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY d.id LIMIT ?"
    return [_record(row) for row in conn.execute(sql, (*args, limit))]


def get_delivery(conn: Store, delivery_id: int) -> DeliveryRecord | None:
    row = conn.execute(f"{_SELECT} WHERE d.id = ?", (delivery_id,)).fetchone()
    return _record(row) if row else None


def get_deliveries(conn: Store, delivery_ids: Iterable[int]) -> list[DeliveryRecord]:
    """The deliveries of ``delivery_ids`` that exist, in one query (in id order)."""
    condition, param = any_of(conn, "d.id", delivery_ids)
    rows = conn.execute(f"{_SELECT} WHERE {condition} ORDER BY d.id", (param,))
    return [_record(row) for row in rows]


def delivery_states(conn: Store, delivery_ids: Iterable[int]) -> dict[int, str]:
    """Delivery id → state, for those of ``delivery_ids`` that exist (one light query: for
    polling many deliveries until they are final)."""
    condition, param = any_of(conn, "id", delivery_ids)
    rows = conn.execute(f"SELECT id, state FROM deliveries WHERE {condition}", (param,))  # noqa: S608
    return {int(row[0]): str(row[1]) for row in rows}


def list_attempts(conn: Store, delivery_id: int) -> list[AttemptRecord]:
    """The delivery's attempts in the order they were recorded."""
    rows = conn.execute(
        "SELECT attempt_number, started_at, finished_at, outcome, status, error, latency_ms"
        " FROM delivery_attempts WHERE delivery_id = ? ORDER BY id",
        (delivery_id,),
    )
    return [AttemptRecord(*row) for row in rows]


def delete_deliveries(conn: Store, delivery_ids: Iterable[int]) -> int:
    """Remove deliveries and their attempt logs (``deadletters purge``); returns how many."""
    condition, param = any_of(conn, "id", delivery_ids)
    cursor = conn.execute(f"DELETE FROM deliveries WHERE {condition}", (param,))  # noqa: S608
    return cursor.rowcount


def _record(row: sqlite3.Row) -> DeliveryRecord:
    return DeliveryRecord(*tuple(row))
