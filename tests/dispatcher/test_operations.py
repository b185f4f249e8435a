from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl.dispatcher.operations import (
    list_deliveries,
    open_existing_store,
    resolve_store,
    show_delivery,
)
from prefctl.errors import ConfigError, NotFoundError, UsageError
from prefctl.store import Store
from tests.dispatcher.ops_helpers import T0, event_id, finish, queue_event
from tests.store.service_helpers import add_subscription, open_service_store, subscription_body


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


def test_resolve_store_defaults_to_the_emulator_store_in_the_data_dir(
    isolated_env: Path,
) -> None:
    assert resolve_store(None) == isolated_env / "data" / "emulator.db"
    assert resolve_store("x/my.db") == Path("x/my.db").absolute()


def test_open_existing_store_missing_file_is_a_config_error_not_a_new_store(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="no store at"), open_existing_store(tmp_path / "no.db"):
        pass
    assert not (tmp_path / "no.db").exists()


def test_list_deliveries_filters_by_subscription_state_and_event(
    conn: Store, subs: list[int]
) -> None:
    (a1, b1) = queue_event(conn, 1, subs)
    (a2,) = queue_event(conn, 2, subs[:1])
    finish(conn, a1.delivery_id, state="delivered", status=200, reason=None)

    assert [r.delivery_id for r in list_deliveries(conn)] == [
        a1.delivery_id,
        b1.delivery_id,
        a2.delivery_id,
    ]
    assert [r.delivery_id for r in list_deliveries(conn, subscription_id=subs[1])] == [
        b1.delivery_id
    ]
    assert [r.delivery_id for r in list_deliveries(conn, states=["queued"])] == [
        b1.delivery_id,
        a2.delivery_id,
    ]
    assert [r.delivery_id for r in list_deliveries(conn, event_ids=[event_id(2)])] == [
        a2.delivery_id
    ]
    assert [r.delivery_id for r in list_deliveries(conn, limit=1, after_id=a1.delivery_id)] == [
        b1.delivery_id
    ]


def test_list_deliveries_unknown_state_is_a_usage_error(conn: Store) -> None:
    with pytest.raises(UsageError, match="unknown delivery state"):
        list_deliveries(conn, states=["lost"])  # type: ignore[list-item]


def test_show_delivery_timeline_lists_attempts_and_next_due(conn: Store, subs: list[int]) -> None:
    (a1,) = queue_event(conn, 1, subs[:1])
    finish(conn, a1.delivery_id, status=503, attempts=3)

    timeline = show_delivery(conn, a1.delivery_id)

    data = timeline.to_dict()
    assert data["state"] == "dead_lettered"
    assert [(a["attempt"], a["outcome"], a["status"]) for a in data["timeline"]] == [
        (1, "failed", 503),
        (2, "failed", 503),
        (3, "failed", 503),
    ]
    assert data["timeline"][0]["started_at"] == "2026-01-01T00:00:08.000Z"
    assert timeline.next_due is None


def test_show_delivery_queued_has_next_due(conn: Store, subs: list[int]) -> None:
    (a1,) = queue_event(conn, 1, subs[:1], at=T0)
    assert show_delivery(conn, a1.delivery_id).next_due == "2026-01-01T00:00:00.000Z"


def test_show_delivery_unknown_id_is_not_found(conn: Store) -> None:
    with pytest.raises(NotFoundError, match="delivery 99 not found"):
        show_delivery(conn, 99)
