"""A store with deliveries in known states, written through the store's own API (for the exact
filter tests; the engine tests produce theirs by delivering to a real receiver)."""

from __future__ import annotations

from dataclasses import dataclass

from prefctl.store import Store, deliveries, events
from prefctl.store.db import transaction
from prefctl.store.deliveries import NewDelivery
from prefctl.store.delivery_results import Attempt, AttemptOutcome, DeliveryResult, record_results
from prefctl.store.events import NewEvent
from tests.store.service_helpers import ACCOUNT

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def event_id(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


@dataclass(frozen=True)
class Queued:
    delivery_id: int
    event_id: str


def queue_event(
    conn: Store, n: int, subscription_ids: list[int], *, at: float = T0
) -> list[Queued]:
    """Event ``n`` (contacts.email.updated of profile 1001) queued for each subscription."""
    new = NewEvent(
        event_id=event_id(n),
        event_type="contacts.email.updated",
        entity="Contacts",
        profile_id=1001,
        original_event_time=at - 1,
        data={"Address": f"ann{n}@example.com"},
        previous_data={"Address": "old@example.com"},
    )
    with transaction(conn):
        (rowid,) = events.insert_events(conn, ACCOUNT, [new])
        deliveries.add_deliveries(conn, [NewDelivery(rowid, s) for s in subscription_ids], now=at)
    rows = conn.execute(
        "SELECT id FROM deliveries WHERE event_rowid = ? ORDER BY subscription_id", (rowid,)
    ).fetchall()
    return [Queued(row[0], event_id(n)) for row in rows]


def finish(
    conn: Store,
    delivery_id: int,
    *,
    state: str = "dead_lettered",
    status: int | None = 503,
    error: str | None = None,
    attempts: int = 1,
    reason: str | None = "MaxDeliveryAttemptsExceeded",
    at: float = T0 + 10,
) -> None:
    """Record ``attempts`` attempts and end the delivery in ``state`` at ``at``."""
    outcome: AttemptOutcome = "delivered" if state == "delivered" else "failed"
    results = []
    for number in range(1, attempts + 1):
        last = number == attempts
        attempt = Attempt(
            number,
            at - attempts + number,
            at - attempts + number + 0.05,
            outcome,
            status,
            error,
            50.0,
        )
        results.append(
            DeliveryResult(
                delivery_id,
                state if last else "queued",  # type: ignore[arg-type]
                number,
                at=at - attempts + number,
                next_attempt_at=None if last else at,
                attempt=attempt,
                dead_letter_reason=reason if last and state == "dead_lettered" else None,
            )
        )
    for result in results:
        record_results(conn, [result])
