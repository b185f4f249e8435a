"""Subscription records, create/replace bodies and event selections (docs/api.md)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from prefctl.models._base import dump_wire
from prefctl.models.subscription import (
    EventSelection,
    StrictSubscriptionInput,
    Subscription,
    SubscriptionInput,
)

BODY: dict[str, Any] = {
    "Name": "crm-sync",
    "Description": "Profile changes to the CRM",
    "Url": "https://hooks.example.com/prefs",
    "State": "Active",
    "CatchUpOnResume": True,
    "Subscriptions": [
        {"Entity": "Profile", "EventType": "profile.created"},
        {"Entity": "Preferences", "EventType": "preference.added", "Filters": ["Weekly"]},
        {"Entity": "Consents", "EventType": "consent.added", "ConsentTypes": ["AllConsents"]},
        {"Entity": "Contacts", "EventType": "contacts.email.added", "ContactTypes": ["Work"]},
        {"Entity": "Groups", "EventType": "group.added", "Groups": ["Beta"]},
        {"Entity": "CustomFields", "EventType": "customfield.added", "CustomFields": ["Vip"]},
        {"Entity": "Tags", "EventType": "tag.added"},
    ],
    "Alerts": {"Enabled": True, "Recipients": ["ops@example.com"]},
}


def _error_locations(model: type[SubscriptionInput], body: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    return {
        ".".join(str(part) for part in error["loc"]): error["msg"]
        for error in caught.value.errors()
    }


def test_subscription_input_round_trips_unchanged() -> None:
    assert dump_wire(SubscriptionInput.model_validate(BODY)) == BODY
    assert dump_wire(StrictSubscriptionInput.model_validate(BODY)) == BODY


def test_subscription_record_adds_id_state_and_edited() -> None:
    record = Subscription.model_validate(
        {**BODY, "Id": 12, "ProvisioningState": "Succeeded", "Edited": {"CreatedBy": "admin"}}
    )
    assert record.id == 12
    assert record.receives_events
    assert dump_wire(record)["Edited"] == {"CreatedBy": "admin"}


@pytest.mark.parametrize(
    ("state", "provisioning", "receives"),
    [
        ("Active", "Succeeded", True),
        ("Paused", "Succeeded", False),
        ("Active", "AwaitingManualAction", False),
        ("Active", "Failed", False),
    ],
)
def test_subscription_receives_events_only_when_active_and_succeeded(
    state: str, provisioning: str, receives: bool
) -> None:
    record = Subscription.model_validate(
        {**BODY, "Id": 1, "State": state, "ProvisioningState": provisioning}
    )
    assert record.receives_events is receives


def test_subscription_input_minimal_body_gets_defaults() -> None:
    body = {
        "Name": "n",
        "Url": "http://127.0.0.1:8751/webhooks",
        "Subscriptions": [BODY["Subscriptions"][0]],
    }
    parsed = SubscriptionInput.model_validate(body)
    assert (parsed.state, parsed.catch_up_on_resume, parsed.alerts.enabled) == (
        "Active",
        False,
        False,
    )


def test_subscription_input_strict_rejects_read_only_provisioning_state() -> None:
    errors = _error_locations(StrictSubscriptionInput, {**BODY, "ProvisioningState": "Succeeded"})
    assert set(errors) == {"ProvisioningState"}


@pytest.mark.parametrize(
    "url", ["ftp://example.com/x", "example.com/hook", "https://", "mailto:a@example.com", ""]
)
def test_subscription_input_non_http_url_rejected(url: str) -> None:
    assert set(_error_locations(SubscriptionInput, {**BODY, "Url": url})) == {"Url"}


@pytest.mark.parametrize("name", ["1", "0042", " 7 "])
def test_subscription_input_name_of_digits_only_rejected(name: str) -> None:
    errors = _error_locations(SubscriptionInput, {**BODY, "Name": name})
    assert set(errors) == {"Name"}
    assert "must not be made of digits only" in errors["Name"]


def test_subscription_input_name_with_digits_and_letters_accepted() -> None:
    assert SubscriptionInput.model_validate({**BODY, "Name": "crm 2"}).name == "crm 2"


def test_subscription_input_empty_selection_list_rejected() -> None:
    assert set(_error_locations(SubscriptionInput, {**BODY, "Subscriptions": []})) == {
        "Subscriptions"
    }


def test_subscription_input_same_event_type_twice_rejected() -> None:
    selections = [
        {"Entity": "Groups", "EventType": "group.added", "Groups": ["A"]},
        {"Entity": "Groups", "EventType": "group.added", "Groups": ["B"]},
    ]
    errors = _error_locations(SubscriptionInput, {**BODY, "Subscriptions": selections})
    assert "items 0 and 1" in errors["Subscriptions"]


def test_subscription_input_alerts_enabled_without_recipients_rejected() -> None:
    errors = _error_locations(SubscriptionInput, {**BODY, "Alerts": {"Enabled": True}})
    assert set(errors) == {"Alerts"}


def test_event_selection_filtered_entity_without_key_gets_wildcard() -> None:
    selection = EventSelection.model_validate({"Entity": "Consents", "EventType": "consent.added"})
    assert dump_wire(selection) == {
        "Entity": "Consents",
        "EventType": "consent.added",
        "ConsentTypes": ["AllConsents"],
    }
    assert selection.filter_values == ["AllConsents"]


def test_event_selection_global_entity_has_no_filter_values() -> None:
    selection = EventSelection.model_validate({"Entity": "Tags", "EventType": "tag.deleted"})
    assert selection.filter_values is None
    assert dump_wire(selection) == {"Entity": "Tags", "EventType": "tag.deleted"}


@pytest.mark.parametrize(
    ("selection", "fragment"),
    [
        ({"Entity": "Preferences", "EventType": "tag.added"}, "belongs to entity 'Tags'"),
        (
            {"Entity": "Tags", "EventType": "tag.added", "Filters": ["x"]},
            "Filters does not apply to Tags",
        ),
        (
            {"Entity": "Consents", "EventType": "consent.added", "Filters": ["x"]},
            "only ConsentTypes",
        ),
        ({"Entity": "Groups", "EventType": "group.added", "Groups": []}, "Groups is empty"),
        (
            {"Entity": "Groups", "EventType": "group.added", "Groups": ["AllGroups", "A"]},
            "AllGroups selects everything",
        ),
        ({"Entity": "Groups", "EventType": "group.added", "Groups": ["A", "A"]}, "twice"),
    ],
)
def test_event_selection_inconsistent_selection_rejected_at_its_index(
    selection: dict[str, Any], fragment: str
) -> None:
    errors = _error_locations(SubscriptionInput, {**BODY, "Subscriptions": [selection]})
    assert set(errors) == {"Subscriptions.0"}
    assert fragment in errors["Subscriptions.0"]


def test_event_selection_unknown_entity_and_type_rejected_on_their_fields() -> None:
    selection = {"Entity": "Preference", "EventType": "preference.removed"}
    errors = _error_locations(SubscriptionInput, {**BODY, "Subscriptions": [selection]})
    assert set(errors) == {"Subscriptions.0.Entity", "Subscriptions.0.EventType"}


def test_event_selection_strict_rejects_unknown_keys() -> None:
    selection = {"Entity": "Tags", "EventType": "tag.added", "Tag": "vip"}
    errors = _error_locations(StrictSubscriptionInput, {**BODY, "Subscriptions": [selection]})
    assert set(errors) == {"Subscriptions.0.Tag"}
