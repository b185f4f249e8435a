"""``prefctl profiles`` against a real emulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prefctl.emulator.serve import RunningEmulator
from tests.helpers import run_with_terminal_stderr

ADA = {
    "CustomerName": {"FirstName": "Ada", "LastName": "Lovelace"},
    "Emails": [{"Address": "ada@example.com", "Type": "Personal"}],
    "PhoneNumbers": [{"Number": "+44 20 7946 0000", "IsDefault": True}],
    "Tags": ["founder"],
}


def create(cli, body: dict[str, Any] | None = None) -> dict[str, Any]:
    result = cli("-o", "json", "profiles", "create", "--file", "-", stdin=json.dumps(body or ADA))
    assert result.exit_code == 0, result.output
    profile: dict[str, Any] = result.json
    return profile


def events_of(cli, profile_id: int) -> list[str]:
    result = cli("-o", "json", "events", "list", "--profile-id", str(profile_id), "--all")
    assert result.exit_code == 0, result.output
    return [event["EventType"] for event in result.json]


def test_profiles_create_from_file_prints_the_profile_as_the_api_returns_it(
    emulator: RunningEmulator, cli, tmp_path: Path
) -> None:
    path = tmp_path / "ada.json"
    path.write_text(json.dumps(ADA))
    result = cli("-o", "json", "profiles", "create", "--file", str(path))
    assert result.exit_code == 0, result.output
    profile = result.json
    assert profile["ProfileId"] > 0
    assert profile["CustomerName"] == {"FirstName": "Ada", "LastName": "Lovelace"}
    assert set(profile["Edited"]) >= {"CreateDate", "CreatedBy"}
    assert events_of(cli, profile["ProfileId"]) == ["profile.created"]


def test_profiles_create_table_shows_the_fields_people_look_for(
    emulator: RunningEmulator, cli
) -> None:
    result = cli("profiles", "create", "--file", "-", stdin=json.dumps(ADA))
    assert result.exit_code == 0, result.output
    assert "Ada Lovelace" in result.stdout
    assert "+44 20 7946 0000 (default)" in result.stdout
    assert "created profile" in result.stderr


def test_profiles_create_invalid_body_exits_1_with_field_errors(
    emulator: RunningEmulator, cli
) -> None:
    result = cli("profiles", "create", "--file", "-", stdin='{"Emails": [{"Address": "x"}]}')
    assert result.exit_code == 1
    assert "Emails[0].Address" in result.stderr
    assert result.stdout == ""


def test_profiles_create_from_file_that_is_not_json_exits_2(emulator: RunningEmulator, cli) -> None:
    result = cli("profiles", "create", "--file", "-", stdin="{nope")
    assert result.exit_code == 2
    assert "stdin is not valid JSON" in result.stderr


def test_profiles_get_missing_exits_4(emulator: RunningEmulator, cli) -> None:
    result = cli("profiles", "get", "987654")
    assert result.exit_code == 4
    assert "profile 987654 not found" in result.stderr


def test_profiles_search_by_email_finds_the_profile(emulator: RunningEmulator, cli) -> None:
    profile = create(cli, {**ADA, "Emails": [{"Address": "search-me@example.com"}]})
    result = cli("-o", "json", "profiles", "search", "--email", "search-me@example.com")
    assert result.exit_code == 0, result.output
    assert [p["ProfileId"] for p in result.json] == [profile["ProfileId"]]
    table = cli("profiles", "search", "--email", "search-me@example.com")
    assert "search-me@example.com" in table.stdout
    assert "Ada Lovelace" in table.stdout


def test_profiles_search_all_follows_cursors(emulator: RunningEmulator, cli) -> None:
    ids = {create(cli, {"AlternateIds": [{"Type": "Batch", "Value": "paging"}]})["ProfileId"]}
    ids |= {create(cli, {"AlternateIds": [{"Type": "Batch", "Value": "paging"}]})["ProfileId"]}
    ids |= {create(cli, {"AlternateIds": [{"Type": "Batch", "Value": "paging"}]})["ProfileId"]}
    query = ["--alternate-id-type", "Batch", "--alternate-id", "paging", "--limit", "2"]
    one_page = cli("-o", "json", "profiles", "search", *query)
    assert len(one_page.json) == 2
    assert "more profiles: --cursor" in one_page.stderr
    everything = cli("-o", "json", "profiles", "search", *query, "--all")
    assert {p["ProfileId"] for p in everything.json} == ids
    cursor = one_page.stderr.split("--cursor ")[1].split(",")[0]
    rest = cli("-o", "json", "profiles", "search", *query, "--cursor", cursor)
    assert {p["ProfileId"] for p in one_page.json + rest.json} == ids


def test_profiles_search_all_streams_the_same_json_and_table_as_one_page(
    emulator: RunningEmulator, cli
) -> None:
    for _ in range(3):
        create(cli, {**ADA, "AlternateIds": [{"Type": "Batch", "Value": "streamed"}]})
    query = ["--alternate-id-type", "Batch", "--alternate-id", "streamed"]
    one_page = cli("-o", "json", "profiles", "search", *query)
    streamed = cli("-o", "json", "profiles", "search", *query, "--all", "--limit", "1")
    assert streamed.exit_code == 0, streamed.output
    assert streamed.stdout == one_page.stdout  # page by page, the same text as one array
    table = cli("profiles", "search", *query, "--all", "--limit", "1")
    assert table.stdout == cli("profiles", "search", *query).stdout
    assert table.stdout.count("Ada Lovelace") == 3
    nothing = cli("-o", "json", "profiles", "search", "--email", "nobody@example.com", "--all")
    assert (nothing.exit_code, nothing.json) == (0, [])
    assert "no profiles" in cli("profiles", "search", "--email", "no@example.com", "--all").stderr


def test_profiles_search_all_into_a_file_from_an_interactive_shell(
    emulator: RunningEmulator, cli
) -> None:
    ids = [create(cli, {**ADA, "Tags": ["redirected"]})["ProfileId"] for _ in range(2)]
    result = run_with_terminal_stderr("-o", "json", "profiles", "search", "--all", "--limit", "1")
    assert result.exit_code == 0, result.stderr
    assert set(ids) <= {profile["ProfileId"] for profile in result.json}
    assert "ProfileId" not in result.stderr


def test_profiles_replace_emits_only_profile_replaced(emulator: RunningEmulator, cli) -> None:
    profile = create(cli)
    changed = {**profile, "Tags": ["replaced"], "Emails": []}
    result = cli(
        "-o", "json", "profiles", "replace", str(profile["ProfileId"]), "-f", "-",
        stdin=json.dumps(changed),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.json["Tags"] == ["replaced"]
    assert events_of(cli, profile["ProfileId"]) == ["profile.created", "profile.replaced"]


def test_profiles_update_with_set_pairs_changes_only_those_fields(
    emulator: RunningEmulator, cli
) -> None:
    profile = create(cli)
    profile_id = str(profile["ProfileId"])
    result = cli(
        "-o", "json", "profiles", "update", profile_id,
        "--set", "CustomerName.FirstName=Augusta", "--set", "Emails.0.IsDefault=true",
        "--set", "Tags.-=vip",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    updated = result.json
    assert updated["CustomerName"] == {"FirstName": "Augusta", "LastName": "Lovelace"}
    assert updated["Emails"][0]["IsDefault"] is True
    assert updated["Tags"] == ["founder", "vip"]
    assert updated["PhoneNumbers"] == profile["PhoneNumbers"]
    assert events_of(cli, profile["ProfileId"])[1:] == [
        "profile.updated",
        "profile.updatedfull",
        "standardfield.firstname.updated",
        "contacts.email.updated",
        "tag.added",
    ]


def test_profiles_update_merge_patch_set_clears_a_field_with_null(
    emulator: RunningEmulator, cli
) -> None:
    profile = create(cli)
    result = cli(
        "-o", "json", "profiles", "update", str(profile["ProfileId"]),
        "--set", "CustomerName.LastName=null",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.json["CustomerName"] == {"FirstName": "Ada"}


@pytest.mark.parametrize(
    "patch",
    [
        [{"op": "add", "path": "/Groups/-", "value": {"Name": "Beta"}}],
        {"Groups": [{"Name": "Beta"}]},
    ],
    ids=["json-patch", "merge-patch"],
)
def test_profiles_update_from_file_detects_the_patch_kind(
    emulator: RunningEmulator, cli, patch: Any
) -> None:
    profile = create(cli)
    result = cli(
        "-o", "json", "profiles", "update", str(profile["ProfileId"]), "--file", "-",
        stdin=json.dumps(patch),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.json["Groups"] == [{"Name": "Beta", "IsActive": True}]
    assert "group.added" in events_of(cli, profile["ProfileId"])


def test_profiles_update_patch_that_does_not_apply_exits_1(emulator: RunningEmulator, cli) -> None:
    profile = create(cli)
    patch = [{"op": "remove", "path": "/Addresses/5"}]
    result = cli(
        "profiles", "update", str(profile["ProfileId"]), "-f", "-", stdin=json.dumps(patch)
    )
    assert result.exit_code == 1
    assert "HTTP 409, PATCH" in result.stderr


def test_profiles_update_needs_file_or_set(emulator: RunningEmulator, cli) -> None:
    result = cli("profiles", "update", "1001")
    assert result.exit_code == 2
    assert "pass either --file or --set" in result.stderr


def test_profiles_deactivate_then_reactivate(emulator: RunningEmulator, cli) -> None:
    profile_id = str(create(cli)["ProfileId"])
    off = cli("-o", "json", "profiles", "deactivate", profile_id, "--reason", "Moved")
    assert off.exit_code == 0, off.output
    assert off.json["IsActive"] is False
    assert off.json["ReasonCode"] == "Moved"
    on = cli("-o", "json", "profiles", "reactivate", profile_id)
    assert on.json["IsActive"] is True
    assert events_of(cli, int(profile_id))[1:] == ["profile.deactivated", "profile.reactivated"]


def test_profiles_delete_without_yes_off_a_terminal_refuses(emulator: RunningEmulator, cli) -> None:
    profile_id = str(create(cli)["ProfileId"])
    refused = cli("profiles", "delete", profile_id)
    assert refused.exit_code == 2
    assert "pass --yes" in refused.stderr
    assert cli("profiles", "get", profile_id).exit_code == 0


def test_profiles_delete_with_yes_deletes_for_good(emulator: RunningEmulator, cli) -> None:
    profile_id = str(create(cli)["ProfileId"])
    result = cli("-o", "json", "profiles", "delete", profile_id, "--reason-code", "GDPR", "--yes")
    assert result.exit_code == 0, result.output
    assert result.json == {"profile_id": int(profile_id), "deleted": True}
    assert cli("profiles", "get", profile_id).exit_code == 4
    assert events_of(cli, int(profile_id))[-1] == "profile.deleted"


# -- import ----------------------------------------------------------------------------------------
def test_profiles_import_ndjson_creates_and_replaces_without_events(
    emulator: RunningEmulator, cli, tmp_path: Path
) -> None:
    existing = create(cli)
    records = [
        {"ProfileId": existing["ProfileId"], "Tags": ["imported"]},
        *({"AlternateIds": [{"Type": "Import", "Value": f"n{n}"}]} for n in range(5)),
    ]
    path = tmp_path / "profiles.ndjson"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    result = cli("-o", "json", "profiles", "import", str(path), "--chunk-size", "2")
    assert result.exit_code == 0, result.output
    job = result.json
    assert job["State"] == "Completed"
    assert (job["TotalRecords"], job["CreatedProfiles"], job["ReplacedProfiles"]) == (6, 5, 1)
    assert "no events were generated" in result.stderr
    assert events_of(cli, existing["ProfileId"]) == ["profile.created"]
    found = cli("-o", "json", "profiles", "search", "--alternate-id-type", "Import",
                "--alternate-id", "n3")  # fmt: skip
    assert len(found.json) == 1


def test_profiles_import_shows_record_errors_and_strict_exits_1(
    emulator: RunningEmulator, cli
) -> None:
    records = [{"Tags": ["ok"]}, {"Emails": [{"Address": "broken"}]}, {"ProfileId": 99999999}]
    result = cli("profiles", "import", "-", stdin=json.dumps(records))
    assert result.exit_code == 0, result.output
    assert "warning: record 2:" in result.stderr
    assert "warning: record 3:" in result.stderr
    assert "failed" in result.stdout
    strict = cli("profiles", "import", "-", "--strict", stdin=json.dumps(records))
    assert strict.exit_code == 1
    assert "2 records failed" in strict.stderr


def test_profiles_import_keeps_every_request_under_the_size_limit(
    emulator: RunningEmulator, cli, tmp_path: Path
) -> None:
    # 600 records of ~3 KB: 500 of them (the default chunk) would make a 1.5 MB request, which
    # the service refuses (413). Chunks are cut by size as well, so all of them go in.
    records = [
        {"AlternateIds": [{"Type": "Big", "Value": f"b{n}"}], "Tags": [f"t{n}-" + "x" * 3000]}
        for n in range(600)
    ]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(records))
    result = cli("-o", "json", "profiles", "import", str(path))
    assert result.exit_code == 0, result.output
    assert (result.json["TotalRecords"], result.json["CreatedProfiles"]) == (600, 600)


def test_profiles_import_of_a_record_over_the_request_limit_exits_2_before_sending(
    emulator: RunningEmulator, cli
) -> None:
    small = {"AlternateIds": [{"Type": "Limit", "Value": "small"}]}
    records = [small, {"Tags": ["y" * (1024 * 1024)]}]
    result = cli("profiles", "import", "-", stdin=json.dumps(records))
    assert result.exit_code == 2, result.output
    assert "record 2 is 1,048,589 bytes" in result.stderr  # {"Tags":["y…y"]}
    assert "at most 1,048,576 bytes" in result.stderr
    found = cli("-o", "json", "profiles", "search", "--alternate-id-type", "Limit",
                "--alternate-id", "small")  # fmt: skip
    assert found.json == []  # nothing was sent


def test_profiles_import_of_a_file_without_records_exits_2(emulator: RunningEmulator, cli) -> None:
    result = cli("profiles", "import", "-", stdin="[]")
    assert result.exit_code == 2
    assert "holds no records" in result.stderr


# -- bodies that are JSON but cannot be sent -------------------------------------------------------
BEYOND_64_BITS = "100000000000000000000"
NESTED_300 = "[" * 300 + "]" * 300
NESTED_2000 = "[" * 2000 + "]" * 2000
LONE_SURROGATE = '"\\ud800"'
UNSENDABLE = [
    (BEYOND_64_BITS, "cannot be sent: Integer exceeds 64-bit range"),
    (NESTED_300, "cannot be sent: it is nested more than 254 levels deep"),
    # Python 3.11's json stops at its recursion limit ("is nested too deeply"); 3.12 and later
    # parse it, and the send check refuses it ("nested more than 254 levels deep").
    (NESTED_2000, "nested"),
    (LONE_SURROGATE, "cannot be sent: str is not valid UTF-8: surrogates not allowed"),
]


def assert_usage_line(result, expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert "internal error" not in lines[0]


@pytest.mark.parametrize(("value", "expected"), UNSENDABLE)
def test_profiles_create_with_a_value_json_cannot_send_exits_2(
    emulator: RunningEmulator, cli, value: str, expected: str
) -> None:
    result = cli("profiles", "create", "--file", "-", stdin=f'{{"Tags": {value}}}')
    assert_usage_line(result, expected)
    assert "stdin" in result.stderr


@pytest.mark.parametrize(("value", "expected"), UNSENDABLE)
def test_profiles_update_with_a_value_json_cannot_send_exits_2(
    emulator: RunningEmulator, cli, value: str, expected: str
) -> None:
    profile_id = str(create(cli)["ProfileId"])
    assert_usage_line(cli("profiles", "update", profile_id, "--set", f"Tags={value}"), expected)
    merge = cli("profiles", "update", profile_id, "-f", "-", stdin=f'{{"Tags": {value}}}')
    assert_usage_line(merge, expected)
    assert cli("-o", "json", "profiles", "get", profile_id).json["Tags"] == ["founder"]


@pytest.mark.parametrize(("value", "expected"), UNSENDABLE)
def test_profiles_import_with_a_value_json_cannot_send_exits_2(
    emulator: RunningEmulator, cli, value: str, expected: str
) -> None:
    records = f'{{"Tags": ["ok"]}}\n{{"Tags": {value}}}\n'
    assert_usage_line(cli("profiles", "import", "-", stdin=records), expected)
    array = cli("profiles", "import", "-", stdin=f'[{{"Tags": ["ok"]}}, {{"Tags": {value}}}]')
    assert_usage_line(array, expected)
    assert "record 2" in array.stderr or "nested too deeply" in array.stderr


# Python's json module reads these, but they are not JSON (NaN, Infinity) or not a double (1e400):
# sent, they would silently become null.
NOT_STRICT_JSON = [
    ("NaN", "NaN is not JSON"),
    ("-Infinity", "-Infinity is not JSON"),
    ("1e400", "the number 1e400 is beyond what JSON numbers can carry here"),
]


@pytest.mark.parametrize(("value", "expected"), NOT_STRICT_JSON)
def test_profiles_create_and_import_refuse_numbers_json_has_not(
    emulator: RunningEmulator, cli, value: str, expected: str
) -> None:
    created = cli("profiles", "create", "--file", "-", stdin=f'{{"Tags": ["a"], "Score": {value}}}')
    assert_usage_line(created, expected)
    imported = cli("profiles", "import", "-", stdin=f'{{"Tags": ["ok"], "Score": {value}}}\n')
    assert_usage_line(imported, expected)


def test_profiles_update_set_unknown_field_suggests_the_near_one_before_any_request(cli) -> None:
    result = cli("profiles", "update", "1004", "--set", "Emial=x")  # no emulator: no request
    assert result.exit_code == 2
    assert "'Emial' is not a profile field (did you mean 'Emails'?)" in result.stderr
    assert "Extra inputs" not in result.stderr
