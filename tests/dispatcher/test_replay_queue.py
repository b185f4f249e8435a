from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from prefctl.dispatcher.deadletters import DeadLetterFilter
from prefctl.dispatcher.replay.queue import (
    ReplaySource,
    queue_for_subscription,
    requeue_own,
    select,
)
from prefctl.errors import NotFoundError, UsageError
from prefctl.store import Store, subscriptions
from prefctl.store.db import transaction
from prefctl.store.delivery_history import get_delivery
from prefctl.store.events import get_event
from prefctl.webhooks.envelope import build_event
from tests.dispatcher.ops_helpers import T0, event_id, finish, queue_event
from tests.store.service_helpers import (
    ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

NOW = T0 + 5000


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Store]:
    conn = open_service_store(tmp_path / "store.db")
    yield conn
    conn.close()


@pytest.fixture
def subs(conn: Store) -> list[int]:
    return [
        add_subscription(conn, subscription_body("https://a.example/hook", name="A")),
        add_subscription(conn, subscription_body("https://b.example/hook", name="B")),
    ]


def _capture(tmp_path: Path, *numbers: int) -> Path:
    path = tmp_path / "capture.ndjson"
    lines = [
        orjson.dumps(
            {
                "received_at": "2026-01-01T00:00:01.000Z",
                "body": build_event(
                    event_id=event_id(n),
                    event_type="tag.added",
                    subscription_id=77,
                    client_id=ACCOUNT,
                    profile_id=1001,
                    event_time="2026-01-01T00:00:00.500Z",
                    original_event_time="2026-01-01T00:00:00.000Z",
                    data={"Tag": f"t{n}"},
                ),
            }
        )
        for n in numbers
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_source_check_needs_exactly_one_source(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="choose one source"):
        ReplaySource().check()
    with pytest.raises(UsageError, match="choose one source"):
        ReplaySource(file=tmp_path, event_ids=("x",)).check()


def test_queue_for_subscription_adds_captured_events_and_keeps_their_event_ids(
    conn: Store, subs: list[int], tmp_path: Path
) -> None:
    selection = select(None, ReplaySource(file=_capture(tmp_path, 1, 2)))

    ids = queue_for_subscription(conn, selection.items, subs[1], now=NOW)

    records = [get_delivery(conn, i) for i in ids]
    assert [(r.event_id, r.subscription_id, r.state) for r in records if r] == [
        (event_id(1), subs[1], "queued"),
        (event_id(2), subs[1], "queued"),
    ]
    assert all(r is not None and r.event_time == NOW for r in records)
    stored = get_event(conn, ACCOUNT, event_id(1))
    assert stored is not None
    assert stored.data == {"Tag": "t1"}
    assert stored.original_event_time == T0


def test_queue_for_subscription_restarts_a_finished_delivery_of_a_stored_event(
    conn: Store, subs: list[int]
) -> None:
    (a1,) = queue_event(conn, 1, subs[:1])
    finish(conn, a1.delivery_id, state="delivered", status=200, reason=None)
    selection = select(conn, ReplaySource(event_ids=(event_id(1),)))

    assert queue_for_subscription(conn, selection.items, subs[0], now=NOW) == [a1.delivery_id]
    record = get_delivery(conn, a1.delivery_id)
    assert record is not None
    assert (record.state, record.attempts, record.event_time) == ("queued", 0, NOW)


def test_queue_for_subscription_paused_target_is_refused(conn: Store, subs: list[int]) -> None:
    queue_event(conn, 1, subs[:1])
    with transaction(conn):
        subscriptions.set_state(conn, ACCOUNT, subs[1], "Paused", actor="admin", now=T0)
    selection = select(conn, ReplaySource(event_ids=(event_id(1),)))
    with pytest.raises(UsageError, match="receives no events"):
        queue_for_subscription(conn, selection.items, subs[1], now=NOW)


def test_select_unknown_event_id_is_not_found(conn: Store, subs: list[int]) -> None:
    queue_event(conn, 1, subs[:1])
    with pytest.raises(NotFoundError, match=event_id(9)):
        select(conn, ReplaySource(event_ids=(event_id(1), event_id(9))))


def test_select_since_and_from_subscription_pick_stored_events(
    conn: Store, subs: list[int]
) -> None:
    queue_event(conn, 1, subs, at=T0)
    queue_event(conn, 2, subs[:1], at=T0 + 100)
    queue_event(conn, 3, subs[1:], at=T0 + 200)

    def picked(source: ReplaySource) -> list[str]:
        return [item.event.event_id[-1] for item in select(conn, source).items]

    assert picked(ReplaySource(since=T0 + 50)) == ["2", "3"]
    assert picked(ReplaySource(since=T0 - 10, until=T0 + 150)) == ["1", "2"]
    assert picked(ReplaySource(since=0, from_subscription=subs[1])) == ["1", "3"]


def test_requeue_own_restarts_dead_letters_on_their_subscription(
    conn: Store, subs: list[int]
) -> None:
    (a1, b1) = queue_event(conn, 1, subs)
    finish(conn, a1.delivery_id, status=413, reason="PayloadTooLarge")
    finish(conn, b1.delivery_id, state="delivered", status=200, reason=None)
    selection = select(conn, ReplaySource(dead_lettered=DeadLetterFilter()))

    assert requeue_own(conn, selection, now=NOW).ids == [a1.delivery_id]
    a1_now, b1_now = get_delivery(conn, a1.delivery_id), get_delivery(conn, b1.delivery_id)
    assert a1_now is not None
    assert b1_now is not None
    assert (a1_now.state, a1_now.attempts, a1_now.event_time) == ("queued", 0, NOW)
    assert b1_now.state == "delivered"


def test_requeue_own_stored_events_go_back_to_every_subscription_they_had(
    conn: Store, subs: list[int]
) -> None:
    (a1, b1) = queue_event(conn, 1, subs)
    finish(conn, a1.delivery_id, state="delivered", status=200, reason=None)
    selection = select(conn, ReplaySource(event_ids=(event_id(1),)))

    ids = requeue_own(conn, selection, now=NOW).ids

    assert ids == [a1.delivery_id, b1.delivery_id]  # b1 was still pending: waited for as is
    a1_now = get_delivery(conn, a1.delivery_id)
    assert a1_now is not None
    assert a1_now.state == "queued"


def test_requeue_own_captured_events_need_a_target(
    conn: Store, subs: list[int], tmp_path: Path
) -> None:
    selection = select(None, ReplaySource(file=_capture(tmp_path, 1)))
    with pytest.raises(UsageError, match="need a target"):
        requeue_own(conn, selection, now=NOW)


def test_requeue_own_leaves_and_counts_deliveries_of_a_deleted_subscription(
    conn: Store, subs: list[int]
) -> None:
    from prefctl.errors import NotFoundError
    from prefctl.store import subscriptions
    from prefctl.store.db import transaction
    from tests.store.service_helpers import ACCOUNT

    (a1, b1) = queue_event(conn, 1, subs)
    finish(conn, a1.delivery_id, status=413, reason="PayloadTooLarge")
    finish(conn, b1.delivery_id, status=413, reason="PayloadTooLarge")
    with transaction(conn):
        subscriptions.delete_subscription(conn, ACCOUNT, subs[0], now=NOW)
    selection = select(conn, ReplaySource(dead_lettered=DeadLetterFilter()))

    requeued = requeue_own(conn, selection, now=NOW)

    # The other subscription's dead letter goes again; the deleted one's stays, counted.
    assert requeued == ([b1.delivery_id], 1)
    a1_now = get_delivery(conn, a1.delivery_id)
    assert a1_now is not None
    assert a1_now.state == "dead_lettered"
    # When that is all there is, it says so (exit 4) rather than replaying nothing.
    only_deleted = select(conn, ReplaySource(dead_lettered=DeadLetterFilter()))
    with pytest.raises(NotFoundError, match=f"subscription {subs[0]} was deleted"):
        requeue_own(conn, only_deleted, now=NOW)
