from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from prefctl.errors import UsageError
from prefctl.store import Store, events, profiles
from prefctl.store._paging import PAGE_BYTES
from prefctl.store.db import transaction
from prefctl.store.profiles import ProfileQuery, search_profiles
from tests.store.service_helpers import ACCOUNT, OTHER_ACCOUNT, open_service_store, sqlite_only

NOW = datetime(2026, 11, 21, 19, 20, 30, 123000, tzinfo=UTC)


@pytest.fixture
def conn(store_location: str) -> Iterator[Store]:
    conn = open_service_store(store_location)
    yield conn
    conn.close()


def _add(conn: Store, body: dict[str, Any], account: str = ACCOUNT) -> int:
    with transaction(conn):
        profile_id = profiles.next_profile_id(conn, account)
        profile = profiles.prepare_profile(
            body, profile_id=profile_id, previous=None, actor="admin", now=NOW
        )
        profiles.save_profile(conn, account, profile, now=NOW.timestamp())
    return profile_id


def _ids(page: profiles.ProfilePage) -> list[int]:
    return [p["ProfileId"] for p in page.profiles]


def test_next_profile_id_starts_at_1001_per_account(conn: Store) -> None:
    with transaction(conn):
        ids = [profiles.next_profile_id(conn, ACCOUNT) for _ in range(3)]
        other = profiles.next_profile_id(conn, OTHER_ACCOUNT)
    assert ids == [1001, 1002, 1003]
    assert other == 1001


def test_next_profile_id_rolled_back_is_given_again(conn: Store) -> None:
    with pytest.raises(RuntimeError), transaction(conn):
        profiles.next_profile_id(conn, ACCOUNT)
        raise RuntimeError("the write failed")
    with transaction(conn):
        assert profiles.next_profile_id(conn, ACCOUNT) == 1001


def test_prepare_profile_sets_maintained_fields_and_ignores_body_values() -> None:
    body = {"ProfileId": 5, "IsActive": False, "Edited": {"CreatedBy": "mallory"}, "Tags": ["a"]}
    profile = profiles.prepare_profile(body, profile_id=1001, previous=None, actor="ann", now=NOW)
    assert profile == {
        "ProfileId": 1001,
        "IsActive": True,
        "Tags": ["a"],
        "Edited": {
            "CreateDate": "2026-11-21T19:20:30.123Z",
            "CreatedBy": "ann",
            "ModifiedDate": "2026-11-21T19:20:30.123Z",
            "ModifiedBy": "ann",
        },
    }


def test_prepare_profile_keeps_creation_and_lifecycle_of_previous() -> None:
    previous = profiles.prepare_profile({}, profile_id=1001, previous=None, actor="ann", now=NOW)
    previous["IsActive"], previous["ReasonCode"] = False, "Fraud"
    later = datetime(2026, 11, 22, tzinfo=UTC)
    profile = profiles.prepare_profile(
        {"IsActive": True}, profile_id=1001, previous=previous, actor="bob", now=later
    )
    assert profile["IsActive"] is False
    assert profile["ReasonCode"] == "Fraud"
    assert profile["Edited"] == {
        "CreateDate": "2026-11-21T19:20:30.123Z",
        "CreatedBy": "ann",
        "ModifiedDate": "2026-11-22T00:00:00.000Z",
        "ModifiedBy": "bob",
    }


def test_get_profile_returns_stored_wire_json_per_account(conn: Store) -> None:
    profile_id = _add(conn, {"CustomerName": {"FirstName": "Ann"}, "Tags": ["vip"]})
    stored = profiles.get_profile(conn, ACCOUNT, profile_id)
    assert stored is not None
    assert stored["CustomerName"] == {"FirstName": "Ann"}
    assert stored["ProfileId"] == profile_id
    assert profiles.get_profile(conn, OTHER_ACCOUNT, profile_id) is None


def test_search_by_email_ignores_case(conn: Store) -> None:
    ann = _add(conn, {"Emails": [{"Address": "Ann@Example.com"}]})
    _add(conn, {"Emails": [{"Address": "bob@example.com"}]})
    page = search_profiles(conn, ACCOUNT, ProfileQuery(email="ann@EXAMPLE.com"))
    assert _ids(page) == [ann]
    assert page.next_cursor is None


def test_search_by_phone_compares_digits_only(conn: Store) -> None:
    ann = _add(conn, {"PhoneNumbers": [{"Number": "+1 (555) 010-0100"}]})
    assert _ids(search_profiles(conn, ACCOUNT, ProfileQuery(phone="+15550100100"))) == [ann]


def test_search_by_alternate_id_with_and_without_type(conn: Store) -> None:
    loyalty = _add(conn, {"AlternateIds": [{"Type": "Loyalty", "Value": "X-1"}]})
    crm = _add(conn, {"AlternateIds": [{"Type": "CRM", "Value": "X-1"}]})
    by_value = search_profiles(conn, ACCOUNT, ProfileQuery(alternate_id="X-1"))
    by_both = search_profiles(
        conn, ACCOUNT, ProfileQuery(alternate_id_type="CRM", alternate_id="X-1")
    )
    assert _ids(by_value) == [loyalty, crm]
    assert _ids(by_both) == [crm]


def test_search_with_several_criteria_needs_all(conn: Store) -> None:
    both = _add(
        conn, {"Emails": [{"Address": "a@x.io"}], "PhoneNumbers": [{"Number": "+15550001"}]}
    )
    _add(conn, {"Emails": [{"Address": "a@x.io"}], "PhoneNumbers": [{"Number": "+15550002"}]})
    page = search_profiles(conn, ACCOUNT, ProfileQuery(email="a@x.io", phone="15550001"))
    assert _ids(page) == [both]


def test_search_pages_with_opaque_cursor_until_the_end(conn: Store) -> None:
    expected = [_add(conn, {"Emails": [{"Address": "same@x.io"}]}) for _ in range(7)]
    _add(conn, {"Emails": [{"Address": "other@x.io"}]})
    seen, cursor, pages = [], None, 0
    while True:
        page = search_profiles(
            conn, ACCOUNT, ProfileQuery(email="same@x.io"), limit=3, cursor=cursor
        )
        seen += _ids(page)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
        assert str(expected[len(seen) - 1]) not in cursor  # opaque, not the bare id
    assert seen == expected
    assert pages == 3


def test_search_without_criteria_lists_every_profile_in_id_order(conn: Store) -> None:
    expected = [_add(conn, {}) for _ in range(4)]
    _add(conn, {}, account=OTHER_ACCOUNT)
    first = search_profiles(conn, ACCOUNT, ProfileQuery(), limit=2)
    second = search_profiles(conn, ACCOUNT, ProfileQuery(), limit=2, cursor=first.next_cursor)
    assert _ids(first) + _ids(second) == expected
    assert second.next_cursor is None


def test_search_reads_through_indexes_not_table_scans(conn: Store) -> None:
    sqlite = sqlite_only(conn, "its query plan")
    traced: list[str] = []
    sqlite.set_trace_callback(traced.append)
    search_profiles(conn, ACCOUNT, ProfileQuery(email="a@x.io", phone="1555", alternate_id="X"))
    sqlite.set_trace_callback(None)
    plan = " | ".join(str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {traced[-1]}"))
    assert "SCAN" not in plan
    assert "SEARCH k USING PRIMARY KEY" in plan


@pytest.mark.parametrize(
    ("query", "kwargs", "message"),
    [
        (ProfileQuery(), {"cursor": "not-a-cursor"}, "invalid cursor"),
        (ProfileQuery(), {"limit": 0}, "limit must be between 1 and 500"),
        (ProfileQuery(phone="call me"), {}, "phone must contain digits"),
        (ProfileQuery(alternate_id_type="CRM"), {}, "alternateIdType needs alternateId"),
    ],
)
def test_search_bad_input_raises_usage_error(
    conn: Store, query: ProfileQuery, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        search_profiles(conn, ACCOUNT, query, **kwargs)


def test_search_refuses_a_cursor_of_another_listing(conn: Store) -> None:
    for _ in range(3):
        _add(conn, {})
    cursor = search_profiles(conn, ACCOUNT, ProfileQuery(), limit=1).next_cursor
    assert cursor is not None
    with pytest.raises(UsageError, match="invalid cursor"):
        events.list_events(conn, ACCOUNT, events.EventQuery(), cursor=cursor)


def test_save_profile_replaces_search_keys(conn: Store) -> None:
    profile_id = _add(conn, {"Emails": [{"Address": "old@x.io"}]})
    profile = profiles.get_profile(conn, ACCOUNT, profile_id)
    assert profile is not None
    profile["Emails"] = [{"Address": "new@x.io"}]
    with transaction(conn):
        profiles.save_profile(conn, ACCOUNT, profile, now=NOW.timestamp())
    assert _ids(search_profiles(conn, ACCOUNT, ProfileQuery(email="old@x.io"))) == []
    assert _ids(search_profiles(conn, ACCOUNT, ProfileQuery(email="new@x.io"))) == [profile_id]


def test_delete_profile_is_hard_and_removes_search_keys(conn: Store) -> None:
    profile_id = _add(conn, {"Emails": [{"Address": "gone@x.io"}]})
    with transaction(conn):
        assert profiles.delete_profile(conn, ACCOUNT, profile_id) is True
        assert profiles.delete_profile(conn, ACCOUNT, profile_id) is False
    assert profiles.get_profile(conn, ACCOUNT, profile_id) is None
    assert _ids(search_profiles(conn, ACCOUNT, ProfileQuery(email="gone@x.io"))) == []
    assert conn.execute("SELECT count(*) FROM profile_emails").fetchone()[0] == 0
    with transaction(conn):
        assert profiles.next_profile_id(conn, ACCOUNT) == profile_id + 1  # ids are not reused


def test_save_profile_with_previous_refreshes_changed_search_keys_only(
    conn: Store,
) -> None:
    profile_id = _add(conn, {"Emails": [{"Address": "ann@example.com"}]})
    old = profiles.get_profile(conn, ACCOUNT, profile_id)
    assert old is not None
    renamed = {**old, "CustomerName": {"FirstName": "Bo"}}
    moved = {**old, "Emails": [{"Address": "bo@example.com"}]}
    with transaction(conn):
        profiles.save_profile(conn, ACCOUNT, renamed, now=NOW.timestamp(), previous=old)
    assert _found(conn, "ann@example.com") == [profile_id]
    with transaction(conn):
        profiles.save_profile(conn, ACCOUNT, moved, now=NOW.timestamp(), previous=renamed)
    assert _found(conn, "ann@example.com") == []
    assert _found(conn, "bo@example.com") == [profile_id]


def _found(conn: Store, email: str) -> list[int]:
    page = search_profiles(conn, ACCOUNT, ProfileQuery(email=email))
    return [p["ProfileId"] for p in page.profiles]


def test_search_page_of_big_profiles_stops_at_the_page_byte_budget(
    conn: Store,
) -> None:
    # ~1 MiB profiles: 500 to a page would be a 500 MB response; the page stops near PAGE_BYTES
    # and its cursor leads to the rest, none lost.
    big = {"Tags": [f"{n:04d}" + "x" * 1020 for n in range(1000)]}
    expected = [_add(conn, big) for _ in range(10)]
    first = search_profiles(conn, ACCOUNT, ProfileQuery(), limit=500)
    assert 1 <= len(first.profiles) < 10
    assert sum(len(orjson.dumps(p)) for p in first.profiles) < PAGE_BYTES + 1_100_000
    assert first.next_cursor is not None
    rest = search_profiles(conn, ACCOUNT, ProfileQuery(), limit=500, cursor=first.next_cursor)
    assert _ids(first) + _ids(rest) == expected
    assert rest.next_cursor is None
