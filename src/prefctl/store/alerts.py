"""Failure-alert emails (migration ``0004_alerts``): every alert written, with its full RFC 5322
text, whichever sink took it, so ``prefctl alerts`` can show the ones sent by SMTP too.

An alert is recorded as pending before it is sent (an outbox), then marked with the sink that took
it. Incidents, which decide when alerts are written, are in ``store/alert_incidents.py``.

Several dispatchers may share a store: an alert is sent by the one that claims it first
(``claim_alert``, migration ``0010_account_ceilings``), so it goes out once however many see it
pending; a claim that ends without the alert sent (its sender died) lets another take it.

    >>> alert_id = add_alert(conn, NewAlert(...))      # pending
    >>> set_alert_message(conn, alert_id, message.as_string())
    >>> if claim_alert(conn, alert_id, "host:12:ab", now=now, until=now + 60):
    ...     mark_sent(conn, alert_id, sink="mbox", at=now, smtp_error=None)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import orjson

from prefctl.store.connection import stored_json

if TYPE_CHECKING:
    from prefctl.store import Row, Store

__all__ = [
    "AlertKind",
    "AlertRecord",
    "NewAlert",
    "add_alert",
    "claim_alert",
    "get_alert",
    "last_alert_at",
    "list_alerts",
    "mark_sent",
    "pending_alerts",
    "set_alert_message",
    "unclaim_alert",
]

AlertKind = Literal["opened", "update", "paused", "recovered"]
Sink = Literal["smtp", "mbox"]


@dataclass(frozen=True, slots=True)
class NewAlert:
    """An alert to record before it is sent (state ``pending``)."""

    incident_id: int
    service_client_id: str
    subscription_id: int
    subscription_name: str
    kind: AlertKind
    sequence: int
    dead_letters: int
    incident_dead_letters: int
    recipients: Sequence[str]
    subject: str
    message_id: str
    created_at: float


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """An alert email as recorded: what it reported, where it went, and its full text."""

    id: int
    incident_id: int
    service_client_id: str
    subscription_id: int
    subscription_name: str
    kind: AlertKind
    sequence: int
    dead_letters: int
    incident_dead_letters: int
    recipients: list[str]
    subject: str
    message_id: str
    message: str
    created_at: float
    state: Literal["pending", "sent"]
    sink: Sink | None
    sent_at: float | None
    smtp_error: str | None


# -- alert emails ---------------------------------------------------------------------------------
def last_alert_at(conn: Store, subscription_id: int) -> float | None:
    """When the subscription's latest alert was written (any incident)."""
    row = conn.execute(
        "SELECT max(created_at) FROM alert_messages WHERE subscription_id = ?", (subscription_id,)
    ).fetchone()
    return None if row[0] is None else float(row[0])


def add_alert(conn: Store, alert: NewAlert) -> int:
    """Record an alert as pending; its text comes with ``set_alert_message``. Returns its id."""
    cursor = conn.execute(
        "INSERT INTO alert_messages (incident_id, service_client_id, subscription_id,"
        " subscription_name, kind, sequence, dead_letters, incident_dead_letters, recipients,"
        " subject, message_id, message, created_at, state)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', ?, 'pending') RETURNING id",
        (
            alert.incident_id,
            alert.service_client_id,
            alert.subscription_id,
            alert.subscription_name,
            alert.kind,
            alert.sequence,
            alert.dead_letters,
            alert.incident_dead_letters,
            orjson.dumps(list(alert.recipients)).decode(),
            alert.subject,
            alert.message_id,
            alert.created_at,
        ),
    )
    return int(cursor.fetchone()[0])


def set_alert_message(conn: Store, alert_id: int, message: str) -> None:
    conn.execute("UPDATE alert_messages SET message = ? WHERE id = ?", (message, alert_id))


def pending_alerts(conn: Store) -> list[AlertRecord]:
    """Alerts written but not yet sent, oldest first."""
    rows = conn.execute("SELECT * FROM alert_messages WHERE state = 'pending' ORDER BY id")
    return [_alert(row) for row in rows]


def claim_alert(conn: Store, alert_id: int, sender: str, *, now: float, until: float) -> bool:
    """Take the sending of a pending alert until ``until``: True when ``sender`` now holds it
    (nobody did, or the previous claim ended by ``now`` without the alert sent)."""
    cursor = conn.execute(
        "UPDATE alert_messages SET claimed_by = ?, claimed_until = ?"
        " WHERE id = ? AND state = 'pending' AND (claimed_until IS NULL OR claimed_until <= ?)",
        (sender, until, alert_id, now),
    )
    return cursor.rowcount == 1


def unclaim_alert(conn: Store, alert_id: int, sender: str) -> None:
    """Give back ``sender``'s claim of an alert it could not send (the next call tries again)."""
    conn.execute(
        "UPDATE alert_messages SET claimed_by = NULL, claimed_until = NULL"
        " WHERE id = ? AND claimed_by = ? AND state = 'pending'",
        (alert_id, sender),
    )


def mark_sent(conn: Store, alert_id: int, *, sink: Sink, at: float, smtp_error: str | None) -> None:
    conn.execute(
        "UPDATE alert_messages SET state = 'sent', sink = ?, sent_at = ?, smtp_error = ?"
        " WHERE id = ?",
        (sink, at, smtp_error, alert_id),
    )


def get_alert(conn: Store, alert_id: int) -> AlertRecord | None:
    row = conn.execute("SELECT * FROM alert_messages WHERE id = ?", (alert_id,)).fetchone()
    return _alert(row) if row else None


def list_alerts(
    conn: Store,
    *,
    subscription_id: int | None = None,
    since: float | None = None,
) -> list[AlertRecord]:
    """Alerts written, oldest first, filtered by subscription and creation time."""
    # Only the filters given (PostgreSQL cannot type a parameter that is only compared to NULL).
    where = ["1 = 1"]
    params: list[object] = []
    if subscription_id is not None:
        where.append("subscription_id = ?")
        params.append(subscription_id)
    if since is not None:
        where.append("created_at >= ?")
        params.append(since)
    sql = f"SELECT * FROM alert_messages WHERE {' AND '.join(where)} ORDER BY id"  # noqa: S608
    return [_alert(row) for row in conn.execute(sql, params)]


# -- rows -----------------------------------------------------------------------------------------
def _alert(row: Row) -> AlertRecord:
    return AlertRecord(
        id=row["id"],
        incident_id=row["incident_id"],
        service_client_id=row["service_client_id"],
        subscription_id=row["subscription_id"],
        subscription_name=row["subscription_name"],
        kind=row["kind"],
        sequence=row["sequence"],
        dead_letters=row["dead_letters"],
        incident_dead_letters=row["incident_dead_letters"],
        recipients=list(stored_json(row["recipients"])),
        subject=row["subject"],
        message_id=row["message_id"],
        message=row["message"],
        created_at=row["created_at"],
        state=row["state"],
        sink=row["sink"],
        sent_at=row["sent_at"],
        smtp_error=row["smtp_error"],
    )
