from __future__ import annotations

from collections.abc import Iterator

import pytest

from prefctl.errors import UsageError
from prefctl.models.program import ProgramList
from prefctl.models.settings import SETTING_RANGES, WebhookSettings
from prefctl.store import Store, programs, settings
from prefctl.store.db import transaction
from tests.store.service_helpers import ACCOUNT, OTHER_ACCOUNT, open_service_store


@pytest.fixture
def conn(store_location: str) -> Iterator[Store]:
    conn = open_service_store(store_location)
    yield conn
    conn.close()


def test_settings_start_at_the_model_defaults(conn: Store) -> None:
    stored = settings.get_settings(conn, ACCOUNT)
    assert list(stored) == list(SETTING_RANGES)
    assert stored == {name: limits.default for name, limits in SETTING_RANGES.items()}
    assert WebhookSettings.model_validate(stored) == WebhookSettings()


def test_update_settings_changes_some_and_keeps_others(conn: Store) -> None:
    with transaction(conn):
        settings.update_settings(conn, ACCOUNT, {"MaxConcurrentRequests": 5000})
        settings.update_settings(conn, ACCOUNT, {"Duration": 5})
    stored = settings.get_settings(conn, ACCOUNT)
    assert (stored["MaxConcurrentRequests"], stored["Duration"]) == (5000, 5)
    assert settings.get_settings(conn, OTHER_ACCOUNT)["Duration"] == 1


def test_put_settings_resets_what_it_leaves_out(conn: Store) -> None:
    with transaction(conn):
        settings.update_settings(conn, ACCOUNT, {"MaxConcurrentRequests": 5000})
        settings.put_settings(conn, ACCOUNT, {"Duration": 5})
    stored = settings.get_settings(conn, ACCOUNT)
    assert stored["MaxConcurrentRequests"] == SETTING_RANGES["MaxConcurrentRequests"].default
    assert stored["Duration"] == 5


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"MaxConcurrentRequests": 49}, "MaxConcurrentRequests must be at least 50"),
        ({"Duration": 301}, "Duration must be at most 300"),
        ({"AlertThresholdMin": 20, "AlertThresholdMax": 10}, "AlertThresholdMax must be at least"),
        ({"Retries": 3}, "unknown setting 'Retries'"),
        ({"Duration": "5"}, "Duration must be an integer"),
    ],
)
def test_settings_out_of_range_are_refused_and_nothing_changes(
    conn: Store, changes: dict[str, int], message: str
) -> None:
    with pytest.raises(UsageError, match=message), transaction(conn):
        settings.update_settings(conn, ACCOUNT, changes)
    assert settings.get_settings(conn, ACCOUNT) == settings.default_settings()


def test_seeded_programs_are_valid_wire_programs_once(conn: Store) -> None:
    with transaction(conn):
        assert programs.seed_programs(conn, ACCOUNT) == len(programs.SEED_PROGRAMS)
        assert programs.seed_programs(conn, ACCOUNT) == 0
    listed = programs.list_programs(conn, ACCOUNT)
    parsed = ProgramList.model_validate({"Programs": listed})
    assert [p.name for p in parsed.programs] == [
        "Newsletter",
        "Offers",
        "Product Updates",
        "Account Notices",
    ]
    assert {"Email", "SMS", "Post"} <= {c for p in parsed.programs for c in p.channels}
    filter_names = [f.name for p in parsed.programs for f in p.filters]
    assert len(filter_names) == len(set(filter_names))  # subscriptions match filters by Name
    assert programs.list_programs(conn, OTHER_ACCOUNT) == []


def test_list_programs_by_type(conn: Store) -> None:
    with transaction(conn):
        programs.seed_programs(conn, ACCOUNT)
    informational = programs.list_programs(conn, ACCOUNT, program_type="Informational")
    assert [p["Name"] for p in informational] == ["Newsletter", "Product Updates"]
