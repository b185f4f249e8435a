from __future__ import annotations

from collections.abc import Iterator

import pytest

from prefctl.store import Store, deliveries, events
from prefctl.store.db import transaction
from prefctl.store.errors import StoreError
from prefctl.store.events import EventQuery, NewEvent
from tests.store.service_helpers import (
    ACCOUNT,
    OTHER_ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
DAY = 86_400.0


@pytest.fixture
def conn(store_location: str) -> Iterator[Store]:
    conn = open_service_store(store_location)
    yield conn
    conn.close()


def _event(n: int, *, at: float = T0, profile_id: int = 1001, kind: str = "tag.added") -> NewEvent:
    return NewEvent(
        event_id=f"00000000-0000-4000-8000-{n:012d}",
        event_type=kind,
        entity="Tags" if kind.startswith("tag.") else "Contacts",
        profile_id=profile_id,
        original_event_time=at,
        data={"Tag": f"t{n}"},
    )


def _store(conn: Store, *new: NewEvent, account: str = ACCOUNT) -> list[int]:
    with transaction(conn):
        return events.insert_events(conn, account, new)


def _ids(page: events.EventPage) -> list[str]:
    return [e.event_id[-2:] for e in page.events]


def test_stored_event_reads_back_in_notification_shape(conn: Store) -> None:
    new = NewEvent(
        event_id="0d6f0b1e-2c5a-4b8e-9a71-3f0c6d2e1a90",
        event_type="contacts.email.updated",
        entity="Contacts",
        profile_id=1001,
        original_event_time=T0 + 0.123,
        data={"Address": "ann@example.com", "Type": "Work"},
        previous_data={"Address": "ann@example.com", "Type": "Home"},
        filter_values=("Home", "Work"),
    )
    _store(conn, new)
    stored = events.get_event(conn, ACCOUNT, new.event_id)
    assert stored is not None
    assert stored.filter_values == ("Home", "Work")
    assert stored.to_wire() == {
        "EventId": new.event_id,
        "EventType": "contacts.email.updated",
        "Entity": "Contacts",
        "ClientId": ACCOUNT,
        "ProfileId": 1001,
        "OriginalEventTime": "2026-01-01T00:00:00.123Z",
        "Data": {"Address": "ann@example.com", "Type": "Work"},
        "PreviousData": {"Address": "ann@example.com", "Type": "Home"},
    }
    assert events.get_event(conn, OTHER_ACCOUNT, new.event_id) is None


def test_list_events_filters_by_profile_type_and_inclusive_time(conn: Store) -> None:
    _store(
        conn,
        _event(1, at=T0, profile_id=1001),
        _event(2, at=T0 + 10, profile_id=1002),
        _event(3, at=T0 + 20, profile_id=1001, kind="contacts.email.added"),
        _event(4, at=T0 + 30, profile_id=1001),
    )
    _store(conn, _event(5, at=T0), account=OTHER_ACCOUNT)
    everything = events.list_events(conn, ACCOUNT, EventQuery())
    by_profile = events.list_events(conn, ACCOUNT, EventQuery(profile_id=1001))
    by_type = events.list_events(conn, ACCOUNT, EventQuery(event_type="tag.added"))
    window = events.list_events(conn, ACCOUNT, EventQuery(start_at=T0 + 10, end_at=T0 + 20))
    assert _ids(everything) == ["01", "02", "03", "04"]
    assert _ids(by_profile) == ["01", "03", "04"]
    assert _ids(by_type) == ["01", "02", "04"]
    assert _ids(window) == ["02", "03"]


def test_list_events_by_subscription_carries_its_event_time(conn: Store) -> None:
    subscription_id = add_subscription(conn, subscription_body())
    rowids = _store(conn, _event(1), _event(2), _event(3))
    with transaction(conn):
        deliveries.add_deliveries(
            conn, [deliveries.NewDelivery(rowids[1], subscription_id)], now=T0 + 5
        )
    page = events.list_events(conn, ACCOUNT, EventQuery(subscription_id=subscription_id))
    [event] = page.events
    wire = event.to_wire()
    assert wire["EventId"].endswith("02")
    assert wire["SubscriptionId"] == subscription_id
    assert wire["EventTime"] == "2026-01-01T00:00:05.000Z"
    assert list(wire)[:5] == ["EventId", "EventType", "Entity", "SubscriptionId", "ClientId"]


def test_list_events_pages_through_equal_times_without_loss(conn: Store) -> None:
    _store(conn, *(_event(n, at=T0 + (n // 3)) for n in range(1, 11)))
    seen: list[str] = []
    cursor = None
    while True:
        page = events.list_events(conn, ACCOUNT, EventQuery(), limit=4, cursor=cursor)
        seen += _ids(page)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [f"{n:02d}" for n in range(1, 11)]


def test_list_events_page_of_big_events_stops_at_the_page_byte_budget(
    conn: Store,
) -> None:
    # profile.updatedfull events carry whole profiles, before and after: a page of 500 could be
    # a gigabyte. It stops near PAGE_BYTES and the cursor leads on.
    full = {"Tags": ["x" * 1000] * 500}
    big = [
        NewEvent(
            event_id=f"00000000-0000-4000-8000-{n:012d}",
            event_type="profile.updatedfull",
            entity="Profile",
            profile_id=1001,
            original_event_time=T0 + n,
            data=full,
            previous_data=full,
        )
        for n in range(1, 11)
    ]
    _store(conn, *big)
    first = events.list_events(conn, ACCOUNT, EventQuery(), limit=500)
    assert 1 <= len(first.events) < 10
    assert first.next_cursor is not None
    rest = events.list_events(conn, ACCOUNT, EventQuery(), limit=500, cursor=first.next_cursor)
    assert _ids(first) + _ids(rest) == [f"{n:02d}" for n in range(1, 11)]
    assert rest.next_cursor is None


def test_purge_events_drops_old_events_with_their_deliveries(conn: Store) -> None:
    subscription_id = add_subscription(conn, subscription_body())
    old, recent = _store(conn, _event(1, at=T0), _event(2, at=T0 + 10 * DAY))
    with transaction(conn):
        deliveries.add_deliveries(
            conn,
            [
                deliveries.NewDelivery(old, subscription_id),
                deliveries.NewDelivery(recent, subscription_id),
            ],
            now=T0,
        )
    now = T0 + 16 * DAY
    with transaction(conn):
        assert events.purge_events(conn, now) == 1
    assert _ids(events.list_events(conn, ACCOUNT, EventQuery())) == ["02"]
    assert conn.execute("SELECT count(*) FROM deliveries").fetchone()[0] == 1
    with transaction(conn):
        assert events.purge_events(conn, now) == 0


def test_insert_events_returns_the_ids_stored_in_order_with_or_without_a_transaction(
    conn: Store,
) -> None:
    first = _store(conn, _event(1), _event(2), _event(3))
    later = events.insert_events(conn, ACCOUNT, [_event(4), _event(5)])  # its own transaction
    stored = dict(conn.execute("SELECT event_id, id FROM events").fetchall())
    assert [stored[f"00000000-0000-4000-8000-{n:012d}"] for n in range(1, 6)] == first + later
    assert first + later == list(range(first[0], first[0] + 5))
    with pytest.raises(
        StoreError, match=r"(?i)unique"
    ):  # an EventId is stored once, and a failing call
        events.insert_events(conn, ACCOUNT, [_event(6), _event(1)])
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 5  # stores nothing
