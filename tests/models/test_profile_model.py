"""The Profile wire model of docs/api.md: round-trips and field-addressable validation errors."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from prefctl.models._base import dump_wire
from prefctl.models.profile import (
    DeactivateRequest,
    Profile,
    ProfilePage,
    StrictDeactivateRequest,
    StrictProfile,
    contact_ref,
)

FULL_PROFILE: dict[str, Any] = {
    "ProfileId": 1001,
    "IsActive": True,
    "ReasonCode": "Requested",
    "CustomerType": "Individual",
    "DefaultLocale": "en-US",
    "RegistrationStatus": "Registered",
    "CustomerName": {
        "Prefix": "Dr",
        "FirstName": "Ann",
        "MiddleName": "B",
        "LastName": "Lee",
        "Suffix": "PhD",
    },
    "Emails": [
        {
            "Address": "ann@example.com",
            "Type": "Personal",
            "IsDefault": True,
            "Preferences": [
                {
                    "Program": "News",
                    "Filter": "Weekly",
                    "Channel": "Email",
                    "Status": "OptIn",
                    "Frequency": "Weekly",
                    "Attributes": [{"Key": "Source", "Value": "web"}],
                    "IsArchived": False,
                }
            ],
        }
    ],
    "PhoneNumbers": [
        {
            "Number": "+1 555 0100",
            "Type": "Mobile",
            "IsMobile": True,
            "IsDefault": True,
            "Preferences": [],
        }
    ],
    "Addresses": [
        {
            "Type": "Home",
            "Line1": "1 Main St",
            "Line2": "Apt 2",
            "City": "Springfield",
            "StateProvince": "IL",
            "PostalCode": "62701",
            "CountryCode": "US",
            "IsDefault": True,
            "Preferences": [],
        }
    ],
    "AlternateIds": [{"Type": "Loyalty", "Value": "L-42"}],
    "ProfilePreferences": [
        {
            "Program": "News",
            "Channel": "SMS",
            "Status": "OptOut",
            "Attributes": [],
            "IsArchived": False,
        }
    ],
    "Consents": [
        {
            "ConsentType": "Marketing",
            "ConsentVersion": "v2",
            "Locale": "en-US",
            "ConsentStatus": "Granted",
            "ConsentDate": "2026-11-21T19:20:30.123Z",
            "Elements": ["Email:ann@example.com", "Phone:+1 555 0100", "Address:Home"],
            "Filters": ["Weekly"],
        }
    ],
    "CustomFields": [{"Name": "ShoeSize", "Value": 42}, {"Name": "Vip", "Value": True}],
    "Groups": [{"Name": "Beta", "IsActive": True}, {"Name": "Old", "IsActive": False}],
    "Tags": ["vip", "newsletter"],
    "Edited": {
        "CreateDate": "2026-11-20T08:00:00.000Z",
        "CreatedBy": "admin",
        "ModifiedDate": "2026-11-21T19:20:30.123Z",
        "ModifiedBy": "admin",
    },
}


def _errors(data: dict[str, Any], model: type[Profile] = Profile) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return {
        ".".join(str(part) for part in error["loc"]): error["msg"]
        for error in caught.value.errors()
    }


def test_profile_full_wire_document_round_trips_unchanged() -> None:
    assert dump_wire(Profile.model_validate(FULL_PROFILE)) == FULL_PROFILE


def test_profile_strict_variant_accepts_the_full_document() -> None:
    assert dump_wire(StrictProfile.model_validate(FULL_PROFILE)) == FULL_PROFILE


def test_profile_empty_body_gets_defaults() -> None:
    assert dump_wire(Profile.model_validate({})) == {
        "IsActive": True,
        "Emails": [],
        "PhoneNumbers": [],
        "Addresses": [],
        "AlternateIds": [],
        "ProfilePreferences": [],
        "Consents": [],
        "CustomFields": [],
        "Groups": [],
        "Tags": [],
    }


def test_profile_unknown_field_ignored_by_tolerant_model() -> None:
    profile = Profile.model_validate({**FULL_PROFILE, "LoyaltyTier": "Gold"})
    assert "LoyaltyTier" not in dump_wire(profile)


def test_profile_unknown_nested_field_rejected_by_strict_model_with_path() -> None:
    body = {"Emails": [{"Address": "a@example.com", "Typ": "Work"}]}
    assert set(_errors(body, StrictProfile)) == {"Emails.0.Typ"}


@pytest.mark.parametrize(
    ("body", "location"),
    [
        ({"Emails": [{"Address": "not-an-email"}]}, "Emails.0.Address"),
        ({"Emails": [{"Address": "a@example"}]}, "Emails.0.Address"),
        ({"PhoneNumbers": [{"Number": "call me"}]}, "PhoneNumbers.0.Number"),
        (
            {"Addresses": [{"Type": "Home", "Line1": "x", "CountryCode": "USA"}]},
            "Addresses.0.CountryCode",
        ),
        (
            {"Addresses": [{"Type": "Home", "Line1": "x", "CountryCode": "us"}]},
            "Addresses.0.CountryCode",
        ),
        ({"Addresses": [{"Line1": "x"}]}, "Addresses.0.Type"),
        ({"CustomerName": {"FirstName": "   "}}, "CustomerName.FirstName"),
        ({"DefaultLocale": "English"}, "DefaultLocale"),
        ({"ProfileId": 0}, "ProfileId"),
        (
            {"Consents": [{"ConsentType": "M", "ConsentStatus": "Maybe"}]},
            "Consents.0.ConsentStatus",
        ),
        (
            {"Consents": [{"ConsentType": "M", "ConsentDate": "2026-01-01T00:00:00"}]},
            "Consents.0.ConsentDate",
        ),
        ({"Consents": [{"ConsentType": "M", "Elements": ["Fax:123"]}]}, "Consents.0.Elements.0"),
        (
            {"ProfilePreferences": [{"Program": "P", "Channel": "Email", "Status": "In"}]},
            "ProfilePreferences.0.Status",
        ),
        (
            {"ProfilePreferences": [{"Program": "P", "Status": "OptIn"}]},
            "ProfilePreferences.0.Channel",
        ),
        ({"Groups": [{"Name": ""}]}, "Groups.0.Name"),
        ({"Tags": [""]}, "Tags.0"),
    ],
)
def test_profile_invalid_value_error_addresses_the_field(
    body: dict[str, Any], location: str
) -> None:
    assert set(_errors(body)) == {location}


@pytest.mark.parametrize(
    ("body", "location", "fragment"),
    [
        ({"Emails": [{"Address": "a@x.io"}, {"Address": "A@X.io"}]}, "Emails", "Address"),
        (
            {"PhoneNumbers": [{"Number": "+15550100"}, {"Number": "+15550100"}]},
            "PhoneNumbers",
            "Number",
        ),
        (
            {"Addresses": [{"Type": "Home", "Line1": "a"}, {"Type": "Home", "Line1": "b"}]},
            "Addresses",
            "Type",
        ),
        (
            {"AlternateIds": [{"Type": "L", "Value": "1"}, {"Type": "L", "Value": "2"}]},
            "AlternateIds",
            "Type",
        ),
        ({"Consents": [{"ConsentType": "M"}, {"ConsentType": "M"}]}, "Consents", "ConsentType"),
        ({"CustomFields": [{"Name": "A"}, {"Name": "A", "Value": 1}]}, "CustomFields", "Name"),
        ({"Groups": [{"Name": "G"}, {"Name": "G", "IsActive": False}]}, "Groups", "Name"),
        ({"Tags": ["a", "a"]}, "Tags", "same value"),
        (
            {"Consents": [{"ConsentType": "M", "Filters": ["F", "F"]}]},
            "Consents.0.Filters",
            "same value",
        ),
    ],
)
def test_profile_duplicate_identity_rejected_on_its_list(
    body: dict[str, Any], location: str, fragment: str
) -> None:
    errors = _errors(body)
    assert set(errors) == {location}
    assert "items 0 and 1" in errors[location]
    assert fragment in errors[location]


def test_profile_duplicate_preference_identity_rejected_on_its_list() -> None:
    pref = {"Program": "P", "Filter": "F", "Channel": "Email", "Status": "OptIn"}
    body = {"Emails": [{"Address": "a@x.io", "Preferences": [pref, {**pref, "Status": "OptOut"}]}]}
    assert set(_errors(body)) == {"Emails.0.Preferences"}
    # Same program and channel but another filter is another preference.
    Profile.model_validate({"ProfilePreferences": [pref, {**pref, "Filter": "G"}]})


def test_profile_two_default_emails_rejected() -> None:
    body = {
        "Emails": [
            {"Address": "a@x.io", "IsDefault": True},
            {"Address": "b@x.io", "IsDefault": True},
        ]
    }
    errors = _errors(body)
    assert set(errors) == {"Emails"}
    assert "IsDefault" in errors["Emails"]


def test_profile_consent_element_naming_missing_contact_rejected() -> None:
    body = {
        "Emails": [{"Address": "a@x.io"}],
        "Consents": [{"ConsentType": "M", "Elements": ["Email:a@x.io", "Email:b@x.io"]}],
    }
    errors = _errors(body)
    assert set(errors) == {"Consents"}
    assert "'Email:b@x.io'" in errors["Consents"]


def test_profile_consent_elements_not_checked_when_contacts_invalid() -> None:
    body = {
        "Emails": [{"Address": "broken"}],
        "Consents": [{"ConsentType": "M", "Elements": ["Email:broken"]}],
    }
    assert set(_errors(body)) == {"Emails.0.Address"}


def test_profile_names_are_stripped() -> None:
    profile = Profile.model_validate({"CustomerName": {"FirstName": "  Ann "}, "Tags": [" vip"]})
    assert profile.customer_name is not None
    assert profile.customer_name.first_name == "Ann"
    assert profile.tags == ["vip"]


def test_profile_custom_field_values_keep_their_json_type() -> None:
    fields = [{"Name": "a", "Value": "1"}, {"Name": "b", "Value": 1}, {"Name": "c", "Value": True}]
    dumped = dump_wire(Profile.model_validate({"CustomFields": fields}))
    assert dumped["CustomFields"] == fields


def test_contact_ref_builds_the_element_reference() -> None:
    assert contact_ref("Email", "a@x.io") == "Email:a@x.io"
    assert contact_ref("Address", "Home") == "Address:Home"
    with pytest.raises(ValueError, match="Fax"):
        contact_ref("Fax", "1")


def test_deactivate_request_reason_round_trips_and_strict_rejects_extras() -> None:
    assert dump_wire(DeactivateRequest.model_validate({"Reason": "Moved"})) == {"Reason": "Moved"}
    with pytest.raises(ValidationError):
        StrictDeactivateRequest.model_validate({"Reason": "Moved", "Force": True})


def test_profile_page_parses_profiles_and_cursor() -> None:
    page = ProfilePage.model_validate({"Profiles": [FULL_PROFILE], "NextCursor": "abc"})
    assert page.profiles[0].profile_id == 1001
    assert page.next_cursor == "abc"
