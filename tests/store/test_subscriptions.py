from __future__ import annotations

from collections.abc import Iterator

import pytest

from prefctl.errors import NotFoundError
from prefctl.store import Store, subscriptions
from prefctl.store.db import transaction
from prefctl.store.subscriptions import DuplicateSubscriptionError
from tests.store.service_helpers import (
    ACCOUNT,
    OTHER_ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

URL = "https://hooks.example/events"
T0 = 1_767_225_600.0
EMAIL_ADDED = {"Entity": "Contacts", "EventType": "contacts.email.added", "ContactTypes": ["Work"]}
CREATED = {"Entity": "Profile", "EventType": "profile.created"}


@pytest.fixture
def conn(store_location: str) -> Iterator[Store]:
    conn = open_service_store(store_location)
    yield conn
    conn.close()


def _get(conn: Store, subscription_id: int) -> subscriptions.SubscriptionRecord:
    record = subscriptions.get_subscription(conn, ACCOUNT, subscription_id)
    assert record is not None
    return record


def test_create_subscription_starts_creating_and_reads_back_as_wire(
    conn: Store,
) -> None:
    body = subscription_body(URL, EMAIL_ADDED, name="CRM")
    body["Description"] = "to the CRM"
    subscription_id = add_subscription(conn, body, provisioned=False, now=T0)
    wire = _get(conn, subscription_id).to_wire()
    assert wire == {
        "Id": subscription_id,
        "Name": "CRM",
        "Description": "to the CRM",
        "Url": URL,
        "State": "Active",
        "CatchUpOnResume": False,
        "ProvisioningState": "Creating",
        "Subscriptions": [EMAIL_ADDED],
        "Alerts": {"Enabled": False, "Recipients": []},
        "Edited": {
            "CreateDate": "2026-01-01T00:00:00.000Z",
            "CreatedBy": "admin",
            "ModifiedDate": "2026-01-01T00:00:00.000Z",
            "ModifiedBy": "admin",
        },
    }
    assert subscriptions.get_subscription(conn, OTHER_ACCOUNT, subscription_id) is None


def test_list_subscriptions_is_per_account_in_id_order(conn: Store) -> None:
    first = add_subscription(conn, subscription_body("https://a.example/1"))
    second = add_subscription(conn, subscription_body("https://a.example/2"))
    add_subscription(conn, subscription_body("https://a.example/3"), account=OTHER_ACCOUNT)
    assert [s.id for s in subscriptions.list_subscriptions(conn, ACCOUNT)] == [first, second]


def test_same_url_and_event_type_conflicts_naming_both(conn: Store) -> None:
    existing = add_subscription(conn, subscription_body(URL, CREATED, EMAIL_ADDED, name="CRM"))
    conflict = subscriptions.find_conflict(
        conn, ACCOUNT, URL, ["tag.added", "contacts.email.added"]
    )
    assert conflict == subscriptions.Conflict(existing, "CRM", URL, "contacts.email.added")
    with pytest.raises(
        DuplicateSubscriptionError, match=r"already sends contacts.email.added"
    ) as info:
        add_subscription(conn, subscription_body(URL, EMAIL_ADDED, name="Again"))
    assert info.value.conflict.subscription_id == existing
    assert len(subscriptions.list_subscriptions(conn, ACCOUNT)) == 1


def test_no_conflict_for_other_url_type_or_account(conn: Store) -> None:
    add_subscription(conn, subscription_body(URL, EMAIL_ADDED))
    assert subscriptions.find_conflict(conn, ACCOUNT, URL, ["tag.added"]) is None
    assert subscriptions.find_conflict(conn, ACCOUNT, URL + "/2", ["contacts.email.added"]) is None
    assert subscriptions.find_conflict(conn, OTHER_ACCOUNT, URL, ["contacts.email.added"]) is None
    add_subscription(conn, subscription_body(URL, EMAIL_ADDED), account=OTHER_ACCOUNT)


def test_find_by_name_is_exact_per_account_and_tolerates_duplicates(
    conn: Store,
) -> None:
    # Names are not a unique index: a store may hold duplicates from before the API refused them.
    first = add_subscription(conn, subscription_body("https://a.example/1", name="crm"))
    add_subscription(conn, subscription_body("https://a.example/2", name="crm"))
    found = subscriptions.find_by_name(conn, ACCOUNT, "crm")
    assert found is not None
    assert found.id == first
    assert subscriptions.find_by_name(conn, ACCOUNT, "CRM") is None
    assert subscriptions.find_by_name(conn, OTHER_ACCOUNT, "crm") is None


def test_replace_keeping_url_keeps_provisioning(conn: Store) -> None:
    subscription_id = add_subscription(conn, subscription_body(URL, EMAIL_ADDED))
    with transaction(conn):
        result = subscriptions.replace_subscription(
            conn,
            ACCOUNT,
            subscription_id,
            subscription_body(URL, EMAIL_ADDED, CREATED, name="New"),
            actor="bob",
            now=T0 + 60,
        )
    assert result is not None
    record, url_changed = result
    assert url_changed is False
    assert record.provisioning_state == "Succeeded"
    assert record.name == "New"
    assert record.event_types == ["contacts.email.added", "profile.created"]
    assert record.modified_by == "bob"
    assert subscriptions.find_conflict(conn, ACCOUNT, URL, ["profile.created"]) is not None


def test_replace_with_new_url_restarts_handshake(conn: Store) -> None:
    subscription_id = add_subscription(conn, subscription_body(URL, EMAIL_ADDED))
    with transaction(conn):
        result = subscriptions.replace_subscription(
            conn,
            ACCOUNT,
            subscription_id,
            subscription_body(URL + "/v2", EMAIL_ADDED),
            actor="bob",
            now=T0,
        )
    assert result is not None
    record, url_changed = result
    assert url_changed is True
    assert record.provisioning_state == "Updating"
    assert record.receives_events is False
    assert subscriptions.find_conflict(conn, ACCOUNT, URL, ["contacts.email.added"]) is None


def test_replace_onto_another_subscriptions_url_and_type_conflicts(
    conn: Store,
) -> None:
    add_subscription(conn, subscription_body(URL, EMAIL_ADDED))
    other = add_subscription(conn, subscription_body(URL + "/2", EMAIL_ADDED))
    with pytest.raises(DuplicateSubscriptionError), transaction(conn):
        subscriptions.replace_subscription(
            conn, ACCOUNT, other, subscription_body(URL, EMAIL_ADDED), actor="bob", now=T0
        )
    assert _get(conn, other).url == URL + "/2"


def test_replace_unknown_subscription_returns_none(conn: Store) -> None:
    with transaction(conn):
        assert (
            subscriptions.replace_subscription(
                conn, ACCOUNT, 999, subscription_body(), actor="bob", now=T0
            )
            is None
        )


def test_handshake_bookkeeping_through_to_success(conn: Store) -> None:
    subscription_id = add_subscription(conn, subscription_body(), provisioned=False)
    with transaction(conn):
        subscriptions.start_validation(
            conn,
            subscription_id,
            validation_code="code-1",
            validation_token="tok-1",
            expires_at=T0 + 300,
        )
        assert subscriptions.record_handshake_attempt(conn, subscription_id, error="timeout") == 1
        assert subscriptions.record_handshake_attempt(conn, subscription_id, error=None) == 2
        subscriptions.set_provisioning_state(conn, subscription_id, "AwaitingManualAction", now=T0)
    found = subscriptions.find_by_validation_token(conn, "tok-1")
    assert found is not None
    assert found.id == subscription_id
    assert found.handshake == subscriptions.Handshake("code-1", "tok-1", T0 + 300, 2, None)
    with transaction(conn):
        subscriptions.set_provisioning_state(conn, subscription_id, "Succeeded", now=T0 + 10)
    record = _get(conn, subscription_id)
    assert record.provisioning_state == "Succeeded"
    assert record.provisioned_at == T0 + 10
    assert record.receives_events is True
    assert subscriptions.find_by_validation_token(conn, "tok-1") is None  # used up


def test_failed_provisioning_keeps_the_reason(conn: Store) -> None:
    subscription_id = add_subscription(conn, subscription_body(), provisioned=False)
    with transaction(conn):
        subscriptions.set_provisioning_state(
            conn, subscription_id, "Failed", now=T0, error="3 attempts failed: HTTP 202"
        )
    record = _get(conn, subscription_id)
    assert record.provisioning_state == "Failed"
    assert record.handshake.last_error == "3 attempts failed: HTTP 202"


def test_set_alerts_enables_recipients(conn: Store) -> None:
    subscription_id = add_subscription(conn, subscription_body())
    with transaction(conn):
        record = subscriptions.set_alerts(
            conn,
            ACCOUNT,
            subscription_id,
            enabled=True,
            recipients=["ops@example.com"],
            actor="support",
            now=T0,
        )
    assert record.to_wire()["Alerts"] == {"Enabled": True, "Recipients": ["ops@example.com"]}


def test_set_state_of_unknown_subscription_is_not_found(conn: Store) -> None:
    with pytest.raises(NotFoundError, match="subscription 42 not found"), transaction(conn):
        subscriptions.set_state(conn, ACCOUNT, 42, "Paused", actor="bob", now=T0)


def test_fanout_targets_are_succeeded_active_or_catching_up(conn: Store) -> None:
    active = add_subscription(conn, subscription_body("https://a.example/1"))
    held = add_subscription(
        conn, subscription_body("https://a.example/2", state="Paused", catch_up=True)
    )
    add_subscription(conn, subscription_body("https://a.example/3", state="Paused"))
    add_subscription(conn, subscription_body("https://a.example/4"), provisioned=False)
    add_subscription(conn, subscription_body("https://a.example/5"), account=OTHER_ACCOUNT)
    targets = subscriptions.fanout_targets(conn, ACCOUNT)
    assert [(t.subscription_id, t.held) for t in targets] == [(active, False), (held, True)]
    assert targets[0].selections == [CREATED]


def test_delete_subscription_frees_its_url_and_types(conn: Store) -> None:
    subscription_id = add_subscription(conn, subscription_body(URL, EMAIL_ADDED))
    with transaction(conn):
        assert subscriptions.delete_subscription(conn, OTHER_ACCOUNT, subscription_id) is False
        assert subscriptions.delete_subscription(conn, ACCOUNT, subscription_id) is True
    assert subscriptions.get_subscription(conn, ACCOUNT, subscription_id) is None
    assert subscriptions.find_conflict(conn, ACCOUNT, URL, ["contacts.email.added"]) is None
    assert add_subscription(conn, subscription_body(URL, EMAIL_ADDED)) > subscription_id


def test_subscriptions_version_moves_with_every_subscription_change(
    conn: Store,
) -> None:
    seen = [subscriptions.subscriptions_version(conn)]
    subscription_id = add_subscription(conn, subscription_body(URL))  # insert + provisioned
    seen.append(subscriptions.subscriptions_version(conn))
    with transaction(conn):
        subscriptions.set_state(conn, ACCOUNT, subscription_id, "Paused", actor="a", now=1.0)
    seen.append(subscriptions.subscriptions_version(conn))
    with transaction(conn):
        subscriptions.delete_subscription(conn, ACCOUNT, subscription_id)
    seen.append(subscriptions.subscriptions_version(conn))
    assert seen == sorted(set(seen))  # strictly increasing: each change moved it
