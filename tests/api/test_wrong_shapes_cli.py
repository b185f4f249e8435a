"""Admin commands against a real deployment whose answers are well-formed at the top but carry
fields in an unexpected shape inside (``tests/auth/stub_server.py``): the table views show what
they can — a field in another shape is an empty cell, list items of the wrong shape are left
out (``prefctl.api.shapes``) — and never crash; ``-o json`` prints the answer as it came."""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stdout
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefctl.api.shapes import Scalar
from prefctl.cli._output import Output
from prefctl.cli.profiles import _details, _summary
from prefctl.cli.programs import _row
from tests.auth.stub_server import StubTokenService
from tests.helpers import CliResult, run_cli

PROFILE: dict[str, Any] = {
    "ProfileId": 1001,
    "IsActive": True,
    "CustomerName": {"FirstName": "Ada", "LastName": "Lovelace"},
    "DefaultLocale": "en-GB",
    "Emails": [
        {"Address": "ada@example.com", "IsDefault": True, "Preferences": [{"Program": "News"}]}
    ],
    "PhoneNumbers": [{"Number": "+44 20 7946 0000"}],
    "Addresses": [{"Type": "Home", "City": "London"}],
    "AlternateIds": [{"Type": "Loyalty", "Value": "L-1"}],
    "Consents": [{"ConsentType": "Marketing", "ConsentStatus": "Granted"}],
    "CustomFields": [{"Name": "Tier", "Value": "Gold"}],
    "Groups": [{"Name": "VIP", "IsActive": True}],
    "Tags": ["early"],
    "Edited": {"CreateDate": "2026-01-02T03:04:05Z", "ModifiedDate": "2026-02-03T04:05:06Z"},
}

# (overrides of PROFILE, texts still shown by `profiles get`, texts `profiles search` shows)
PROFILE_VARIANTS: dict[str, tuple[dict[str, Any], list[str], list[str]]] = {
    "edited-is-text": (
        {"Edited": "yesterday"},
        ["Ada Lovelace", "ada@example.com", "Home", "Loyalty=L-1", "early"],
        ["1001", "Ada Lovelace", "ada@example.com"],
    ),
    "emails-is-an-object": (
        {"Emails": {"a": 1}},
        ["Ada Lovelace", "+44 20 7946 0000", "Marketing: Granted"],
        ["Ada Lovelace", "+44 20 7946 0000", "2026-02-03T04:05:06Z"],
    ),
    "emails-are-texts": (
        {"Emails": ["x@y.example", {"Address": "ada@example.com"}]},
        ["Ada Lovelace", "ada@example.com", "Tier=Gold"],
        ["Ada Lovelace", "ada@example.com"],
    ),
    "preferences-of-a-contact-null": (
        {"Emails": [{"Address": "ada@example.com", "Preferences": None}]},
        ["Ada Lovelace", "ada@example.com", "VIP"],
        ["Ada Lovelace", "ada@example.com"],
    ),
    "default-address-unreadable": (
        {"Emails": [{"Address": {"x": 1}, "IsDefault": True}, {"Address": "b@example.com"}]},
        ["Ada Lovelace", "b@example.com"],
        ["Ada Lovelace", "+44 20 7946 0000"],
    ),
    "number-for-a-name": (
        {"CustomerName": {"FirstName": "Ada", "LastName": 7}},
        ["Ada 7", "ada@example.com"],
        ["Ada 7", "ada@example.com"],
    ),
    "customer-name-is-text": (
        {"CustomerName": "Ada Lovelace"},
        ["ada@example.com", "Home"],
        ["1001", "ada@example.com"],
    ),
    "lists-are-scalars": (
        {
            "Tags": "early",
            "Groups": 5,
            "Consents": {"Marketing": "Granted"},
            "AlternateIds": "L-1",
            "ProfilePreferences": 5,
            "PhoneNumbers": True,
        },
        ["Ada Lovelace", "ada@example.com", "Tier=Gold"],
        ["Ada Lovelace", "ada@example.com"],
    ),
    "items-of-mixed-shapes": (
        {
            "Groups": [7, {"Name": "VIP", "IsActive": "no"}, {"IsActive": False}],
            "CustomFields": [{"Name": ["x"], "Value": 1}, {"Name": "Tier", "Value": {"a": 1}}],
            "Tags": ["early", {"b": 1}, 3],
        },
        ["Ada Lovelace", "VIP", "Tier=", "early, 3"],
        ["Ada Lovelace", "ada@example.com"],
    ),
    "keys-missing": (
        {"ProfileId": None, "Emails": [{"IsDefault": True}], "Edited": {}},
        ["Ada Lovelace", "+44 20 7946 0000"],
        ["Ada Lovelace", "+44 20 7946 0000"],
    ),
}


def _profile(overrides: dict[str, Any]) -> dict[str, Any]:
    profile = {**copy.deepcopy(PROFILE), **overrides}
    return {key: value for key, value in profile.items() if value is not None}


def _shows(result: CliResult, *texts: str) -> None:
    assert result.exit_code == 0, result.output
    assert "internal error" not in result.stderr
    assert "Traceback" not in result.stderr
    for text in texts:
        assert text in result.stdout, result.stdout


def _one_line_error(result: CliResult) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "internal error" not in lines[0]
    return lines[0]


# -- profiles ------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", PROFILE_VARIANTS, ids=list(PROFILE_VARIANTS))
def test_profiles_get_with_a_field_in_another_shape_shows_the_others(
    stub: StubTokenService, variant: str
) -> None:
    overrides, shown, _ = PROFILE_VARIANTS[variant]
    stub.api_answer(200, _profile(overrides))
    _shows(run_cli("profiles", "get", "1001"), *shown)


@pytest.mark.parametrize("variant", PROFILE_VARIANTS, ids=list(PROFILE_VARIANTS))
def test_profiles_search_with_a_field_in_another_shape_shows_the_others(
    stub: StubTokenService, variant: str
) -> None:
    overrides, _, shown = PROFILE_VARIANTS[variant]
    stub.api_answer(200, {"Profiles": [_profile(overrides)], "NextCursor": None})
    _shows(run_cli("profiles", "search"), *shown)


def test_profiles_search_all_with_fields_in_other_shapes_lists_every_profile(
    stub: StubTokenService,
) -> None:
    profiles = [_profile(overrides) for overrides, _, _ in PROFILE_VARIANTS.values()]
    stub.api_answer(200, {"Profiles": profiles, "NextCursor": None})
    result = run_cli("profiles", "search", "--all")
    _shows(result, "Ada Lovelace", "Ada 7", "ada@example.com", "2026-02-03T04:05:06Z")
    assert result.stdout.count("1001") == len(profiles) - 1  # one variant has no ProfileId


def test_profiles_update_shows_the_answer_with_fields_in_other_shapes(
    stub: StubTokenService,
) -> None:
    stub.api_answer(200, _profile({"Edited": "yesterday", "Emails": {"a": 1}}))
    result = run_cli("profiles", "update", "1001", "--set", 'Tags=["early"]')
    _shows(result, "Ada Lovelace", "early")
    assert "updated profile 1001" in result.stderr


def test_profiles_get_json_prints_the_answer_as_it_came(stub: StubTokenService) -> None:
    profile = _profile({"Edited": "yesterday", "Emails": {"a": 1}, "Tags": ["early", {"b": 1}]})
    stub.api_answer(200, profile)
    result = run_cli("-o", "json", "profiles", "get", "1001")
    assert result.exit_code == 0, result.output
    assert result.json == profile


# -- programs ------------------------------------------------------------------------------------
PROGRAMS = {
    "Programs": [
        {
            "ProgramId": 1,
            "Name": "News",
            "ProgramType": "Marketing",
            "Filters": 5,
            "Channels": ["Email"],
        },
        {
            "ProgramId": 2,
            "Name": "Offers",
            "ProgramType": "Marketing",
            "Filters": [{"FilterId": 1, "Name": "Weekly"}, "Daily", {"FilterId": 3}],
            "Channels": "SMS",
        },
        {"ProgramId": {"x": 1}, "Name": 42, "ProgramType": ["Service"]},
    ]
}


def test_programs_list_with_fields_in_other_shapes_shows_the_others(
    stub: StubTokenService,
) -> None:
    stub.api_answer(200, PROGRAMS)
    result = run_cli("programs", "list")
    _shows(result, "News", "Offers", "Weekly", "Email", "Marketing", "42")
    assert "Daily" not in result.stdout
    assert "SMS" not in result.stdout


def test_programs_list_by_type_skips_a_program_whose_type_is_unreadable(
    stub: StubTokenService,
) -> None:
    stub.api_answer(200, PROGRAMS)
    result = run_cli("programs", "list", "--type", "service")
    assert result.exit_code == 0, result.output
    assert "no programs" in result.stderr


def test_programs_list_json_prints_the_answer_as_it_came(stub: StubTokenService) -> None:
    stub.api_answer(200, PROGRAMS)
    result = run_cli("-o", "json", "programs", "list")
    assert result.exit_code == 0, result.output
    assert result.json == PROGRAMS["Programs"]


# -- subscriptions -------------------------------------------------------------------------------
SUBSCRIPTION: dict[str, Any] = {
    "Id": 7,
    "Name": "crm",
    "Url": "https://crm.example.com/hooks",
    "State": "Active",
    "ProvisioningState": "Succeeded",
    "CatchUpOnResume": False,
    "Subscriptions": [
        {"Entity": "Newfangled", "EventType": "segment.joined", "Segments": ["A"]},
        {"EventType": "preference.added", "Filters": ["Weekly", 3, {"x": 1}]},
        {"Entity": "Tags", "EventType": "tag.added"},
        {"Entity": "Consents", "EventType": "consent.added", "ConsentTypes": "AllConsents"},
        3,
        {"Entity": "Tags"},
    ],
    "Alerts": "on",
    "Edited": "yesterday",
}


def test_subscriptions_list_with_fields_in_other_shapes_shows_the_others(
    stub: StubTokenService,
) -> None:
    other = {
        "Id": 8,
        "Name": "erp",
        "State": "Paused",
        "ProvisioningState": ["Succeeded"],
        "Url": {"href": "x"},
        "Subscriptions": {"EventType": "tag.added"},
    }
    stub.api_answer(200, {"Subscriptions": [SUBSCRIPTION, other]})
    result = run_cli("subscriptions", "list")
    _shows(result, "crm", "erp", "Paused", "https://crm.example.com/hooks", "segment.joined")


def test_subscriptions_get_with_fields_in_other_shapes_shows_the_others(
    stub: StubTokenService,
) -> None:
    stub.api_answer(200, SUBSCRIPTION)
    result = run_cli("subscriptions", "get", "7")
    _shows(
        result,
        "crm",
        "https://crm.example.com/hooks",
        "segment.joined",
        "preference.added:Weekly,3",
        "tag.added",
        "consent.added",
    )
    assert "alerts" not in result.stdout  # "on" is not an Alerts object: no line, never "off"
    assert "A,l,l" not in result.stdout  # a text where a list is expected is not split


def test_subscriptions_pause_shows_the_answer_with_fields_in_other_shapes(
    stub: StubTokenService,
) -> None:
    stub.api_answer(200, {**SUBSCRIPTION, "Subscriptions": [{"EventType": "tag.added"}]})
    stub.api_answer(200, {**SUBSCRIPTION, "State": "Paused"})
    result = run_cli("subscriptions", "pause", "7")
    _shows(result, "Paused", "segment.joined")
    assert "subscription 7 is Paused" in result.stderr


def test_subscriptions_create_no_wait_shows_the_answer_with_fields_in_other_shapes(
    stub: StubTokenService,
) -> None:
    stub.api_answer(201, {**SUBSCRIPTION, "ProvisioningState": "Creating"})
    result = run_cli(
        "subscriptions", "create", "--name", "crm", "--url", "https://crm.example.com/hooks",
        "--event", "tag.added", "--no-wait",
    )  # fmt: skip
    _shows(result, "crm", "Creating", "segment.joined")


def test_subscriptions_create_with_an_unreadable_provisioning_state_waits_then_exits_1(
    stub: StubTokenService,
) -> None:
    record = {**SUBSCRIPTION, "ProvisioningState": ["Succeeded"]}
    stub.api_answer(201, record)
    stub.api_answer(200, record)
    result = run_cli(
        "subscriptions", "create", "--name", "crm", "--url", "https://crm.example.com/hooks",
        "--event", "tag.added", "--wait-timeout", "0",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "error: subscription 7 is still not provisioned after 0 s" in result.stderr
    assert "internal error" not in result.stderr
    assert "crm" in result.stdout


def test_subscriptions_pause_of_a_subscription_without_an_id_is_one_line_exit_1(
    stub: StubTokenService,
) -> None:
    stub.api_answer(200, {"Subscriptions": [{"Name": "crm", "Id": {"value": 7}}]})
    line = _one_line_error(run_cli("subscriptions", "pause", "crm"))
    assert "without a numeric Id" in line
    assert [r.method for r in stub.api_requests] == ["GET"]


def test_subscriptions_update_with_unreadable_selections_changes_nothing(
    stub: StubTokenService,
) -> None:
    stub.api_answer(200, {**SUBSCRIPTION, "Subscriptions": {"EventType": "tag.added"}})
    line = _one_line_error(run_cli("subscriptions", "update", "7", "--add-event", "tag.deleted"))
    assert "Subscriptions of subscription 7" in line
    assert "replace them all with --event" in line
    assert [r.method for r in stub.api_requests] == ["GET"]


def test_subscriptions_get_json_prints_the_answer_as_it_came(stub: StubTokenService) -> None:
    stub.api_answer(200, SUBSCRIPTION)
    result = run_cli("-o", "json", "subscriptions", "get", "7")
    assert result.exit_code == 0, result.output
    assert result.json == SUBSCRIPTION


# -- settings ------------------------------------------------------------------------------------
def test_profiles_import_summary_with_fields_in_other_shapes_shows_the_others(
    stub: StubTokenService,
) -> None:
    stub.api_answer(201, {"ImportId": 7, "State": "Initiated"})
    stub.api_answer(200, {"ImportId": 7, "State": "Staging"})
    stub.api_answer(202, {"ImportId": 7, "State": "Queued"})
    done = {
        "ImportId": 7,
        "State": "Completed",
        "TotalRecords": {"n": 2},
        "CreatedProfiles": 1,
        "FailedRecords": "one",
        "Errors": [3, {"Record": 2, "Message": "Emails: not a list"}],
    }
    stub.api_answer(200, done)
    result = run_cli("profiles", "import", "-", stdin='{"Tags": ["a"]}\n{"Tags": ["b"]}\n')
    assert result.exit_code == 0, result.output
    assert "internal error" not in result.stderr
    assert "record 2: Emails: not a list" in result.stderr
    assert "import 7 completed" in result.stderr
    assert "created" in result.stdout


def test_profiles_import_without_an_import_id_is_one_line_exit_1(stub: StubTokenService) -> None:
    stub.api_answer(201, {"State": "Initiated"})
    result = run_cli("profiles", "import", "-", stdin='{"Tags": ["a"]}\n')
    assert result.exit_code == 1, result.output
    *progress, line = result.stderr.strip().splitlines()  # how far staging got, then the error
    assert [text.split()[-3:-1] for text in progress] == [["staging", "0/1"]]
    assert line == "error: the REST API answered a new import without a numeric ImportId"
    assert [r.method for r in stub.api_requests] == ["POST"]  # nothing staged


def test_settings_get_with_values_in_other_shapes_shows_the_others(
    stub: StubTokenService,
) -> None:
    settings = {
        "Duration": "5",
        "MaxDeliveryAttempts": {"value": 10},
        "EventTimeToLiveMinutes": 240,
        "SomethingNew": [1, 2],
    }
    stub.api_answer(200, settings)
    result = run_cli("settings", "get")
    _shows(result, "Duration", "MaxDeliveryAttempts", "240", "SomethingNew")
    assert '{"value"' not in result.stdout  # an object where a number is expected: empty


# -- events --------------------------------------------------------------------------------------
EVENTS = {
    "Events": [
        {
            "EventId": "e-1",
            "EventType": "tag.added",
            "ProfileId": {"x": 1},
            "OriginalEventTime": ["2026-01-02T03:04:05Z"],
        },
        {"EventId": "e-2", "EventType": 5, "ProfileId": 1001},
    ],
    "NextCursor": None,
}


@pytest.mark.parametrize("paging", [[], ["--all"]], ids=["one-page", "all-pages"])
def test_events_list_with_fields_in_other_shapes_shows_the_others(
    stub: StubTokenService, paging: list[str]
) -> None:
    stub.api_answer(200, EVENTS)
    result = run_cli("events", "list", *paging)
    _shows(result, "e-1", "tag.added", "e-2", "1001")
    assert "2026-01-02" not in result.stdout  # a list where a time is expected: an empty cell


def test_events_list_json_prints_the_answer_as_it_came(stub: StubTokenService) -> None:
    stub.api_answer(200, EVENTS)
    result = run_cli("-o", "json", "events", "list")
    assert result.exit_code == 0, result.output
    assert result.json == EVENTS["Events"]


def test_events_trigger_on_a_profile_whose_tags_are_not_a_list_changes_nothing(
    stub: StubTokenService,
) -> None:
    stub.api_answer(200, {"Events": [], "NextCursor": None})
    stub.api_answer(200, _profile({"Tags": "vip"}))
    line = _one_line_error(run_cli("events", "trigger", "tag.added", "--profile-id", "1001"))
    assert "profile 1001: Tags in the service's answer is not a list" in line
    assert [r.method for r in stub.api_requests] == ["GET", "GET"]


# -- the renderers over arbitrary JSON ----------------------------------------------------------
PROFILE_KEYS = [
    *PROFILE,
    "ReasonCode",
    "CustomerType",
    "RegistrationStatus",
    "ProfilePreferences",
    "Prefix",
    "FirstName",
    "MiddleName",
    "LastName",
    "Suffix",
    "Address",
    "Number",
    "Type",
    "Value",
    "IsDefault",
    "Preferences",
    "ConsentType",
    "ConsentStatus",
    "Name",
    "CreateDate",
    "ModifiedDate",
]
PROGRAM_KEYS = ["ProgramId", "Name", "ProgramType", "Filters", "Channels", "FilterId"]


def _json_objects(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    names = st.sampled_from(keys) | st.text(max_size=6)
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=8)
    )
    values = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=5),
        max_leaves=25,
    )
    return st.dictionaries(names, values, max_size=12)


def _is_cell(value: Any) -> bool:
    """What the rule lets a table show: a scalar, nothing, or a list of texts."""
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    return value is None or isinstance(value, Scalar)


def _rendered(rows: list[dict[str, Any]], record: dict[str, Any]) -> str:
    out = Output(no_color=True)
    with redirect_stdout(io.StringIO()) as stdout:
        out.table(rows, [(key, key.upper()) for key in rows[0]])
        out.record(record)
    return stdout.getvalue()


_RENDERER_SETTINGS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@_RENDERER_SETTINGS
@given(_json_objects(PROFILE_KEYS))
def test_profile_renderers_show_any_json_object_as_cells(profile: dict[str, Any]) -> None:
    summary, details = _summary(profile), _details(profile)
    assert all(_is_cell(value) for value in [*summary.values(), *details.values()])
    if isinstance(profile.get("ProfileId"), str | int | float):
        assert summary["ProfileId"] == details.get("ProfileId", "") == profile["ProfileId"]
    _rendered([summary], details)


@_RENDERER_SETTINGS
@given(_json_objects(PROGRAM_KEYS))
def test_program_renderer_shows_any_json_object_as_cells(program: dict[str, Any]) -> None:
    row = _row(program)
    assert all(_is_cell(value) for value in row.values())
    if isinstance(program.get("Name"), str):
        assert row["Name"] == program["Name"]
    channels = program.get("Channels")
    if isinstance(channels, list) and all(isinstance(c, str) for c in channels):
        assert row["Channels"] == channels
    assert json.dumps(program)  # the JSON view prints the program itself
    _rendered([row], row)
