from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from prefctl.clock import FakeClock
from prefctl.emulator.fanout import Fanout
from prefctl.emulator.writes import ProfileWriter
from prefctl.errors import NotFoundError
from prefctl.store import Store, events, profiles, subscriptions
from prefctl.store.db import connect, transaction
from prefctl.store.delivery_claims import claim_due
from prefctl.store.errors import StoreError
from prefctl.store.timestamps import epoch
from prefctl.webhooks.envelope import new_event_id
from tests.store.service_helpers import ACCOUNT, add_subscription, open_service_store
from tests.store.service_helpers import subscription_body as body_of

PROFILE: dict[str, Any] = {
    "CustomerType": "Individual",
    "CustomerName": {"FirstName": "Ann", "LastName": "Lee"},
    "Emails": [{"Address": "ann@example.com", "Type": "Personal", "IsDefault": True}],
    "ProfilePreferences": [
        {"Program": "Newsletter", "Filter": "Weekly Digest", "Channel": "Email", "Status": "OptIn"}
    ],
    "Consents": [
        {
            "ConsentType": "Marketing",
            "ConsentStatus": "Granted",
            "ConsentVersion": "v1",
            "Filters": ["Weekly Digest"],
        }
    ],
}


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Store]:
    conn = open_service_store(tmp_path / "store.db")
    yield conn
    conn.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def writer(conn: Store, clock: FakeClock) -> ProfileWriter:
    return ProfileWriter(conn, ACCOUNT, actor="admin", clock=clock, rng=random.Random(7))


def _sub(conn: Store, n: int, *selections: dict[str, Any], **kw: Any) -> int:
    provisioned = kw.pop("provisioned", True)
    return add_subscription(
        conn, body_of(f"https://hooks.example/{n}", *selections, **kw), provisioned=provisioned
    )


def _deliveries(conn: Store) -> list[tuple[int, str, str]]:
    """(subscription id, event type, delivery state) of every delivery."""
    rows = conn.execute(
        "SELECT d.subscription_id, e.event_type, d.state FROM deliveries d"
        " JOIN events e ON e.id = d.event_rowid ORDER BY d.id"
    )
    return [tuple(row) for row in rows]


def _count(conn: Store, table: str) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _spec_example(profile: dict[str, Any]) -> dict[str, Any]:
    """Add an email, opt in to a new preference, grant the consent for another filter."""
    profile["Emails"].append({"Address": "ann@work.example", "Type": "Work"})
    profile["ProfilePreferences"].append(
        {"Program": "Offers", "Filter": "Seasonal Sales", "Channel": "SMS", "Status": "OptIn"}
    )
    profile["Consents"][0]["Filters"].append("Seasonal Sales")
    return profile


def test_create_stores_profile_event_and_delivery_together(
    conn: Store, writer: ProfileWriter, clock: FakeClock
) -> None:
    created = _sub(conn, 1)  # selects profile.created
    _sub(conn, 2, {"Entity": "Tags", "EventType": "tag.added"})
    result = writer.create(PROFILE)
    assert result.profile is not None
    assert result.profile["ProfileId"] == 1001
    assert result.profile["Edited"]["CreatedBy"] == "admin"
    assert [e.event_type for e in result.events] == ["profile.created"]
    assert result.deliveries == 1
    assert profiles.get_profile(conn, ACCOUNT, 1001) == result.profile
    stored = events.get_event(conn, ACCOUNT, result.events[0].event_id)
    assert stored is not None
    assert stored.data == result.profile
    assert stored.original_event_time == epoch(clock.now())
    assert _deliveries(conn) == [(created, "profile.created", "queued")]


def test_event_ids_come_from_the_injected_rng(conn: Store, clock: FakeClock) -> None:
    writer = ProfileWriter(conn, ACCOUNT, actor="a", clock=clock, rng=random.Random(1))
    assert writer.create({}).events[0].event_id == new_event_id(random.Random(1))


def test_spec_example_fans_out_only_to_matching_receiving_subscriptions(
    conn: Store, writer: ProfileWriter
) -> None:
    profile_id = writer.create(PROFILE).profile["ProfileId"]  # type: ignore[index]
    work_email = _sub(
        conn,
        1,
        {"Entity": "Contacts", "EventType": "contacts.email.added", "ContactTypes": ["Work"]},
    )
    _sub(
        conn,
        2,
        {"Entity": "Contacts", "EventType": "contacts.email.added", "ContactTypes": ["Personal"]},
    )
    sales = _sub(
        conn,
        3,
        {"Entity": "Preferences", "EventType": "preference.added", "Filters": ["Seasonal Sales"]},
        catch_up=True,
    )
    _sub(
        conn,
        4,
        {"Entity": "Consents", "EventType": "consent.filterassociation.created"},
        provisioned=False,
    )
    _sub(conn, 5, {"Entity": "Profile", "EventType": "profile.updated"}, state="Paused")
    catching_up = _sub(
        conn,
        6,
        {"Entity": "Profile", "EventType": "profile.updatedfull"},
        state="Paused",
        catch_up=True,
    )
    everything = _sub(
        conn,
        7,
        {"Entity": "Profile", "EventType": "profile.updated"},
        {
            "Entity": "Consents",
            "EventType": "consent.filterassociation.created",
            "ConsentTypes": ["AllConsents"],
        },
    )
    result = writer.update(profile_id, _spec_example)
    assert [e.event_type for e in result.events] == [
        "profile.updated",
        "profile.updatedfull",
        "contacts.email.added",
        "preference.added",
        "consent.filterassociation.created",
    ]
    assert sorted(_deliveries(conn)) == sorted(
        [
            (everything, "profile.updated", "queued"),
            (catching_up, "profile.updatedfull", "held"),
            (work_email, "contacts.email.added", "queued"),
            (sales, "preference.added", "queued"),
            (everything, "consent.filterassociation.created", "queued"),
        ]
    )
    assert result.deliveries == 5


def test_failure_mid_write_leaves_nothing(conn: Store, writer: ProfileWriter) -> None:
    _sub(conn, 1)
    conn.execute(
        "CREATE TEMP TRIGGER broken_queue BEFORE INSERT ON deliveries"
        " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
    )
    with pytest.raises(StoreError, match="disk full"):
        writer.create(PROFILE)
    assert [_count(conn, t) for t in ("profiles", "events", "deliveries")] == [0, 0, 0]
    conn.execute("DROP TRIGGER broken_queue")
    assert writer.create(PROFILE).profile["ProfileId"] == 1001  # type: ignore[index]


def test_update_whose_change_raises_writes_nothing(conn: Store, writer: ProfileWriter) -> None:
    writer.create(PROFILE)

    def invalid(profile: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("Emails[0].Address: not an email")

    with pytest.raises(ValueError, match="not an email"):
        writer.update(1001, invalid)
    assert _count(conn, "events") == 1


def test_update_that_changes_nothing_stores_and_emits_nothing(
    conn: Store, writer: ProfileWriter, clock: FakeClock
) -> None:
    before = writer.create(PROFILE).profile
    clock.advance(60)
    result = writer.update(1001, lambda profile: profile)
    assert (result.events, result.deliveries) == ((), 0)
    assert profiles.get_profile(conn, ACCOUNT, 1001) == before
    assert _count(conn, "events") == 1


def test_replace_keeps_identity_lifecycle_and_creation(
    writer: ProfileWriter, clock: FakeClock
) -> None:
    writer.create(PROFILE)
    writer.deactivate(1001, "Fraud")
    clock.advance(60)
    result = writer.replace(1001, {"ProfileId": 9, "IsActive": True, "Tags": ["new"]})
    assert [e.event_type for e in result.events] == ["profile.replaced"]
    profile = result.profile
    assert profile is not None
    assert (profile["ProfileId"], profile["IsActive"], profile["ReasonCode"]) == (
        1001,
        False,
        "Fraud",
    )
    assert profile["Tags"] == ["new"]
    assert "Emails" not in profile
    assert profile["Edited"]["CreateDate"] == "2026-01-01T00:00:00.000Z"
    assert profile["Edited"]["ModifiedDate"] == "2026-01-01T00:01:00.000Z"


def test_lifecycle_operations_emit_their_event(conn: Store, writer: ProfileWriter) -> None:
    writer.create(PROFILE)
    off = writer.deactivate(1001, "CustomerRequest")
    assert off.profile is not None
    assert (off.profile["IsActive"], off.profile["ReasonCode"]) == (False, "CustomerRequest")
    on = writer.reactivate(1001)
    assert on.profile is not None
    assert on.profile["IsActive"] is True
    assert "ReasonCode" not in on.profile
    gone = writer.delete(1001, reason_code="GDPR")
    assert gone.profile is None
    assert profiles.get_profile(conn, ACCOUNT, 1001) is None
    types = [off.events[0].event_type, on.events[0].event_type, gone.events[0].event_type]
    assert types == ["profile.deactivated", "profile.reactivated", "profile.deleted"]
    deleted = events.get_event(conn, ACCOUNT, gone.events[0].event_id)
    assert deleted is not None
    assert deleted.data == {"ProfileId": 1001, "ReasonCode": "GDPR"}
    with pytest.raises(NotFoundError, match="profile 1001 not found"):
        writer.update(1001, lambda profile: profile)


def _pause(conn: Store, subscription_id: int, state: str, now: float) -> None:
    with transaction(conn):
        subscriptions.set_state(conn, ACCOUNT, subscription_id, state, actor="a", now=now)  # type: ignore[arg-type]


def test_pause_with_catch_up_holds_events_and_resume_queues_them_with_new_event_time(
    conn: Store, writer: ProfileWriter, clock: FakeClock
) -> None:
    subscription_id = _sub(conn, 1, {"Entity": "Tags", "EventType": "tag.added"}, catch_up=True)
    writer.create({})
    writer.update(1001, lambda p: {**p, "Tags": ["queued-before-pause"]})
    _pause(conn, subscription_id, "Paused", epoch(clock.now()))
    clock.advance(60)
    writer.update(1001, lambda p: {**p, "Tags": [*p["Tags"], "while-paused"]})
    assert [s for _, _, s in _deliveries(conn)] == ["held", "held"]
    assert claim_due(conn, epoch(clock.now()), 10, 60, "e") == []
    clock.advance(60)
    resumed_at = epoch(clock.now())
    _pause(conn, subscription_id, "Active", resumed_at)
    claimed = claim_due(conn, resumed_at, 10, 60, "e")
    assert len(claimed) == 2
    assert {c.event_time for c in claimed} == {resumed_at}
    assert claimed[1].original_event_time == resumed_at - 60  # when the change happened


def test_pause_without_catch_up_drops_events(
    conn: Store, writer: ProfileWriter, clock: FakeClock
) -> None:
    subscription_id = _sub(conn, 1, {"Entity": "Tags", "EventType": "tag.added"})
    writer.create({})
    writer.update(1001, lambda p: {**p, "Tags": ["queued-before-pause"]})
    _pause(conn, subscription_id, "Paused", epoch(clock.now()))
    writer.update(1001, lambda p: {**p, "Tags": [*p["Tags"], "while-paused"]})
    assert _deliveries(conn) == []
    _pause(conn, subscription_id, "Active", epoch(clock.now()))
    assert claim_due(conn, epoch(clock.now()), 10, 60, "e") == []
    writer.update(1001, lambda p: {**p, "Tags": [*p["Tags"], "after-resume"]})
    assert [s for _, _, s in _deliveries(conn)] == ["queued"]


def test_shared_fanout_follows_subscription_changes_made_by_another_connection(
    conn: Store, clock: FakeClock, tmp_path: Path
) -> None:
    fanout = Fanout()  # one per emulator, shared by every write as the REST API does
    other = connect(tmp_path / "store.db")  # the CLI, or the API's own connection

    def deliveries_of_a_write() -> int:
        writer = ProfileWriter(
            conn, ACCOUNT, actor="a", clock=clock, rng=random.Random(), fanout=fanout
        )
        return writer.create({}).deliveries

    counts = [deliveries_of_a_write()]
    first = _sub(other, 1)  # both select profile.created
    counts.append(deliveries_of_a_write())
    second = _sub(other, 2)
    counts.append(deliveries_of_a_write())
    with transaction(other):
        subscriptions.set_state(other, ACCOUNT, first, "Paused", actor="a", now=1.0)
    counts.append(deliveries_of_a_write())
    with transaction(other):
        subscriptions.delete_subscription(other, ACCOUNT, second)
    counts.append(deliveries_of_a_write())
    with transaction(other):
        subscriptions.set_state(other, ACCOUNT, first, "Active", actor="a", now=2.0)
    counts.append(deliveries_of_a_write())
    other.close()
    assert counts == [0, 1, 2, 1, 0, 1]
