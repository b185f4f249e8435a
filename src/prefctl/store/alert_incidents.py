"""Failure-alert incidents (migration ``0004_alerts``): one per run of failures of a subscription,
and the dead letters waiting for its next alert.

The store records and decides nothing: ``dispatcher/alerts/monitor.py`` applies the incident rules
(docs/alerts.md) and calls these functions inside its own transactions. The alert emails themselves
are in ``store/alerts.py``.

    >>> incident = open_incident(conn, "DEMO_CORP", 12, now=t, next_alert_at=t, window_start=t0)
    >>> unreported_batch(conn, incident.id).by_reason
    {'PayloadTooLarge': 1}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from prefctl.store._dialect import any_of

if TYPE_CHECKING:
    from prefctl.store import Row, Store

__all__ = [
    "ALERTS_LOCK",
    "Batch",
    "CloseReason",
    "Incident",
    "IncidentState",
    "PendingDeadLetter",
    "add_dead_letters",
    "add_to_incident",
    "attach_recent",
    "close_incident",
    "count_recent",
    "current_incident",
    "delete_reported",
    "has_work",
    "live_incidents",
    "lock_alerting",
    "open_incident",
    "prune_unattached",
    "record_alert",
    "set_recovered",
    "unreported_batch",
    "waiting_accounts",
]

IncidentState = Literal["open", "paused", "closed"]
CloseReason = Literal["delivered", "quiet", "alerts_disabled"]
SAMPLE_SIZE = 10


@dataclass(frozen=True, slots=True)
class Incident:
    """A run of failures of one subscription; times are Unix seconds."""

    id: int
    service_client_id: str
    subscription_id: int
    state: IncidentState
    opened_at: float
    last_dead_letter_at: float
    dead_letters: int
    alerts_sent: int
    last_alert_at: float | None
    next_alert_at: float | None
    recovered_at: float | None
    closed_at: float | None
    close_reason: CloseReason | None


@dataclass(frozen=True, slots=True)
class PendingDeadLetter:
    """A dead letter as the incident rules keep it until an alert reports it."""

    event_id: str
    reason: str
    attempts: int
    last_status: int | None
    last_error: str | None
    first_attempt_at: float | None
    last_attempt_at: float | None
    dead_lettered_at: float


@dataclass(frozen=True, slots=True)
class Batch:
    """The dead letters an alert reports: how many, by reason, the latest one and samples."""

    count: int
    by_reason: dict[str, int]
    first_at: float
    last_at: float
    latest: PendingDeadLetter
    sample_event_ids: list[str]


# A key of PostgreSQL's advisory locks: the alert work of every dispatcher on one store.
ALERTS_LOCK = 0x70726566_616C7274  # "pref" "alrt"


def lock_alerting(conn: Store) -> None:
    """Inside a transaction: wait until no other dispatcher's alert work is under way, and keep
    them waiting until this transaction ends. On PostgreSQL, where several dispatchers share the
    store, two of them then never open two incidents for one subscription nor write one alert
    twice; on SQLite the write transaction is exclusive already."""
    if conn.dialect == "postgresql":
        conn.execute("SELECT pg_advisory_xact_lock(?)", (ALERTS_LOCK,))


# -- incidents ------------------------------------------------------------------------------------
def current_incident(conn: Store, subscription_id: int) -> Incident | None:
    """The subscription's incident that is not closed, if any."""
    row = conn.execute(
        "SELECT * FROM alert_incidents WHERE subscription_id = ? AND state <> 'closed'",
        (subscription_id,),
    ).fetchone()
    return _incident(row) if row else None


def live_incidents(conn: Store, subscription_ids: Iterable[int] | None = None) -> list[Incident]:
    """Incidents not closed (of ``subscription_ids`` when given), oldest first."""
    if subscription_ids is None:
        rows = conn.execute("SELECT * FROM alert_incidents WHERE state <> 'closed' ORDER BY id")
    else:
        condition, param = any_of(conn, "subscription_id", sorted(set(subscription_ids)))
        rows = conn.execute(
            f"SELECT * FROM alert_incidents WHERE state <> 'closed' AND {condition} ORDER BY id",  # noqa: S608
            (param,),
        )
    return [_incident(row) for row in rows]


def open_incident(
    conn: Store,
    account: str,
    subscription_id: int,
    *,
    now: float,
    next_alert_at: float,
    window_start: float,
) -> Incident | None:
    """Open an incident that takes the subscription's waiting dead letters since
    ``window_start``; older ones can no longer count and are dropped. None when the
    subscription has an incident already (another dispatcher on the store opened it since the
    caller looked)."""
    row = conn.execute(
        "INSERT INTO alert_incidents (service_client_id, subscription_id, state, opened_at,"
        " last_dead_letter_at, dead_letters, next_alert_at) VALUES (?, ?, 'open', ?, ?, 0, ?)"
        " ON CONFLICT (subscription_id) WHERE state <> 'closed' DO NOTHING RETURNING id",
        (account, subscription_id, now, now, next_alert_at),
    ).fetchone()
    if row is None:
        return None
    incident_id = int(row[0])
    prune_unattached(conn, before=window_start, subscription_id=subscription_id)
    attached = attach_recent(conn, subscription_id, incident_id)
    conn.execute(
        "UPDATE alert_incidents SET dead_letters = ? WHERE id = ?", (attached, incident_id)
    )
    return _require(conn, incident_id)


def add_to_incident(conn: Store, incident_id: int, count: int, *, now: float) -> Incident:
    """Count ``count`` more dead letters; a new failure cancels a pending recovery."""
    conn.execute(
        "UPDATE alert_incidents SET dead_letters = dead_letters + ?, last_dead_letter_at = ?,"
        " recovered_at = NULL WHERE id = ?",
        (count, now, incident_id),
    )
    return _require(conn, incident_id)


def record_alert(
    conn: Store,
    incident_id: int,
    *,
    at: float,
    next_alert_at: float | None,
    state: IncidentState,
    alerts_sent: int | None = None,
) -> bool:
    """Note that the incident sent an alert at ``at`` and when the next may go. With
    ``alerts_sent`` (the count read in this transaction) only if no one recorded another alert
    meanwhile: False then, and this one must not be written (several dispatchers share the
    store)."""
    sql = (
        "UPDATE alert_incidents SET alerts_sent = alerts_sent + 1, last_alert_at = ?,"
        " next_alert_at = ?, state = ? WHERE id = ?"
    )
    params: tuple[object, ...] = (at, next_alert_at, state, incident_id)
    if alerts_sent is not None:
        sql += " AND alerts_sent = ?"
        params += (alerts_sent,)
    return conn.execute(sql, params).rowcount == 1


def set_recovered(conn: Store, incident_id: int, *, at: float) -> None:
    conn.execute(
        "UPDATE alert_incidents SET recovered_at = coalesce(recovered_at, ?) WHERE id = ?",
        (at, incident_id),
    )


def close_incident(conn: Store, incident_id: int, *, at: float, reason: CloseReason) -> None:
    """Close the incident; dead letters it never reported are dropped with it."""
    conn.execute(
        "UPDATE alert_incidents SET state = 'closed', closed_at = ?, close_reason = ?,"
        " next_alert_at = NULL WHERE id = ?",
        (at, reason, incident_id),
    )
    conn.execute("DELETE FROM alert_dead_letters WHERE incident_id = ?", (incident_id,))


def has_work(conn: Store) -> bool:
    """Whether anything could be due: a live incident, a waiting dead letter, a pending alert.
    One cheap read, so that an idle dispatcher cycle takes no write lock for alerts."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM alert_incidents WHERE state <> 'closed')"
        " OR EXISTS (SELECT 1 FROM alert_dead_letters WHERE incident_id IS NULL)"
        " OR EXISTS (SELECT 1 FROM alert_messages WHERE state = 'pending')"
    ).fetchone()
    return bool(row[0])


# -- dead letters waiting for an alert -------------------------------------------------------------
def add_dead_letters(
    conn: Store,
    subscription_id: int,
    incident_id: int | None,
    dead_letters: Iterable[PendingDeadLetter],
) -> None:
    conn.executemany(
        "INSERT INTO alert_dead_letters (subscription_id, incident_id, event_id, reason, attempts,"
        " last_status, last_error, first_attempt_at, last_attempt_at, dead_lettered_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                subscription_id,
                incident_id,
                d.event_id,
                d.reason,
                d.attempts,
                d.last_status,
                d.last_error,
                d.first_attempt_at,
                d.last_attempt_at,
                d.dead_lettered_at,
            )
            for d in dead_letters
        ],
    )


def count_recent(conn: Store, subscription_id: int, *, since: float) -> int:
    """Dead letters of the subscription outside any incident, dead-lettered since ``since``."""
    row = conn.execute(
        "SELECT count(*) FROM alert_dead_letters WHERE subscription_id = ?"
        " AND incident_id IS NULL AND dead_lettered_at >= ?",
        (subscription_id, since),
    ).fetchone()
    return int(row[0])


def attach_recent(conn: Store, subscription_id: int, incident_id: int) -> int:
    """Give the subscription's waiting dead letters to ``incident_id``; returns how many."""
    cursor = conn.execute(
        "UPDATE alert_dead_letters SET incident_id = ? WHERE subscription_id = ?"
        " AND incident_id IS NULL",
        (incident_id, subscription_id),
    )
    return cursor.rowcount


def prune_unattached(
    conn: Store,
    *,
    before: float,
    subscription_id: int | None = None,
    account: str | None = None,
) -> int:
    """Drop dead letters outside any incident that are too old to open one (of one subscription,
    or of every subscription of ``account``)."""
    if subscription_id is not None:
        cursor = conn.execute(
            "DELETE FROM alert_dead_letters WHERE subscription_id = ? AND incident_id IS NULL"
            " AND dead_lettered_at < ?",
            (subscription_id, before),
        )
    else:
        cursor = conn.execute(
            "DELETE FROM alert_dead_letters WHERE incident_id IS NULL AND dead_lettered_at < ?"
            " AND subscription_id IN (SELECT id FROM subscriptions WHERE service_client_id = ?)",
            (before, account),
        )
    return cursor.rowcount


def waiting_accounts(conn: Store) -> list[str]:
    """Accounts with dead letters waiting outside any incident."""
    rows = conn.execute(
        "SELECT DISTINCT s.service_client_id FROM alert_dead_letters d"
        " JOIN subscriptions s ON s.id = d.subscription_id WHERE d.incident_id IS NULL"
    )
    return [str(row[0]) for row in rows]


def unreported_batch(conn: Store, incident_id: int) -> Batch | None:
    """What the incident's next alert would report, or None when nothing waits."""
    by_reason = {
        str(reason): int(count)
        for reason, count in conn.execute(
            "SELECT reason, count(*) FROM alert_dead_letters WHERE incident_id = ?"
            " GROUP BY reason ORDER BY count(*) DESC, reason",
            (incident_id,),
        )
    }
    if not by_reason:
        return None
    first_at, last_at = conn.execute(
        "SELECT min(dead_lettered_at), max(dead_lettered_at) FROM alert_dead_letters"
        " WHERE incident_id = ?",
        (incident_id,),
    ).fetchone()
    latest = conn.execute(
        "SELECT event_id, reason, attempts, last_status, last_error, first_attempt_at,"
        " last_attempt_at, dead_lettered_at FROM alert_dead_letters WHERE incident_id = ?"
        " ORDER BY dead_lettered_at DESC, id DESC LIMIT 1",
        (incident_id,),
    ).fetchone()
    samples = conn.execute(
        "SELECT event_id FROM alert_dead_letters WHERE incident_id = ? ORDER BY id LIMIT ?",
        (incident_id, SAMPLE_SIZE),
    )
    return Batch(
        count=sum(by_reason.values()),
        by_reason=by_reason,
        first_at=float(first_at),
        last_at=float(last_at),
        latest=PendingDeadLetter(*latest),
        sample_event_ids=[str(row[0]) for row in samples],
    )


def delete_reported(conn: Store, incident_id: int) -> None:
    """Forget the dead letters an alert has just reported (the email keeps what matters)."""
    conn.execute("DELETE FROM alert_dead_letters WHERE incident_id = ?", (incident_id,))


# -- rows -----------------------------------------------------------------------------------------
def _require(conn: Store, incident_id: int) -> Incident:
    row = conn.execute("SELECT * FROM alert_incidents WHERE id = ?", (incident_id,)).fetchone()
    return _incident(row)


def _incident(row: Row) -> Incident:
    return Incident(
        id=row["id"],
        service_client_id=row["service_client_id"],
        subscription_id=row["subscription_id"],
        state=row["state"],
        opened_at=row["opened_at"],
        last_dead_letter_at=row["last_dead_letter_at"],
        dead_letters=row["dead_letters"],
        alerts_sent=row["alerts_sent"],
        last_alert_at=row["last_alert_at"],
        next_alert_at=row["next_alert_at"],
        recovered_at=row["recovered_at"],
        closed_at=row["closed_at"],
        close_reason=row["close_reason"],
    )
