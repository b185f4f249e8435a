from __future__ import annotations

from collections.abc import Iterator

import pytest

from prefctl.store import Store, delivery_history, events
from prefctl.store.db import transaction
from prefctl.store.deliveries import NewDelivery, add_deliveries
from prefctl.store.delivery_claims import claim_due, release_claims
from prefctl.store.delivery_history import DeliveryQuery
from prefctl.store.delivery_results import Attempt, DeliveryResult, record_results
from prefctl.store.events import NewEvent
from tests.store.service_helpers import (
    ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

T0 = 1_767_225_600.0


@pytest.fixture
def conn(store_location: str) -> Iterator[Store]:
    """A store on each backend (SQLite, PostgreSQL)."""
    conn = open_service_store(store_location)
    yield conn
    conn.close()


def _three_outcomes(conn: Store) -> tuple[int, list[int]]:
    """One delivered, one dead-lettered (503 after 2 attempts), one still queued."""
    subscription_id = add_subscription(conn, subscription_body())
    new = [
        NewEvent(f"00000000-0000-4000-8000-00000000000{n}", "tag.added", "Tags", 1001, T0, {})
        for n in range(3)
    ]
    with transaction(conn):
        rowids = events.insert_events(conn, ACCOUNT, new)
        add_deliveries(conn, [NewDelivery(r, subscription_id) for r in rowids], now=T0)
    ids = [c.delivery_id for c in claim_due(conn, T0, 2, 60, "e")]
    record_results(
        conn,
        [
            DeliveryResult(
                ids[0],
                "delivered",
                1,
                at=T0 + 1,
                owner="e",
                attempt=Attempt(1, T0, T0 + 0.2, "delivered", 200, None, 200.0),
            ),
            DeliveryResult(
                ids[1],
                "queued",
                1,
                at=T0 + 1,
                owner="e",
                next_attempt_at=T0 + 10,
                attempt=Attempt(1, T0, T0 + 0.1, "failed", 503, "HTTP 503", 100.0),
            ),
        ],
    )
    claim_due(conn, T0 + 10, 2, 60, "e")
    record_results(
        conn,
        [
            DeliveryResult(
                ids[1],
                "dead_lettered",
                2,
                at=T0 + 11,
                owner="e",
                attempt=Attempt(2, T0 + 10, T0 + 10.1, "failed", 503, "HTTP 503", 100.0),
                dead_letter_reason="MaxDeliveryAttemptsExceeded",
            )
        ],
    )
    release_claims(conn, "e")  # the never-attempted third one goes back to the queue
    return subscription_id, ids


def test_dead_letter_record_keeps_what_the_design_lists(conn: Store) -> None:
    subscription_id, ids = _three_outcomes(conn)
    [dead] = delivery_history.list_deliveries(conn, DeliveryQuery(states=("dead_lettered",)))
    record = dead.to_dict()
    assert record["delivery_id"] == ids[1]
    assert record["event_id"] == "00000000-0000-4000-8000-000000000001"
    assert record["event_type"] == "tag.added"
    assert record["subscription_id"] == subscription_id
    assert record["reason"] == "MaxDeliveryAttemptsExceeded"
    assert (record["attempts"], record["last_status"], record["last_error"]) == (2, 503, "HTTP 503")
    assert record["first_attempt_at"] == "2026-01-01T00:00:00.000Z"
    assert record["last_attempt_at"] == "2026-01-01T00:00:10.000Z"
    assert record["finished_at"] == "2026-01-01T00:00:11.000Z"


def test_list_deliveries_filters_and_pages(conn: Store) -> None:
    subscription_id, ids = _three_outcomes(conn)

    def listed(**kwargs: object) -> list[int]:
        query = DeliveryQuery(**kwargs)  # type: ignore[arg-type]
        return [r.delivery_id for r in delivery_history.list_deliveries(conn, query)]

    assert len(listed()) == 3
    assert listed(account=ACCOUNT, subscription_id=subscription_id) == listed()
    assert listed(states=("queued",)) == [ids[1] + 1]
    assert listed(last_status=503) == [ids[1]]
    assert listed(reason="MaxDeliveryAttemptsExceeded") == [ids[1]]
    assert listed(event_ids=("00000000-0000-4000-8000-000000000000",)) == [ids[0]]
    assert listed(since=T0 + 5) == [ids[1]]
    assert listed(until=T0 + 5) == [ids[0], ids[1] + 1]
    page = delivery_history.list_deliveries(conn, DeliveryQuery(), limit=1, after_id=ids[0])
    assert [r.delivery_id for r in page] == [ids[1]]


def test_attempt_timeline_and_delete(conn: Store) -> None:
    _, ids = _three_outcomes(conn)
    timeline = [a.to_dict() for a in delivery_history.list_attempts(conn, ids[1])]
    assert [(a["attempt"], a["status"], a["outcome"]) for a in timeline] == [
        (1, 503, "failed"),
        (2, 503, "failed"),
    ]
    assert timeline[1]["started_at"] == "2026-01-01T00:00:10.000Z"
    record = delivery_history.get_delivery(conn, ids[1])
    assert record is not None
    assert record.state == "dead_lettered"
    with transaction(conn):
        assert delivery_history.delete_deliveries(conn, [ids[1]]) == 1
    assert delivery_history.get_delivery(conn, ids[1]) is None
    assert delivery_history.list_attempts(conn, ids[1]) == []
