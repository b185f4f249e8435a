"""Subscription bodies built from the CLI's --event specs, and the record → PUT body."""

from __future__ import annotations

import pytest

from prefctl.api.subscriptions import input_body, provisioning_error, selection
from prefctl.errors import UsageError


def test_selection_of_a_filtered_entity_without_values_selects_all() -> None:
    assert selection("preference.added") == {
        "Entity": "Preferences",
        "EventType": "preference.added",
        "Filters": ["AllFilters"],
    }


def test_selection_values_fill_the_entity_filter_key() -> None:
    assert selection("contacts.email.added:Work, Home") == {
        "Entity": "Contacts",
        "EventType": "contacts.email.added",
        "ContactTypes": ["Work", "Home"],
    }
    assert selection("consent.added:Marketing")["ConsentTypes"] == ["Marketing"]


def test_selection_of_a_global_entity_has_no_filter_key() -> None:
    assert selection("tag.added") == {"Entity": "Tags", "EventType": "tag.added"}


def test_selection_of_a_global_entity_with_a_filter_is_usage_error() -> None:
    with pytest.raises(UsageError, match="takes no filter"):
        selection("standardfield.firstname.added:Work")


def test_selection_of_an_unknown_type_is_usage_error() -> None:
    with pytest.raises(UsageError, match=r"unknown event type 'contacts\.mail\.added'"):
        selection("contacts.mail.added")


def test_input_body_keeps_only_writable_fields() -> None:
    record = {
        "Id": 3,
        "Name": "crm",
        "Url": "https://x.example",
        "State": "Active",
        "ProvisioningState": "Succeeded",
        "ProvisioningError": "old",
        "Subscriptions": [{"Entity": "Tags", "EventType": "tag.added"}],
        "Edited": {},
    }
    assert input_body(record) == {
        "Name": "crm",
        "Url": "https://x.example",
        "State": "Active",
        "Subscriptions": [{"Entity": "Tags", "EventType": "tag.added"}],
    }


def test_provisioning_error_is_none_only_for_succeeded() -> None:
    assert provisioning_error({"Id": 1, "ProvisioningState": "Succeeded"}, 5) is None
    failed = provisioning_error(
        {"Id": 1, "ProvisioningState": "Failed", "ProvisioningError": "HTTP 500"}, 5
    )
    assert failed is not None
    assert str(failed) == "subscription 1 failed provisioning: HTTP 500"
    pending = provisioning_error({"Id": 1, "ProvisioningState": "AwaitingManualAction"}, 5)
    assert pending is not None
    assert str(pending) == "subscription 1 is still AwaitingManualAction after 5 s"
