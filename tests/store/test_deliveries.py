from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator

import orjson
import pytest

from prefctl.models.event import EventNotification
from prefctl.store import Store, deliveries, events, subscriptions
from prefctl.store.connection import Store as SqliteStore
from prefctl.store.db import connect, transaction
from prefctl.store.deliveries import NewDelivery
from prefctl.store.delivery_claims import claim_due, release_claims, release_orphans
from prefctl.store.delivery_results import Attempt, DeliveryResult, record_results
from prefctl.store.events import NewEvent
from tests.store.service_helpers import (
    ACCOUNT,
    OTHER_ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture
def path(store_location: str) -> str:
    """The store of the test, on each backend (SQLite, PostgreSQL)."""
    return store_location


@pytest.fixture
def conn(path: str) -> Iterator[Store]:
    conn = open_service_store(path)
    yield conn
    conn.close()


@pytest.fixture
def subscription_id(conn: Store) -> int:
    return add_subscription(conn, subscription_body("https://hooks.example/in"))


def _queue(
    conn: Store,
    subscription_id: int,
    count: int,
    *,
    at: float = T0,
    account: str = ACCOUNT,
    start: int = 0,
) -> list[int]:
    """``count`` events, each queued for ``subscription_id`` at ``at``; returns delivery ids."""
    new = [
        NewEvent(
            event_id=f"00000000-0000-4000-8000-{start + n:012d}",
            event_type="contacts.email.updated",
            entity="Contacts",
            profile_id=1001,
            original_event_time=at - 1,
            data={"Address": f"a{n}@x.io"},
            previous_data={"Address": f"a{n}@x.io", "Type": "Home"} if n == 0 else None,
        )
        for n in range(count)
    ]
    with transaction(conn):
        rowids = events.insert_events(conn, account, new)
        deliveries.add_deliveries(conn, [NewDelivery(r, subscription_id) for r in rowids], now=at)
    return [
        row[0]
        for row in conn.execute(
            "SELECT id FROM deliveries WHERE subscription_id = ? ORDER BY id DESC LIMIT ?",
            (subscription_id, count),
        )
    ][::-1]


def _state(conn: Store, delivery_id: int) -> sqlite3.Row:
    row: sqlite3.Row = conn.execute(
        "SELECT * FROM deliveries WHERE id = ?", (delivery_id,)
    ).fetchone()
    return row


def _attempt(number: int, outcome: str = "delivered", status: int | None = 200) -> Attempt:
    return Attempt(number, T0 + 1, T0 + 1.05, outcome, status, None, 50.0)  # type: ignore[arg-type]


# -- claim ------------------------------------------------------------------------------------------
def test_claim_due_leases_only_due_rows_oldest_first(conn: Store, subscription_id: int) -> None:
    later = _queue(conn, subscription_id, 2, at=T0 + 100)
    due = _queue(conn, subscription_id, 3, at=T0, start=10)
    claimed = claim_due(conn, T0 + 50, 10, 60, "engine-1")
    assert [c.delivery_id for c in claimed] == due
    assert {c.lease_until for c in claimed} == {T0 + 110}
    assert _state(conn, due[0])["state"] == "in_flight"
    assert _state(conn, due[0])["lease_owner"] == "engine-1"
    assert _state(conn, later[0])["state"] == "queued"
    assert claim_due(conn, T0 + 50, 10, 60, "engine-2") == []


def test_claim_due_respects_the_limit(conn: Store, subscription_id: int) -> None:
    ids = _queue(conn, subscription_id, 5)
    assert [c.delivery_id for c in claim_due(conn, T0, 2, 60, "e")] == ids[:2]
    assert [c.delivery_id for c in claim_due(conn, T0, 10, 60, "e")] == ids[2:]


def test_claimed_body_is_a_valid_notification(conn: Store, subscription_id: int) -> None:
    _queue(conn, subscription_id, 2, at=T0 + 0.5)
    first, second = claim_due(conn, T0 + 1, 10, 60, "e")
    body = orjson.loads(first.body())
    assert body == {
        "EventId": "00000000-0000-4000-8000-000000000000",
        "EventType": "contacts.email.updated",
        "Entity": "Contacts",
        "SubscriptionId": subscription_id,
        "ClientId": ACCOUNT,
        "ProfileId": 1001,
        "EventTime": "2026-01-01T00:00:00.500Z",
        "OriginalEventTime": "2025-12-31T23:59:59.500Z",
        "Data": {"Address": "a0@x.io"},
        "PreviousData": {"Address": "a0@x.io", "Type": "Home"},
    }
    assert "PreviousData" not in orjson.loads(second.body())
    EventNotification.model_validate_json(second.body())
    assert first.url == "https://hooks.example/in"


def test_claim_due_skips_subscriptions_that_do_not_receive(conn: Store) -> None:
    provisioning = add_subscription(
        conn, subscription_body("https://a.example/1"), provisioned=False
    )
    paused = add_subscription(conn, subscription_body("https://a.example/2", state="Paused"))
    _queue(conn, provisioning, 1)
    with transaction(conn):
        # Rows queued before the pause that a pause would have dropped: still not claimed.
        conn.execute(
            "INSERT INTO deliveries (event_rowid, subscription_id, state, event_time,"
            " next_attempt_at) SELECT id, ?, 'queued', ?, ? FROM events",
            (paused, T0, T0),
        )
    assert claim_due(conn, T0, 10, 60, "e") == []
    with transaction(conn):
        subscriptions.set_provisioning_state(conn, provisioning, "Succeeded", now=T0)
    assert len(claim_due(conn, T0, 10, 60, "e")) == 1


def test_claim_due_for_one_account(conn: Store, subscription_id: int) -> None:
    other = add_subscription(conn, subscription_body("https://b.example"), account=OTHER_ACCOUNT)
    mine = _queue(conn, subscription_id, 2)
    _queue(conn, other, 2, account=OTHER_ACCOUNT, start=100)
    claimed = claim_due(conn, T0, 10, 60, "e", account=ACCOUNT)
    assert [c.delivery_id for c in claimed] == mine


def test_two_claimers_never_get_the_same_row(path: str, conn: Store) -> None:
    subscription_id = add_subscription(conn, subscription_body())
    expected = set(_queue(conn, subscription_id, 600))
    got: dict[str, list[int]] = {"a": [], "b": []}
    start = threading.Barrier(2)

    def claimer(owner: str) -> None:
        own = connect(path)
        start.wait()
        while batch := claim_due(own, T0, 25, 60, owner):
            got[owner] += [c.delivery_id for c in batch]
        own.close()

    threads = [threading.Thread(target=claimer, args=(owner,)) for owner in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not set(got["a"]) & set(got["b"])
    assert set(got["a"]) | set(got["b"]) == expected
    assert len(got["a"]) + len(got["b"]) == len(expected)


def test_expired_lease_is_claimable_again_and_old_owner_goes_stale(
    conn: Store, subscription_id: int
) -> None:
    [delivery_id] = _queue(conn, subscription_id, 1)
    assert len(claim_due(conn, T0, 10, 30, "crashed")) == 1
    assert claim_due(conn, T0 + 29, 10, 30, "rescuer") == []
    [again] = claim_due(conn, T0 + 30, 10, 30, "rescuer")
    assert again.delivery_id == delivery_id
    assert again.attempts == 0
    late = DeliveryResult(
        delivery_id, "delivered", 1, at=T0 + 31, owner="crashed", attempt=_attempt(1)
    )
    outcome = record_results(conn, [late])
    assert outcome.stale == [delivery_id]
    assert _state(conn, delivery_id)["state"] == "in_flight"  # still the rescuer's
    done = DeliveryResult(
        delivery_id, "delivered", 1, at=T0 + 32, owner="rescuer", attempt=_attempt(1)
    )
    assert record_results(conn, [done]).applied == [delivery_id]
    assert _state(conn, delivery_id)["state"] == "delivered"
    # Both attempts are in the log: the crashed claimer's did happen.
    assert conn.execute("SELECT count(*) FROM delivery_attempts").fetchone()[0] == 2


def test_release_claims_returns_leases_unchanged(conn: Store, subscription_id: int) -> None:
    ids = _queue(conn, subscription_id, 3)
    claim_due(conn, T0, 10, 60, "stopping")
    assert release_claims(conn, "stopping") == 3
    assert [c.delivery_id for c in claim_due(conn, T0, 10, 60, "next")] == ids


# -- record -----------------------------------------------------------------------------------------
def test_record_results_applies_a_mixed_batch_in_one_transaction(
    conn: Store, subscription_id: int
) -> None:
    ids = _queue(conn, subscription_id, 4)
    claim_due(conn, T0, 10, 60, "e")
    results = [
        DeliveryResult(ids[0], "delivered", 1, at=T0 + 2, owner="e", attempt=_attempt(1)),
        DeliveryResult(
            ids[1],
            "queued",
            1,
            at=T0 + 2,
            owner="e",
            next_attempt_at=T0 + 12,
            attempt=Attempt(1, T0 + 1, T0 + 31, "timed_out", None, "no answer in 30 s", None),
        ),
        DeliveryResult(
            ids[2],
            "dead_lettered",
            1,
            at=T0 + 2,
            owner="e",
            attempt=_attempt(1, "failed", 413),
            dead_letter_reason="PayloadTooLarge",
        ),
        DeliveryResult(
            ids[3],
            "queued",
            0,
            at=T0 + 2,
            owner="e",
            next_attempt_at=T0 + 60,
            attempt=_attempt(1, "skipped", None),
        ),
    ]
    statements: list[str] = []
    if isinstance(conn, SqliteStore):  # PostgreSQL: one statement for the batch, in atomic()
        conn.set_trace_callback(statements.append)
    outcome = record_results(conn, results)
    if isinstance(conn, SqliteStore):
        conn.set_trace_callback(None)
        assert [s for s in statements if s.startswith(("BEGIN", "COMMIT"))] == [
            "BEGIN IMMEDIATE",
            "COMMIT",
        ]
    assert outcome.applied == ids

    delivered, retry, dead, skipped = (_state(conn, i) for i in ids)
    assert (delivered["state"], delivered["finished_at"], delivered["last_status"]) == (
        "delivered",
        T0 + 2,
        200,
    )
    assert delivered["lease_owner"] is None
    assert (retry["state"], retry["next_attempt_at"], retry["attempts"]) == ("queued", T0 + 12, 1)
    assert (retry["last_status"], retry["last_error"]) == (None, "no answer in 30 s")
    assert retry["first_attempt_at"] == retry["last_attempt_at"] == T0 + 1
    assert (dead["state"], dead["dead_letter_reason"], dead["last_status"]) == (
        "dead_lettered",
        "PayloadTooLarge",
        413,
    )
    # A skipped attempt is logged but spends nothing and leaves the last-attempt fields alone.
    assert (skipped["attempts"], skipped["first_attempt_at"], skipped["last_status"]) == (
        0,
        None,
        None,
    )
    outcomes = [r[0] for r in conn.execute("SELECT outcome FROM delivery_attempts ORDER BY id")]
    assert outcomes == ["delivered", "timed_out", "failed", "skipped"]


def test_record_results_rejects_a_retry_without_due_time_and_records_nothing(
    conn: Store, subscription_id: int
) -> None:
    ids = _queue(conn, subscription_id, 2)
    claim_due(conn, T0, 10, 60, "e")
    results = [
        DeliveryResult(ids[0], "delivered", 1, at=T0, owner="e", attempt=_attempt(1)),
        DeliveryResult(ids[1], "queued", 1, at=T0, owner="e"),
    ]
    with pytest.raises(ValueError, match="needs next_attempt_at"):
        record_results(conn, results)
    assert _state(conn, ids[0])["state"] == "in_flight"
    assert conn.execute("SELECT count(*) FROM delivery_attempts").fetchone()[0] == 0


def test_late_success_without_lease_ends_a_pending_retry_only(
    conn: Store, subscription_id: int
) -> None:
    retrying, finished = _queue(conn, subscription_id, 2)
    claim_due(conn, T0, 10, 60, "e")
    record_results(
        conn,
        [
            DeliveryResult(
                retrying,
                "queued",
                1,
                at=T0,
                owner="e",
                next_attempt_at=T0 + 10,
                attempt=_attempt(1, "timed_out", None),
            ),
            DeliveryResult(
                finished,
                "dead_lettered",
                1,
                at=T0,
                owner="e",
                attempt=_attempt(1, "failed", 400),
                dead_letter_reason="BadRequest",
            ),
        ],
    )
    late = [
        DeliveryResult(i, "delivered", 1, at=T0 + 40, attempt=_attempt(1, "late_delivered"))
        for i in (retrying, finished)
    ]
    outcome = record_results(conn, late)
    assert (outcome.applied, outcome.stale) == ([retrying], [finished])
    assert _state(conn, retrying)["state"] == "delivered"
    assert _state(conn, finished)["state"] == "dead_lettered"


def test_results_for_a_deleted_subscription_are_stale_not_errors(
    conn: Store, subscription_id: int
) -> None:
    [delivery_id] = _queue(conn, subscription_id, 1)
    claim_due(conn, T0, 10, 60, "e")
    with transaction(conn):
        subscriptions.delete_subscription(conn, ACCOUNT, subscription_id)
    result = DeliveryResult(delivery_id, "delivered", 1, at=T0, owner="e", attempt=_attempt(1))
    assert record_results(conn, [result]).stale == [delivery_id]
    assert conn.execute("SELECT count(*) FROM delivery_attempts").fetchone()[0] == 0


# -- pause, resume, redrive, replay -----------------------------------------------------------------
def test_hold_then_release_gives_a_new_event_time(conn: Store, subscription_id: int) -> None:
    ids = _queue(conn, subscription_id, 2)
    with transaction(conn):
        assert deliveries.hold_queued(conn, subscription_id) == 2
    assert claim_due(conn, T0 + 500, 10, 60, "e") == []
    with transaction(conn):
        assert deliveries.release_held(conn, subscription_id, now=T0 + 600) == 2
    claimed = claim_due(conn, T0 + 600, 10, 60, "e")
    assert [c.delivery_id for c in claimed] == ids
    assert {c.event_time for c in claimed} == {T0 + 600}


def test_pause_and_resume_touch_only_their_subscription(conn: Store, subscription_id: int) -> None:
    other = add_subscription(conn, subscription_body("https://hooks.example/other"))
    mine = _queue(conn, subscription_id, 3)
    theirs = _queue(conn, other, 2, start=10)
    claim_due(conn, T0, 1, 60, "e")  # one of mine in flight: neither held nor dropped
    with transaction(conn):
        assert deliveries.hold_queued(conn, subscription_id) == 2
        assert deliveries.hold_queued(conn, other) == 2
        assert deliveries.release_held(conn, other, now=T0 + 5) == 2
    more = _queue(conn, subscription_id, 1, start=20)  # queued while held ones wait
    with transaction(conn):
        assert deliveries.drop_pending(conn, subscription_id) == 3

    def states(ids: list[int]) -> list[str]:
        return [row["state"] if (row := _state(conn, d)) else "gone" for d in ids]

    assert states(mine) == ["in_flight", "gone", "gone"]
    assert states(more) == ["gone"]
    assert states(theirs) == ["queued", "queued"]


def test_deleting_a_subscription_takes_its_deliveries_only(
    conn: Store, subscription_id: int
) -> None:
    other = add_subscription(conn, subscription_body("https://hooks.example/other"))
    _queue(conn, subscription_id, 3)
    theirs = _queue(conn, other, 2, start=10)
    with transaction(conn):
        subscriptions.delete_subscription(conn, ACCOUNT, subscription_id)
    rows = conn.execute("SELECT id FROM deliveries ORDER BY id").fetchall()
    assert [row[0] for row in rows] == theirs


def test_requeue_starts_a_dead_letter_over_and_keeps_its_log(
    conn: Store, subscription_id: int
) -> None:
    [delivery_id] = _queue(conn, subscription_id, 1)
    claim_due(conn, T0, 10, 60, "e")
    record_results(
        conn,
        [
            DeliveryResult(
                delivery_id,
                "dead_lettered",
                1,
                at=T0,
                owner="e",
                attempt=_attempt(1, "failed", 400),
                dead_letter_reason="BadRequest",
            )
        ],
    )
    with transaction(conn):
        assert deliveries.requeue(conn, [delivery_id], now=T0 + 100) == 1
        assert deliveries.requeue(conn, [delivery_id], now=T0 + 100) == 0  # pending: untouched
    row = _state(conn, delivery_id)
    assert (row["state"], row["attempts"], row["event_time"]) == ("queued", 0, T0 + 100)
    assert row["dead_letter_reason"] is None
    assert conn.execute("SELECT count(*) FROM delivery_attempts").fetchone()[0] == 1


def test_enqueue_replays_an_event_once_while_pending(conn: Store, subscription_id: int) -> None:
    [delivery_id] = _queue(conn, subscription_id, 1)
    other = add_subscription(conn, subscription_body("https://replay.example"))
    (event_rowid,) = conn.execute("SELECT event_rowid FROM deliveries").fetchone()
    with transaction(conn):
        new_id = deliveries.enqueue(conn, event_rowid, other, now=T0 + 5)
        assert deliveries.enqueue(conn, event_rowid, other, now=T0 + 6) == new_id
        assert deliveries.enqueue(conn, event_rowid, subscription_id, now=T0 + 7) == delivery_id
    assert _state(conn, new_id)["event_time"] == T0 + 5
    assert _state(conn, delivery_id)["event_time"] == T0  # was still pending


def _numbered_event(n: int, at: float) -> NewEvent:
    return NewEvent(
        event_id=f"00000000-0000-4000-8000-{n:012d}",
        event_type="contacts.email.updated",
        entity="Contacts",
        profile_id=1001,
        original_event_time=at,
        data={"N": n},
    )


def test_add_deliveries_without_now_queues_each_at_its_event_time(
    conn: Store, subscription_id: int
) -> None:
    times = [T0 + 0.123456, T0 + 7.5, T0 + 3.000001]  # out of order, fractions kept exactly
    new = [_numbered_event(n, at) for n, at in enumerate(times)]
    with transaction(conn):
        rowids = events.insert_events(conn, ACCOUNT, new)
        added = deliveries.add_deliveries(
            conn, [NewDelivery(r, subscription_id) for r in rowids], now=None
        )
    assert added == 3
    rows = conn.execute(
        "SELECT e.data, d.event_time, d.next_attempt_at FROM deliveries d"
        " JOIN events e ON e.id = d.event_rowid ORDER BY d.id"
    ).fetchall()
    assert [orjson.loads(r[0])["N"] for r in rows] == [0, 1, 2]  # row ids in the given order
    assert [(r[1], r[2]) for r in rows] == [(at, at) for at in times]


def test_add_deliveries_of_many_rows_keeps_order_and_holds(
    conn: Store, subscription_id: int
) -> None:
    new = [_numbered_event(n, T0) for n in range(100)]  # INSERTs of 64, 32 and 4 rows
    with transaction(conn):
        rowids = events.insert_events(conn, ACCOUNT, new)
        added = deliveries.add_deliveries(
            conn,
            [NewDelivery(r, subscription_id, held=n % 3 == 0) for n, r in enumerate(rowids)],
            now=T0 + 1,
        )
    assert added == 100
    rows = conn.execute(
        "SELECT e.data, d.state, d.event_time, d.next_attempt_at FROM deliveries d"
        " JOIN events e ON e.id = d.event_rowid ORDER BY d.id"
    ).fetchall()
    assert [orjson.loads(r[0])["N"] for r in rows] == list(range(100))
    assert [tuple(r)[1:] for r in rows] == [
        ("held", None, None) if n % 3 == 0 else ("queued", T0 + 1, T0 + 1) for n in range(100)
    ]


def test_release_orphans_gives_back_an_engines_leases_but_those_it_keeps(
    conn: Store, subscription_id: int
) -> None:
    ids = _queue(conn, subscription_id, 4)
    claim_due(conn, T0, 2, 60, "host:1:abcd:0")
    claim_due(conn, T0, 1, 60, "host:1:abcd:1")
    claim_due(conn, T0, 1, 60, "other:2:ef01:0")
    assert release_orphans(conn, "host:1:abcd:", [ids[1]]) == 2
    assert [_state(conn, i)["state"] for i in ids] == ["queued", "in_flight", "queued", "in_flight"]
    assert _state(conn, ids[3])["lease_owner"] == "other:2:ef01:0"
