from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from prefctl.dispatcher.captures import parse_captured
from prefctl.dispatcher.deadletters import (
    DeadLetterFilter,
    export_dead_letters,
    find_dead_letters,
    list_dead_letters,
    purge_dead_letters,
    redrive_dead_letters,
    show_dead_letter,
)
from prefctl.errors import NotFoundError
from prefctl.store import Store
from prefctl.store.db import connect
from prefctl.store.delivery_history import get_delivery, list_attempts
from prefctl.store.events import get_event
from tests.dispatcher.ops_helpers import T0, event_id, finish, queue_event
from tests.store.service_helpers import (
    ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

DEAD_LETTER_KEYS = [
    "event_id",
    "event_type",
    "subscription_id",
    "reason",
    "attempts",
    "last_status",
    "last_error",
    "first_attempt_at",
    "last_attempt_at",
]


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


@pytest.fixture
def queue(conn: Store, subs: list[int]) -> dict[str, int]:
    """Event 1 → A dead (413, PayloadTooLarge), B delivered; event 2 → A dead (503 × 3, max
    attempts, later); event 3 → B dead (connection error, TTL); event 4 → A queued."""
    (a1, b1) = queue_event(conn, 1, subs)
    (a2,) = queue_event(conn, 2, subs[:1])
    (b3,) = queue_event(conn, 3, subs[1:])
    (a4,) = queue_event(conn, 4, subs[:1])
    finish(conn, a1.delivery_id, status=413, reason="PayloadTooLarge", at=T0 + 10)
    finish(conn, b1.delivery_id, state="delivered", status=200, reason=None, at=T0 + 10)
    finish(conn, a2.delivery_id, status=503, attempts=3, at=T0 + 100)
    finish(
        conn,
        b3.delivery_id,
        status=None,
        error="connection refused",
        reason="TimeToLiveExceeded",
        at=T0 + 200,
    )
    return {
        "a1": a1.delivery_id,
        "b1": b1.delivery_id,
        "a2": a2.delivery_id,
        "b3": b3.delivery_id,
        "a4": a4.delivery_id,
    }


def _events(records: list) -> list[str]:
    return [record.event_id[-1] for record in records]


def test_list_dead_letters_without_filter_returns_every_dead_letter_oldest_first(
    conn: Store, queue: dict[str, int]
) -> None:
    assert _events(list_dead_letters(conn, DeadLetterFilter())) == ["1", "2", "3"]


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (DeadLetterFilter(reason="PayloadTooLarge"), ["1"]),
        (DeadLetterFilter(reason="MaxDeliveryAttemptsExceeded"), ["2"]),
        (DeadLetterFilter(last_status=503), ["2"]),
        (DeadLetterFilter(since=T0 + 50), ["2", "3"]),
        (DeadLetterFilter(since=T0 + 50, until=T0 + 150), ["2"]),
        (DeadLetterFilter(event_ids=(event_id(3), event_id(4))), ["3"]),
    ],
)
def test_list_dead_letters_filter_selects_matching_ones(
    conn: Store,
    queue: dict[str, int],
    selection: DeadLetterFilter,
    expected: list[str],
) -> None:
    assert _events(list_dead_letters(conn, selection)) == expected


def test_list_dead_letters_subscription_filter(
    conn: Store, subs: list[int], queue: dict[str, int]
) -> None:
    assert _events(list_dead_letters(conn, DeadLetterFilter(subscription_id=subs[1]))) == ["3"]


def test_find_dead_letters_by_event_id_or_delivery_id(conn: Store, queue: dict[str, int]) -> None:
    assert [r.delivery_id for r in find_dead_letters(conn, event_id(1))] == [queue["a1"]]
    assert [r.delivery_id for r in find_dead_letters(conn, str(queue["a2"]))] == [queue["a2"]]
    with pytest.raises(NotFoundError):
        find_dead_letters(conn, str(queue["b1"]))  # delivered, not dead
    with pytest.raises(NotFoundError):
        find_dead_letters(conn, event_id(9))


def test_show_dead_letter_has_design_keys_timeline_and_sent_event(
    conn: Store, subs: list[int], queue: dict[str, int]
) -> None:
    (detail,) = show_dead_letter(conn, event_id(2))
    data = detail.to_dict()

    assert list(data)[: len(DEAD_LETTER_KEYS)] == DEAD_LETTER_KEYS
    assert data["reason"] == "MaxDeliveryAttemptsExceeded"
    assert (data["attempts"], data["last_status"]) == (3, 503)
    assert [a["attempt"] for a in data["timeline"]] == [1, 2, 3]
    assert data["event"]["EventId"] == event_id(2)
    assert data["event"]["SubscriptionId"] == subs[0]
    assert data["event"]["EventTime"] == "2026-01-01T00:00:00.000Z"
    assert data["event"]["PreviousData"] == {"Address": "old@example.com"}


def test_redrive_requeues_with_fresh_attempts_and_event_time(
    conn: Store, queue: dict[str, int]
) -> None:
    now = T0 + 1000
    redriven = redrive_dead_letters(conn, DeadLetterFilter(last_status=503), now=now).requeued

    assert [r.delivery_id for r in redriven] == [queue["a2"]]
    record = get_delivery(conn, queue["a2"])
    assert record is not None
    assert (record.state, record.attempts, record.event_time) == ("queued", 0, now)
    assert (record.next_attempt_at, record.dead_letter_reason) == (now, None)
    assert record.event_id == event_id(2)
    assert len(list_attempts(conn, queue["a2"])) == 3  # the log is kept
    assert _events(list_dead_letters(conn, DeadLetterFilter())) == ["1", "3"]


@pytest.mark.parametrize("fmt", ["ndjson", "json"])
def test_export_dead_letters_writes_records_that_replay_reads_back(
    conn: Store, queue: dict[str, int], fmt: str
) -> None:
    sink = io.BytesIO()
    count = export_dead_letters(conn, DeadLetterFilter(), sink.write, fmt=fmt)  # type: ignore[arg-type]

    assert count == 3
    raw = sink.getvalue()
    records = orjson.loads(raw) if fmt == "json" else [orjson.loads(x) for x in raw.splitlines()]
    assert [list(r)[:-1] for r in records] == [DEAD_LETTER_KEYS] * 3
    assert records[0]["event"]["EventId"] == event_id(1)
    assert [e.event_id for e in parse_captured(raw).events] == [event_id(n) for n in (1, 2, 3)]


def test_export_dead_letters_is_one_snapshot_while_another_command_purges(
    conn: Store, subs: list[int], tmp_path: Path
) -> None:
    # 'deadletters export' while 'deadletters purge' runs in another shell: the export holds
    # every dead letter that existed when it began, none lost between its pages.
    for n in range(1, 1201):  # over two of the export's pages
        (queued,) = queue_event(conn, n, [subs[0]])
        finish(conn, queued.delivery_id)
    other = connect(tmp_path / "store.db")
    lines: list[bytes] = []

    def write(line: bytes) -> None:
        if not lines:  # after the first record, the other command purges them all
            assert purge_dead_letters(other, DeadLetterFilter()) == 1200
        lines.append(line)

    assert export_dead_letters(conn, DeadLetterFilter(), write) == 1200
    other.close()
    exported = [orjson.loads(line)["event_id"] for line in lines]
    assert exported == [event_id(n) for n in range(1, 1201)]
    assert list_dead_letters(conn, DeadLetterFilter()) == []  # the purge did happen


def test_export_dead_letters_json_with_none_is_an_empty_array(conn: Store, subs: list[int]) -> None:
    sink = io.BytesIO()
    assert export_dead_letters(conn, DeadLetterFilter(), sink.write, fmt="json") == 0
    assert orjson.loads(sink.getvalue()) == []


def test_purge_dead_letters_deletes_selected_and_keeps_events(
    conn: Store, queue: dict[str, int]
) -> None:
    assert purge_dead_letters(conn, DeadLetterFilter(reason="PayloadTooLarge")) == 1

    assert get_delivery(conn, queue["a1"]) is None
    assert list_attempts(conn, queue["a1"]) == []
    assert get_event(conn, ACCOUNT, event_id(1)) is not None
    assert get_delivery(conn, queue["b1"]) is not None  # the same event's other delivery
    assert _events(list_dead_letters(conn, DeadLetterFilter())) == ["2", "3"]
