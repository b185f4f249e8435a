"""``/profiles`` over HTTP: create, read, search, replace, patch, lifecycle — and their events."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.emulator.routes._api import JSON_PATCH, MERGE_PATCH, Api, assert_problem

ANN: dict[str, Any] = {
    "CustomerName": {"FirstName": "Ann", "LastName": "Lee"},
    "Emails": [{"Address": "ann@example.com", "Type": "Personal", "IsDefault": True}],
    "ProfilePreferences": [
        {"Program": "Newsletter", "Filter": "Weekly Digest", "Channel": "Email", "Status": "OptIn"}
    ],
    "Consents": [
        {
            "ConsentType": "Marketing",
            "ConsentStatus": "NotSet",
            "ConsentVersion": "v1",
            "Filters": ["Weekly Digest"],
        }
    ],
    "Tags": ["vip"],
}


def _unique() -> str:
    return uuid.uuid4().hex[:12]


# -- create and read -------------------------------------------------------------------------------
def test_create_profile_answers_201_with_location_and_emits_profile_created(api: Api) -> None:
    answer = api.post("/profiles", json=ANN)

    assert answer.status_code == 201
    profile = answer.json()
    assert answer.headers["location"] == f"{api.base}/profiles/{profile['ProfileId']}"
    assert profile["IsActive"] is True
    assert profile["CustomerName"] == {"FirstName": "Ann", "LastName": "Lee"}
    assert profile["Edited"]["CreatedBy"] == "admin"
    assert api.get(answer.headers["location"]).json() == profile
    assert api.event_types(profile["ProfileId"]) == ["profile.created"]


def test_create_profile_ignores_read_only_fields_in_the_body(api: Api) -> None:
    profile = api.create_profile({"ProfileId": 1, "IsActive": False, "Tags": ["x"]})

    assert profile["ProfileId"] != 1
    assert profile["IsActive"] is True


def test_create_profile_with_misspelt_field_is_400_naming_it(api: Api) -> None:
    problem = assert_problem(api.post("/profiles", json={"Emial": []}), 400)

    assert problem["errors"] == [{"field": "Emial", "message": "is not a known field"}]


def test_create_profile_with_invalid_nested_value_names_its_wire_path(api: Api) -> None:
    body = {"Emails": [{"Address": "ann@example.com"}, {"Address": "not-an-email"}]}

    problem = assert_problem(api.post("/profiles", json=body), 400)

    assert [error["field"] for error in problem["errors"]] == ["Emails[1].Address"]


def test_create_profile_field_errors_say_in_words_what_the_field_must_be(api: Api) -> None:
    body = {
        "CustomerName": {"FirstName": ""},
        "Emails": [{"Address": "not-an-email"}],
        "Addresses": [{"Type": "Home", "Line1": "1 Main St", "CountryCode": "gb"}],
        "Consents": [{"ConsentType": "Terms", "Locale": "EN", "ConsentStatus": "Yes"}],
        "CustomFields": [{"Name": "x" * 201, "Value": 1}],
    }

    problem = assert_problem(api.post("/profiles", json=body), 400)

    assert {error["field"]: error["message"] for error in problem["errors"]} == {
        "CustomerName.FirstName": "must not be empty",
        "Emails[0].Address": "must be an email address such as ann@example.com",
        "Addresses[0].CountryCode": "must be a two-letter country code in capitals, such as GB",
        "Consents[0].Locale": "must be a language tag such as en or en-GB (the language in lower"
        " case first)",
        "Consents[0].ConsentStatus": "must be 'Granted', 'Denied', 'Revoked' or 'NotSet'",
        "CustomFields[0].Name": "must be at most 200 characters",
    }


def test_search_profiles_with_a_limit_out_of_range_says_the_bound(api: Api) -> None:
    problem = assert_problem(api.get("/profiles", params={"limit": 0}), 400)

    assert problem["errors"] == [{"field": "limit", "message": "must be 1 or more"}]


def test_create_profile_with_malformed_json_is_400(api: Api) -> None:
    answer = api.post(
        "/profiles", content=b'{"Tags": [', headers={"Content-Type": "application/json"}
    )

    assert "not valid JSON" in assert_problem(answer, 400)["detail"]


def test_create_profile_with_a_nul_character_is_400_and_nothing_is_written(api: Api) -> None:
    address = "nul-\u0000@example.com"
    answer = api.post("/profiles", json={"Emails": [{"Address": address}]})

    assert "NUL character" in assert_problem(answer, 400)["detail"]
    assert api.get("/profiles", params={"email": "nul-@example.com"}).json()["Profiles"] == []


def test_search_profiles_with_a_nul_character_in_the_query_is_400(api: Api) -> None:
    answer = api.get("/profiles", params={"email": "a\u0000@example.com"})

    assert "NUL character" in assert_problem(answer, 400)["detail"]


def test_get_unknown_profile_is_404_problem(api: Api) -> None:
    problem = assert_problem(api.get("/profiles/987654321"), 404)

    assert problem["detail"] == "profile 987654321 not found"


@pytest.mark.parametrize("profile_id", ["0", "-1", "abc", str(2**63)])
def test_get_profile_with_impossible_id_is_400(api: Api, profile_id: str) -> None:
    problem = assert_problem(api.get(f"/profiles/{profile_id}"), 400)

    assert problem["errors"][0]["field"] == "profile_id"


# -- search ----------------------------------------------------------------------------------------
def test_search_profiles_pages_through_matches_with_the_cursor(api: Api) -> None:
    loyalty = _unique()
    ids = [
        api.create_profile({"AlternateIds": [{"Type": "Loyalty", "Value": loyalty}]})["ProfileId"]
        for _ in range(3)
    ]

    first = api.get("/profiles", params={"alternateId": loyalty, "limit": 2}).json()
    second = api.get(
        "/profiles", params={"alternateId": loyalty, "limit": 2, "cursor": first["NextCursor"]}
    ).json()

    assert [p["ProfileId"] for p in first["Profiles"]] == ids[:2]
    assert [p["ProfileId"] for p in second["Profiles"]] == ids[2:]
    assert second["NextCursor"] is None


def test_search_profiles_by_email_ignores_case(api: Api) -> None:
    address = f"{_unique()}@example.com"
    profile = api.create_profile({"Emails": [{"Address": address}]})

    found = api.get("/profiles", params={"email": address.upper()}).json()

    assert [p["ProfileId"] for p in found["Profiles"]] == [profile["ProfileId"]]


@pytest.mark.parametrize(
    "params",
    [{"cursor": "bogus"}, {"alternateIdType": "Loyalty"}, {"limit": 0}, {"limit": 501}],
)
def test_search_profiles_with_invalid_parameters_is_400(api: Api, params: dict[str, Any]) -> None:
    assert_problem(api.get("/profiles", params=params), 400)


# -- replace ---------------------------------------------------------------------------------------
def test_replace_profile_overwrites_it_and_emits_only_profile_replaced(api: Api) -> None:
    profile = api.create_profile(ANN)
    path = f"/profiles/{profile['ProfileId']}"
    body = {**profile, "Tags": ["gold"], "Emails": []}  # GET → edit → PUT, read-only fields too

    answer = api.put(path, json=body)

    assert answer.status_code == 200
    assert answer.json()["Tags"] == ["gold"]
    assert answer.json()["Emails"] == []
    assert answer.json()["Edited"]["CreateDate"] == profile["Edited"]["CreateDate"]
    assert api.event_types(profile["ProfileId"]) == ["profile.created", "profile.replaced"]


def test_replace_unknown_profile_is_404(api: Api) -> None:
    assert_problem(api.put("/profiles/987654321", json={}), 404)


# -- patch -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("updated_full", [True, False], ids=["default", "EmitUpdatedFull-false"])
def test_patch_spec_example_yields_the_spec_events(api: Api, updated_full: bool) -> None:
    """Spec, Events → Rules 4: adding an email, updating a preference and granting a consent in
    one action yields profile.updated, contacts.email.added, preference.added and
    consent.filterassociation.created; by default profile.updatedfull comes beside
    profile.updated, and the account setting EmitUpdatedFull=false gives the spec's list exactly
    (docs/decisions.md)."""
    if not updated_full:
        assert api.put("/settings/webhooks", json={"EmitUpdatedFull": False}).status_code == 200
    try:
        profile = api.create_profile(
            {**ANN, "Consents": [{**ANN["Consents"][0], "ConsentStatus": "Granted"}]}
        )
        profile_id = profile["ProfileId"]
        patch = [
            {"op": "add", "path": "/Emails/-", "value": {"Address": "ann@work.example"}},
            # The customer opts in to SMS offers: a preference not set before ...
            {
                "op": "add",
                "path": "/ProfilePreferences/-",
                "value": {
                    "Program": "Offers",
                    "Filter": "Seasonal Sales",
                    "Channel": "SMS",
                    "Status": "OptIn",
                },
            },
            # ... and grants the Marketing consent for that filter too.
            {"op": "add", "path": "/Consents/0/Filters/-", "value": "Seasonal Sales"},
        ]

        answer = api.patch(f"/profiles/{profile_id}", patch)
    finally:
        api.put("/settings/webhooks", json={})  # back to the defaults

    assert answer.status_code == 200, answer.text
    assert [e["Address"] for e in answer.json()["Emails"]] == [
        "ann@example.com",
        "ann@work.example",
    ]
    events = api.get("/events", params={"profileId": profile_id}).json()["Events"]
    full = ["profile.updatedfull"] if updated_full else []
    assert [event["EventType"] for event in events] == [
        "profile.created",
        "profile.updated",
        *full,
        "contacts.email.added",
        "preference.added",
        "consent.filterassociation.created",
    ]
    of = {event["EventType"]: event["Data"] for event in events}
    assert of["profile.updated"]["ChangedFields"] == ["Consents", "Emails", "ProfilePreferences"]
    if updated_full:
        assert of["profile.updatedfull"] == answer.json()
    assert of["contacts.email.added"]["Address"] == "ann@work.example"
    assert of["preference.added"]["Filter"] == "Seasonal Sales"
    assert of["consent.filterassociation.created"] == {
        "ConsentType": "Marketing",
        "ConsentStatus": "Granted",
        "ConsentVersion": "v1",
        "Filter": "Seasonal Sales",
    }
    assert len({event["EventId"] for event in events}) == len(events)


def test_patch_added_contact_and_custom_field_events_carry_empty_previous_data(api: Api) -> None:
    """Spec, envelope: PreviousData is "present for Standard Field, Custom Field, Customer Type,
    Contact and AlternateId events": an added one has nothing before it, so it is {}."""
    profile = api.create_profile(ANN)
    patch = [
        {"op": "add", "path": "/Emails/-", "value": {"Address": "ann@work.example"}},
        {"op": "add", "path": "/AlternateIds", "value": [{"Type": "Crm", "Value": "C-9"}]},
        {"op": "add", "path": "/CustomFields", "value": [{"Name": "Tier", "Value": "gold"}]},
    ]

    answer = api.patch(f"/profiles/{profile['ProfileId']}", patch)

    assert answer.status_code == 200, answer.text
    events = api.get("/events", params={"profileId": profile["ProfileId"]}).json()["Events"]
    previous = {e["EventType"]: e.get("PreviousData", "absent") for e in events}
    assert previous["contacts.email.added"] == {}
    assert previous["contacts.alternateid.added"] == {}
    assert previous["customfield.added"] == {}
    assert previous["profile.updated"] == "absent"


def test_patch_json_patch_applies_every_operation_in_order(api: Api) -> None:
    profile = api.create_profile(
        {"Tags": ["a", "b"], "CustomFields": [{"Name": "Size", "Value": 1}]}
    )
    patch = [
        {"op": "test", "path": "/Tags/0", "value": "a"},
        {"op": "add", "path": "/Tags/1", "value": "c"},
        {"op": "remove", "path": "/Tags/0"},
        {"op": "replace", "path": "/CustomFields/0/Value", "value": 2},
        {"op": "copy", "from": "/CustomFields/0/Name", "path": "/Tags/-"},
        {"op": "move", "from": "/Tags/1", "path": "/Tags/0"},
        {"op": "add", "path": "/CustomerName", "value": {"FirstName": "Zoe"}},
    ]

    answer = api.patch(f"/profiles/{profile['ProfileId']}", patch)

    assert answer.status_code == 200, answer.text
    assert answer.json()["Tags"] == ["b", "c", "Size"]
    assert answer.json()["CustomFields"] == [{"Name": "Size", "Value": 2}]
    assert answer.json()["CustomerName"] == {"FirstName": "Zoe"}


def test_patch_merge_patch_merges_objects_and_null_removes(api: Api) -> None:
    profile = api.create_profile(ANN)

    answer = api.patch(
        f"/profiles/{profile['ProfileId']}",
        {"CustomerName": {"FirstName": "Anna", "LastName": None}, "Tags": None},
        MERGE_PATCH,
    )

    assert answer.status_code == 200, answer.text
    assert answer.json()["CustomerName"] == {"FirstName": "Anna"}
    assert answer.json()["Tags"] == []
    types = api.event_types(profile["ProfileId"])
    assert "standardfield.firstname.updated" in types
    assert "standardfield.lastname.deleted" in types
    assert "tag.deleted" in types


def test_patch_failing_test_is_409_and_changes_nothing(api: Api) -> None:
    profile = api.create_profile({"Tags": ["a"]})
    patch = [
        {"op": "add", "path": "/Tags/-", "value": "b"},
        {"op": "test", "path": "/Tags/0", "value": "z"},
    ]

    problem = assert_problem(api.patch(f"/profiles/{profile['ProfileId']}", patch), 409)

    assert "operation 1 (test /Tags/0)" in problem["detail"]
    assert api.get(f"/profiles/{profile['ProfileId']}").json()["Tags"] == ["a"]
    assert api.event_types(profile["ProfileId"]) == ["profile.created"]


@pytest.mark.parametrize("op", [["add"], {}, 7])
def test_patch_op_that_is_not_a_string_is_400_and_changes_nothing(api: Api, op: Any) -> None:
    profile = api.create_profile({"Tags": ["a"]})

    answer = api.patch(f"/profiles/{profile['ProfileId']}", [{"op": op, "path": "/Tags/-"}])

    problem = assert_problem(answer, 400)
    assert problem["errors"][0]["field"] == "[0].op"
    assert api.get(f"/profiles/{profile['ProfileId']}").json()["Tags"] == ["a"]


@pytest.mark.parametrize(
    ("media_type", "body"),
    [
        (JSON_PATCH, '[{"op": "add", "path": "/Tags/-", "value": %s}]' % ("[" * 500 + "]" * 500)),
        (MERGE_PATCH, '{"CustomerName": %s}' % ('{"a": ' * 500 + "1" + "}" * 500)),
    ],
)
def test_patch_document_nested_hundreds_deep_is_400(api: Api, media_type: str, body: str) -> None:
    profile = api.create_profile({})

    answer = api.client.patch(
        f"/profiles/{profile['ProfileId']}", content=body, headers={"Content-Type": media_type}
    )

    assert "nested more than 64 levels" in assert_problem(answer, 400)["detail"]


def test_patch_path_that_does_not_exist_is_409(api: Api) -> None:
    profile = api.create_profile({})

    answer = api.patch(f"/profiles/{profile['ProfileId']}", [{"op": "remove", "path": "/Nope"}])

    assert "does not exist" in assert_problem(answer, 409)["detail"]


def test_patch_malformed_document_is_400_naming_the_operation(api: Api) -> None:
    profile = api.create_profile({})

    answer = api.patch(f"/profiles/{profile['ProfileId']}", [{"op": "frobnicate", "path": "/"}])

    assert assert_problem(answer, 400)["errors"][0]["field"] == "[0].op"


def test_patch_result_that_is_not_a_valid_profile_is_400(api: Api) -> None:
    profile = api.create_profile({})
    patch = [{"op": "add", "path": "/Emails", "value": [{"Address": "nope"}]}]

    problem = assert_problem(api.patch(f"/profiles/{profile['ProfileId']}", patch), 400)

    assert problem["errors"][0]["field"] == "Emails[0].Address"


@pytest.mark.parametrize("field", ["IsActive", "ProfileId", "ReasonCode"])
def test_patch_changing_a_field_the_service_maintains_is_400(api: Api, field: str) -> None:
    profile = api.create_profile({})
    value: Any = {"IsActive": False, "ProfileId": 1, "ReasonCode": "x"}[field]

    answer = api.patch(f"/profiles/{profile['ProfileId']}", {field: value}, MERGE_PATCH)

    assert assert_problem(answer, 400)["errors"][0]["field"] == field


def test_patch_with_plain_json_is_415_with_accept_patch(api: Api) -> None:
    profile = api.create_profile({})

    answer = api.patch(f"/profiles/{profile['ProfileId']}", {"Tags": []}, "application/json")

    assert_problem(answer, 415)
    assert answer.headers["accept-patch"] == f"{JSON_PATCH}, {MERGE_PATCH}"


def test_patch_that_changes_nothing_emits_nothing(api: Api) -> None:
    profile = api.create_profile({"Tags": ["a"]})

    answer = api.patch(f"/profiles/{profile['ProfileId']}", {"Tags": ["a"]}, MERGE_PATCH)

    assert answer.status_code == 200
    assert api.event_types(profile["ProfileId"]) == ["profile.created"]


def test_patch_unknown_profile_is_404(api: Api) -> None:
    assert_problem(api.patch("/profiles/987654321", []), 404)


# -- lifecycle -------------------------------------------------------------------------------------
def test_deactivate_then_reactivate_toggle_is_active_with_their_events(api: Api) -> None:
    profile_id = api.create_profile({})["ProfileId"]

    deactivated = api.post(f"/profiles/{profile_id}/deactivate", json={"Reason": "Requested"})
    reactivated = api.post(f"/profiles/{profile_id}/reactivate")

    assert deactivated.status_code == 200
    assert deactivated.json()["IsActive"] is False
    assert deactivated.json()["ReasonCode"] == "Requested"
    assert reactivated.json()["IsActive"] is True
    assert "ReasonCode" not in reactivated.json()
    assert api.event_types(profile_id) == [
        "profile.created",
        "profile.deactivated",
        "profile.reactivated",
    ]


def test_deactivate_without_a_body_has_no_reason(api: Api) -> None:
    profile_id = api.create_profile({})["ProfileId"]

    answer = api.post(f"/profiles/{profile_id}/deactivate")

    assert answer.status_code == 200
    assert "ReasonCode" not in answer.json()


def test_delete_profile_answers_204_and_emits_profile_deleted_with_the_reason(api: Api) -> None:
    profile_id = api.create_profile({})["ProfileId"]

    answer = api.delete(f"/profiles/{profile_id}", params={"reasonCode": "GDPR"})

    assert answer.status_code == 204
    assert answer.content == b""
    assert_problem(api.get(f"/profiles/{profile_id}"), 404)
    events = api.get("/events", params={"profileId": profile_id}).json()["Events"]
    assert [e["EventType"] for e in events] == ["profile.created", "profile.deleted"]
    assert events[1]["Data"]["ReasonCode"] == "GDPR"
    assert_problem(api.delete(f"/profiles/{profile_id}"), 404)
