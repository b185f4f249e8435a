"""Profile writes → events: every rule of spec "Events → Rules", docs/webhooks.md and docs/emulator.md, as documented
in emulator/changes.py, then properties of the diff over generated profiles."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from prefctl.emulator import _diff
from prefctl.emulator.changes import ChangeEvent, changed_fields, events_for_change
from prefctl.models._base import dump_wire
from prefctl.models.profile import Profile, contact_ref
from prefctl.webhooks import catalog

BASE: dict[str, Any] = {
    "ProfileId": 1001,
    "IsActive": True,
    "CustomerType": "Individual",
    "DefaultLocale": "en-US",
    "CustomerName": {"FirstName": "Ann", "LastName": "Lee"},
    "Emails": [{"Address": "ann@example.com", "Type": "Personal", "IsDefault": True}],
    "PhoneNumbers": [{"Number": "+15550100", "Type": "Mobile", "IsMobile": True}],
    "Addresses": [{"Type": "Home", "Line1": "1 Main St", "CountryCode": "US"}],
    "AlternateIds": [{"Type": "Loyalty", "Value": "L-1"}],
    "ProfilePreferences": [
        {"Program": "News", "Filter": "Weekly", "Channel": "Email", "Status": "OptIn"}
    ],
    "Consents": [
        {
            "ConsentType": "Marketing",
            "ConsentStatus": "Granted",
            "ConsentVersion": "v1",
            "Elements": ["Email:ann@example.com"],
            "Filters": ["Weekly"],
        }
    ],
    "CustomFields": [{"Name": "ShoeSize", "Value": 42}],
    "Groups": [{"Name": "Beta", "IsActive": True}],
    "Tags": ["vip"],
    "Edited": {"ModifiedDate": "2026-11-21T19:20:30.123Z", "ModifiedBy": "admin"},
}


def _base() -> dict[str, Any]:
    return copy.deepcopy(BASE)


def _update(new: dict[str, Any], old: dict[str, Any] | None = None) -> list[ChangeEvent]:
    return events_for_change("update", old if old is not None else _base(), new)


def _types(events: list[ChangeEvent]) -> list[str]:
    return [event.event_type for event in events]


def _fine(events: list[ChangeEvent]) -> list[ChangeEvent]:
    """The events after profile.updated and profile.updatedfull."""
    assert _types(events[:2]) == ["profile.updated", "profile.updatedfull"]
    return events[2:]


def _only(events: list[ChangeEvent]) -> ChangeEvent:
    [event] = _fine(events)
    return event


# --- the spec's example (Events → Rules, rule 4) -------------------------------------------------
def _spec_example() -> dict[str, Any]:
    """The base profile after adding an email, updating a preference and granting a consent."""
    new = _base()
    new["Emails"].append({"Address": "ann@work.example", "Type": "Work"})
    # The customer opts in to SMS offers: a preference for a Program/Filter/Channel not set before.
    new["ProfilePreferences"].append(
        {"Program": "News", "Filter": "Offers", "Channel": "SMS", "Status": "OptIn"}
    )
    # ... and grants the Marketing consent for the Offers filter too.
    new["Consents"][0]["Filters"].append("Offers")
    return new


def test_events_for_change_spec_example_email_preference_consent_yields_spec_list() -> None:
    """Adding an email, updating a preference and granting a consent yields profile.updated,
    contacts.email.added, preference.added and consent.filterassociation.created (spec), plus
    profile.updatedfull (docs/emulator.md)."""
    new = _spec_example()
    events = _update(new)
    assert _types(events) == [
        "profile.updated",
        "profile.updatedfull",
        "contacts.email.added",
        "preference.added",
        "consent.filterassociation.created",
    ]
    assert events[0].data == {
        "ProfileId": 1001,
        "ChangedFields": ["Consents", "Emails", "ProfilePreferences"],
    }
    assert events[1].data == new
    assert events[2].data == {"Address": "ann@work.example", "Type": "Work", "IsDefault": False}
    assert events[3].data["Contact"] is None
    assert events[4].data == {
        "ConsentType": "Marketing",
        "ConsentStatus": "Granted",
        "ConsentVersion": "v1",
        "Filter": "Offers",
    }


def test_events_for_change_without_updated_full_is_the_spec_example_list_exactly() -> None:
    """EmitUpdatedFull=false (docs/decisions.md): the spec's list, and nothing else."""
    events = events_for_change("update", _base(), _spec_example(), updated_full=False)

    assert _types(events) == [
        "profile.updated",
        "contacts.email.added",
        "preference.added",
        "consent.filterassociation.created",
    ]


# --- operations ----------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["create", "replace"])
def test_events_for_change_create_or_replace_yields_only_whole_profile_event(
    operation: str,
) -> None:
    old = None if operation == "create" else _base()
    new = _base()
    new["Tags"] = ["other"]
    [event] = events_for_change(operation, old, new)  # type: ignore[arg-type]
    assert event.event_type == f"profile.{operation}d"
    assert (event.entity, event.data, event.previous_data) == ("Profile", new, None)
    assert event.filter_values == ()


def test_events_for_change_event_data_is_a_copy_of_the_input() -> None:
    new = _base()
    [event] = events_for_change("create", None, new)
    new["Emails"][0]["Address"] = "changed@example.com"
    assert event.data["Emails"][0]["Address"] == "ann@example.com"


def test_events_for_change_import_yields_nothing() -> None:
    new = _base()
    new["Tags"] = []
    assert events_for_change("import", _base(), new) == []
    assert events_for_change("import", None, new) == []


def test_events_for_change_deactivate_yields_one_event_with_reason() -> None:
    new = {**_base(), "IsActive": False, "ReasonCode": "CustomerRequest"}
    [event] = events_for_change("deactivate", _base(), new)
    assert event.event_type == "profile.deactivated"
    assert event.data == {"ProfileId": 1001, "IsActive": False, "ReasonCode": "CustomerRequest"}


def test_events_for_change_reactivate_yields_one_event() -> None:
    old = {**_base(), "IsActive": False, "ReasonCode": "CustomerRequest"}
    [event] = events_for_change("reactivate", old, _base())
    assert (event.event_type, event.data) == (
        "profile.reactivated",
        {"ProfileId": 1001, "IsActive": True},
    )


def test_events_for_change_delete_without_new_uses_old_profile() -> None:
    [event] = events_for_change("delete", {**_base(), "ReasonCode": "Gdpr"}, None)
    assert (event.event_type, event.data) == (
        "profile.deleted",
        {"ProfileId": 1001, "ReasonCode": "Gdpr"},
    )


def test_events_for_change_unknown_operation_raises() -> None:
    with pytest.raises(ValueError, match="unknown operation 'upsert'"):
        events_for_change("upsert", None, {})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("operation", "old", "new"),
    [("create", {}, None), ("update", None, {}), ("update", {}, None), ("delete", None, None)],
)
def test_events_for_change_missing_profile_raises(
    operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None
) -> None:
    with pytest.raises(ValueError, match="needs"):
        events_for_change(operation, old, new)  # type: ignore[arg-type]


# --- what counts as a change ---------------------------------------------------------------------


def test_update_nothing_changed_yields_no_events() -> None:
    assert _update(_base()) == []


def test_update_only_edited_and_profile_id_changed_yields_no_events() -> None:
    new = _base()
    new["Edited"] = {"ModifiedDate": "2026-11-22T00:00:00.000Z", "ModifiedBy": "bot"}
    new["ProfileId"] = 1001
    assert _update(new) == []


def test_update_sparse_input_equals_its_full_dump_yields_no_events() -> None:
    full = dump_wire(Profile.model_validate(BASE))
    assert full != BASE  # defaults (IsArchived, empty lists…) were filled in
    assert events_for_change("update", BASE, full) == []
    assert events_for_change("update", full, BASE) == []


def test_update_list_reordered_yields_only_profile_events() -> None:
    old = _base()
    old["Tags"] = ["a", "b"]
    new = {**copy.deepcopy(old), "Tags": ["b", "a"]}
    assert _types(_update(new, old)) == ["profile.updated", "profile.updatedfull"]


def test_update_is_active_via_patch_yields_only_profile_events() -> None:
    events = _update({**_base(), "IsActive": False})
    assert _fine(events) == []
    assert events[0].data["ChangedFields"] == ["IsActive"]


def test_changed_fields_treats_missing_null_and_empty_alike() -> None:
    assert changed_fields({"Tags": []}, {"Tags": None, "Groups": []}) == []
    assert changed_fields({"IsActive": True}, {}) == []
    assert changed_fields({"Tags": ["a"]}, {"Edited": {}, "ProfileId": 3}) == ["Tags"]


# --- standard fields -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "segment"),
    [("DefaultLocale", "defaultlocale"), ("RegistrationStatus", "registrationstatus")],
)
def test_update_standard_field_changed_yields_updated_with_previous(key: str, segment: str) -> None:
    old = {**_base(), key: "fr-FR"}
    event = _only(_update({**_base(), key: "de-DE"}, old))
    assert event.event_type == f"standardfield.{segment}.updated"
    assert (event.data, event.previous_data) == ({key: "de-DE"}, {key: "fr-FR"})
    assert event.filter_values == ()


def test_update_name_parts_added_updated_deleted() -> None:
    new = _base()
    new["CustomerName"] = {"Prefix": "Dr", "FirstName": "Anne"}
    events = _fine(_update(new))
    assert [(e.event_type, e.data, e.previous_data) for e in events] == [
        ("standardfield.prefix.added", {"Prefix": "Dr"}, {}),
        ("standardfield.firstname.updated", {"FirstName": "Anne"}, {"FirstName": "Ann"}),
        ("standardfield.lastname.deleted", {"LastName": None}, {"LastName": "Lee"}),
    ]


def test_update_customer_name_removed_deletes_every_part() -> None:
    new = {**_base(), "CustomerName": None}
    assert _types(_fine(_update(new))) == [
        "standardfield.firstname.deleted",
        "standardfield.lastname.deleted",
    ]


# --- contacts ------------------------------------------------------------------------------------


def test_update_email_field_changed_yields_updated_with_identity_and_prior_values() -> None:
    new = _base()
    new["Emails"][0]["Type"] = "Work"
    event = _only(_update(new))
    assert event.event_type == "contacts.email.updated"
    assert event.data == {"Address": "ann@example.com", "Type": "Work", "IsDefault": True}
    assert event.previous_data == {"Address": "ann@example.com", "Type": "Personal"}
    assert event.filter_values == ("Personal", "Work")


def test_update_email_address_changed_is_delete_then_add() -> None:
    new = _base()
    new["Emails"][0]["Address"] = "ann@new.example"
    new["Consents"][0]["Elements"] = []
    events = [e for e in _fine(_update(new)) if e.entity == "Contacts"]
    assert _types(events) == ["contacts.email.added", "contacts.email.deleted"]
    deleted = events[1]
    assert deleted.data == {"Address": "ann@example.com"}
    assert deleted.previous_data == BASE["Emails"][0]


@pytest.mark.parametrize(
    ("list_key", "segment", "identity", "element"),
    [
        ("PhoneNumbers", "phone", "Number", {"Number": "+15550199", "Type": "Work"}),
        ("Addresses", "address", "Type", {"Type": "Work", "Line1": "2 Side St"}),
        ("AlternateIds", "alternateid", "Type", {"Type": "Crm", "Value": "C-9"}),
    ],
)
def test_update_contact_added_and_deleted_per_list(
    list_key: str, segment: str, identity: str, element: dict[str, Any]
) -> None:
    new = _base()
    new[list_key] = [element]
    events = _fine(_update(new))
    assert _types(events) == [f"contacts.{segment}.added", f"contacts.{segment}.deleted"]
    assert events[0].previous_data == {}  # spec: present on Contact events
    assert events[1].data == {identity: BASE[list_key][0][identity]}
    assert events[1].previous_data is not None


def test_update_address_line_changed_is_address_updated_by_type() -> None:
    new = _base()
    new["Addresses"][0]["Line1"] = "9 Elm St"
    event = _only(_update(new))
    assert event.event_type == "contacts.address.updated"
    assert event.previous_data == {"Type": "Home", "Line1": "1 Main St"}


def test_update_alternate_id_value_changed_yields_updated_with_prior_value() -> None:
    new = _base()
    new["AlternateIds"][0]["Value"] = "L-2"
    event = _only(_update(new))
    assert (event.event_type, event.data, event.previous_data, event.filter_values) == (
        "contacts.alternateid.updated",
        {"Type": "Loyalty", "Value": "L-2"},
        {"Type": "Loyalty", "Value": "L-1"},
        ("Loyalty",),
    )


@pytest.mark.parametrize(
    ("before", "after"), [("Individual", "Business"), (None, "Business"), ("Individual", None)]
)
def test_update_customer_type_any_change_yields_customertype_updated(
    before: str | None, after: str | None
) -> None:
    event = _only(_update({**_base(), "CustomerType": after}, {**_base(), "CustomerType": before}))
    assert event.event_type == "contacts.customertype.updated"
    assert (event.data, event.previous_data) == ({"CustomerType": after}, {"CustomerType": before})
    assert event.filter_values == tuple(v for v in (before, after) if v)


def test_update_only_contact_preferences_changed_yields_no_contact_event() -> None:
    new = _base()
    new["Emails"][0]["Preferences"] = [{"Program": "News", "Channel": "Email", "Status": "OptIn"}]
    event = _only(_update(new))
    assert event.event_type == "preference.added"
    assert event.data["Contact"] == "Email:ann@example.com"


# --- preferences ---------------------------------------------------------------------------------


def _pref(**changes: Any) -> dict[str, Any]:
    return {**BASE["ProfilePreferences"][0], **changes}


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (_pref(), _pref(Status="OptOut"), "preference.updated"),
        (_pref(), _pref(Attributes=[{"Key": "Source", "Value": "app"}]), "preference.updated"),
        (_pref(), _pref(IsArchived=True), "preference.archived"),
        (_pref(IsArchived=True), _pref(), "preference.updated"),
        (_pref(), None, "preference.archived"),
        (_pref(IsArchived=True), None, None),
        (None, _pref(Channel="SMS"), "preference.added"),
    ],
)
def test_update_profile_preference_rules(
    before: dict[str, Any] | None, after: dict[str, Any] | None, expected: str | None
) -> None:
    old = {**_base(), "ProfilePreferences": [before] if before else []}
    new = {**_base(), "ProfilePreferences": [after] if after else []}
    events = _fine(_update(new, old))
    assert _types(events) == ([expected] if expected else [])
    for event in events:
        assert event.data["IsArchived"] is (expected == "preference.archived")
        assert event.filter_values == ("Weekly",)


def test_update_preference_identity_is_program_filter_channel_and_location() -> None:
    new = _base()
    new["ProfilePreferences"] = [_pref(Filter="Offers")]
    assert _types(_fine(_update(new))) == ["preference.added", "preference.archived"]


def test_update_new_contact_with_preferences_adds_them_with_contact_ref() -> None:
    new = _base()
    pref = {"Program": "News", "Channel": "SMS", "Status": "OptIn"}
    new["PhoneNumbers"].append({"Number": "+15550199", "Preferences": [pref]})
    events = _fine(_update(new))
    assert _types(events) == ["contacts.phone.added", "preference.added"]
    assert events[1].data["Contact"] == contact_ref("Phone", "+15550199")
    assert events[1].filter_values == ()


def test_update_removed_contact_archives_its_live_preferences() -> None:
    old = _base()
    old["Addresses"][0]["Preferences"] = [
        {"Program": "Mail", "Channel": "Post", "Status": "OptIn"},
        {
            "Program": "Mail",
            "Channel": "Post",
            "Filter": "Old",
            "Status": "OptIn",
            "IsArchived": True,
        },
    ]
    new = {**_base(), "Addresses": []}
    events = _fine(_update(new, old))
    assert _types(events) == ["contacts.address.deleted", "preference.archived"]
    assert events[1].data["Contact"] == "Address:Home"


# --- consents ------------------------------------------------------------------------------------


def test_update_consent_added_yields_added_and_its_associations() -> None:
    new = _base()
    new["Consents"].append(
        {"ConsentType": "Profiling", "Elements": ["Phone:+15550100"], "Filters": ["Weekly"]}
    )
    events = _fine(_update(new))
    assert _types(events) == [
        "consent.added",
        "consent.elementassociation.created",
        "consent.filterassociation.created",
    ]
    assert events[0].data["ConsentStatus"] == "NotSet"
    assert events[1].data == {
        "ConsentType": "Profiling",
        "ConsentStatus": "NotSet",
        "Element": "Phone:+15550100",
    }
    assert all(event.filter_values == ("Profiling",) for event in events)


def test_update_consent_removed_yields_deactivated_and_association_deactivations() -> None:
    new = {**_base(), "Consents": []}
    events = _fine(_update(new))
    assert _types(events) == [
        "consent.deactivated",
        "consent.elementassociation.deactivated",
        "consent.filterassociation.deactivated",
    ]
    assert events[0].data == BASE["Consents"][0]


def test_update_consent_status_changed_updates_consent_and_every_association() -> None:
    new = _base()
    new["Consents"][0]["ConsentStatus"] = "Revoked"
    events = _fine(_update(new))
    assert _types(events) == [
        "consent.updated",
        "consent.elementassociation.updated",
        "consent.filterassociation.updated",
    ]
    assert events[2].data["ConsentStatus"] == "Revoked"


def test_update_consent_date_changed_updates_consent_only() -> None:
    new = _base()
    new["Consents"][0]["ConsentDate"] = "2026-11-21T19:20:30.123Z"
    assert _types(_fine(_update(new))) == ["consent.updated"]


def test_update_consent_element_moved_creates_and_deactivates_associations() -> None:
    new = _base()
    new["Consents"][0]["Elements"] = ["Phone:+15550100"]
    events = _fine(_update(new))
    assert _types(events) == [
        "consent.elementassociation.created",
        "consent.elementassociation.deactivated",
    ]
    assert events[1].data["Element"] == "Email:ann@example.com"


# --- custom fields, groups, tags -----------------------------------------------------------------


def test_update_custom_fields_added_updated_deleted_with_previous_values() -> None:
    old = {**_base(), "CustomFields": [{"Name": "A", "Value": 1}, {"Name": "B", "Value": "x"}]}
    new = {**_base(), "CustomFields": [{"Name": "A", "Value": 2}, {"Name": "C", "Value": True}]}
    events = _fine(_update(new, old))
    assert [(e.event_type, e.data, e.previous_data, e.filter_values) for e in events] == [
        ("customfield.updated", {"Name": "A", "Value": 2}, {"Name": "A", "Value": 1}, ("A",)),
        ("customfield.added", {"Name": "C", "Value": True}, {}, ("C",)),
        ("customfield.deleted", {"Name": "B"}, {"Name": "B", "Value": "x"}, ("B",)),
    ]


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (None, {"Name": "G"}, "group.added"),
        (None, {"Name": "G", "IsActive": False}, "group.added"),
        ({"Name": "G"}, {"Name": "G", "IsActive": False}, "group.deactivated"),
        ({"Name": "G", "IsActive": True}, None, "group.deactivated"),
        ({"Name": "G", "IsActive": False}, None, None),
        ({"Name": "G", "IsActive": False}, {"Name": "G", "IsActive": True}, "group.updated"),
        ({"Name": "G", "IsActive": True}, {"Name": "G"}, None),
    ],
)
def test_update_group_rules(
    before: dict[str, Any] | None, after: dict[str, Any] | None, expected: str | None
) -> None:
    old = {**_base(), "Groups": [before] if before else []}
    new = {**_base(), "Groups": [after] if after else []}
    events = _update(new, old)
    fine = _fine(events) if events else []
    assert _types(fine) == ([expected] if expected else [])
    if expected:
        assert fine[0].filter_values == ("G",)
        expected_active = False if expected == "group.deactivated" else _is_active(after)
        assert fine[0].data["IsActive"] is expected_active


def _is_active(group: dict[str, Any] | None) -> bool:
    return group is None or group.get("IsActive", True)


def test_update_tags_added_and_deleted_by_value() -> None:
    new = {**_base(), "Tags": ["new", "gold"]}
    events = _fine(_update(new))
    assert [(e.event_type, e.data) for e in events] == [
        ("tag.added", {"Tag": "new"}),
        ("tag.added", {"Tag": "gold"}),
        ("tag.deleted", {"Tag": "vip"}),
    ]
    assert all(e.filter_values == () and e.entity == "Tags" for e in events)


# --- order and cross-checks ----------------------------------------------------------------------


def test_update_many_changes_emit_in_documented_section_order() -> None:
    new = _base()
    new["Tags"] = []
    new["Groups"] = []
    new["CustomFields"] = []
    new["Consents"][0]["ConsentVersion"] = "v2"
    new["ProfilePreferences"][0]["Status"] = "OptOut"
    new["AlternateIds"] = []
    new["DefaultLocale"] = "en-GB"
    entities = [e.entity for e in _fine(_update(new))]
    order = [
        "StandardFields",
        "Contacts",
        "Preferences",
        "Consents",
        "CustomFields",
        "Groups",
        "Tags",
    ]
    assert entities == sorted(entities, key=order.index)


def test_diff_defaults_agree_with_profile_model_defaults() -> None:
    dumped = dump_wire(
        Profile.model_validate(
            {
                "Emails": [
                    {
                        "Address": "a@x.io",
                        "Preferences": [{"Program": "P", "Channel": "C", "Status": "OptIn"}],
                    }
                ],
                "PhoneNumbers": [{"Number": "+15550100"}],
                "Addresses": [{"Type": "Home", "Line1": "x"}],
                "Consents": [{"ConsentType": "M"}],
                "Groups": [{"Name": "G"}],
            }
        )
    )
    elements = {
        "Profile": dumped,
        "Email": dumped["Emails"][0],
        "PhoneNumber": dumped["PhoneNumbers"][0],
        "Address": dumped["Addresses"][0],
        "Preference": dumped["Emails"][0]["Preferences"][0],
        "Consent": dumped["Consents"][0],
        "Group": dumped["Groups"][0],
    }
    for kind, defaults in _diff.DEFAULTS.items():
        for key, value in defaults.items():
            assert elements[kind][key] == value, (kind, key)


def test_every_emitted_type_is_in_the_catalog_with_its_entity() -> None:
    new = _base()
    new["Tags"] = ["x"]
    new["Consents"] = []
    for event in _update(new):
        assert catalog.entity_of(event.event_type) == event.entity
