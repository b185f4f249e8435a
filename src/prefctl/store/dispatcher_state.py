"""The dispatcher's own tables (migration ``0003_dispatcher``) and its lease housekeeping.

- Endpoint health: the probation bookkeeping of each (account, Url), so that a restart remembers an
  unhealthy endpoint. Rows are plain numbers; ``dispatcher/probation.py`` turns them into
  ``policy.EndpointHealth``.
- TLS: the client certificate, key and extra CAs an account's deliveries use (mTLS).
- Leases: which claimers hold ``in_flight`` deliveries (to give back those of a dead process), and
  moving deliveries that waited for a probe slot forward once the endpoint is healthy again.

Functions do not open transactions unless they say so; the caller groups them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefctl.store import Store

from prefctl.store._dialect import portable

__all__ = [
    "HealthRow",
    "TlsRow",
    "clear_tls",
    "config_version",
    "delete_health",
    "due_exists",
    "get_tls",
    "lease_owners",
    "load_health",
    "put_tls",
    "release_waiting",
    "save_health",
]


@dataclass(frozen=True, slots=True)
class HealthRow:
    """One endpoint's probation state; ``next_probe_at`` is a real time (Unix seconds)."""

    service_client_id: str
    url: str
    consecutive_failures: int
    on_probation: bool
    probe_interval_seconds: float
    next_probe_at: float | None


@dataclass(frozen=True, slots=True)
class TlsRow:
    """An account's delivery TLS settings, as PEM text."""

    service_client_id: str
    client_cert_pem: str | None
    client_key_pem: str | None = field(repr=False)
    ca_pem: str | None
    updated_at: float


def load_health(conn: Store, account: str | None = None) -> list[HealthRow]:
    """Every endpoint with a health row (of ``account`` when given)."""
    sql = (
        "SELECT service_client_id, url, consecutive_failures, on_probation,"
        " probe_interval_seconds, next_probe_at FROM endpoint_health"
    )
    rows = (
        conn.execute(sql)
        if account is None
        else conn.execute(sql + " WHERE service_client_id = ?", (account,))
    )
    return [HealthRow(r[0], r[1], r[2], bool(r[3]), r[4], r[5]) for r in rows]


def save_health(conn: Store, rows: Iterable[HealthRow], *, now: float) -> None:
    """Insert or replace health rows."""
    conn.executemany(
        "INSERT INTO endpoint_health (service_client_id, url, consecutive_failures, on_probation,"
        " probe_interval_seconds, next_probe_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (service_client_id, url) DO UPDATE SET"
        " consecutive_failures = excluded.consecutive_failures,"
        " on_probation = excluded.on_probation,"
        " probe_interval_seconds = excluded.probe_interval_seconds,"
        " next_probe_at = excluded.next_probe_at, updated_at = excluded.updated_at",
        [
            (
                r.service_client_id,
                r.url,
                r.consecutive_failures,
                int(r.on_probation),
                r.probe_interval_seconds,
                r.next_probe_at,
                now,
            )
            for r in rows
        ],
    )


def delete_health(conn: Store, keys: Iterable[tuple[str, str]]) -> None:
    """Forget endpoints that are healthy again: ``(service_client_id, url)`` pairs."""
    conn.executemany(
        "DELETE FROM endpoint_health WHERE service_client_id = ? AND url = ?", list(keys)
    )


def release_waiting(conn: Store, account: str, url: str, *, slot: float, now: float) -> int:
    """Make due now the queued deliveries to ``url`` that were put off to the probe slot ``slot``
    (a probation that ended early: they waited only for it). Returns how many."""
    # Skipped deliveries all carry exactly the slot's time; the millisecond window absorbs float
    # rounding and matches no backoff by accident (those are jittered).
    cursor = conn.execute(
        "UPDATE deliveries SET next_attempt_at = ?"
        " WHERE state = 'queued' AND next_attempt_at BETWEEN ? AND ?"
        " AND subscription_id IN"
        " (SELECT id FROM subscriptions WHERE service_client_id = ? AND url = ?)",
        (now, slot - 0.001, slot + 0.001, account, url),
    )
    return cursor.rowcount


def due_exists(conn: Store, now: float, account: str | None = None) -> bool:
    """Whether a delivery is due at ``now`` that ``delivery_claims.claim_due`` would claim (queued,
    to an Active and Succeeded subscription, of ``account`` when given)."""
    sql = (
        "SELECT 1 FROM deliveries d INDEXED BY deliveries_due"
        " CROSS JOIN subscriptions s ON s.id = d.subscription_id"
        " WHERE d.state = 'queued' AND d.next_attempt_at <= ?"
        " AND s.state = 'Active' AND s.provisioning_state = 'Succeeded'"
    )
    if account is None:
        return conn.execute(portable(conn, sql + " LIMIT 1"), (now,)).fetchone() is not None
    sql += " AND s.service_client_id = ? LIMIT 1"
    return conn.execute(portable(conn, sql), (now, account)).fetchone() is not None


def lease_owners(conn: Store) -> list[str]:
    """The distinct owners of ``in_flight`` deliveries."""
    rows = conn.execute(
        portable(
            conn,
            "SELECT DISTINCT lease_owner FROM deliveries INDEXED BY deliveries_leases"
            " WHERE state = 'in_flight' AND lease_until IS NOT NULL",
        )
    )
    return [row[0] for row in rows]


def config_version(conn: Store) -> int:
    """A number that changes whenever an account, a webhook setting or a delivery TLS row does
    (triggers of migration 0005): what the dispatcher reads each cycle before re-reading them."""
    return int(conn.execute("SELECT version FROM dispatcher_config_version").fetchone()[0])


def get_tls(conn: Store, account: str) -> TlsRow | None:
    row = conn.execute(
        "SELECT service_client_id, client_cert_pem, client_key_pem, ca_pem, updated_at"
        " FROM dispatcher_tls WHERE service_client_id = ?",
        (account,),
    ).fetchone()
    return TlsRow(*row) if row else None


def put_tls(conn: Store, row: TlsRow) -> None:
    """Install (replace) an account's delivery TLS settings."""
    conn.execute(
        "INSERT INTO dispatcher_tls (service_client_id, client_cert_pem, client_key_pem, ca_pem,"
        " updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (service_client_id) DO UPDATE SET"
        " client_cert_pem = excluded.client_cert_pem, client_key_pem = excluded.client_key_pem,"
        " ca_pem = excluded.ca_pem, updated_at = excluded.updated_at",
        (
            row.service_client_id,
            row.client_cert_pem,
            row.client_key_pem,
            row.ca_pem,
            row.updated_at,
        ),
    )


def clear_tls(conn: Store, account: str) -> bool:
    """Remove an account's delivery TLS settings; False when there were none."""
    cursor = conn.execute("DELETE FROM dispatcher_tls WHERE service_client_id = ?", (account,))
    return cursor.rowcount == 1
