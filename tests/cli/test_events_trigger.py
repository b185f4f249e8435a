"""``prefctl events trigger`` and ``prefctl events list`` against a real emulator (every catalog type
is produced in tests/api/test_trigger.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from prefctl.emulator.serve import RunningEmulator

# One or two types of each filtered entity and kind of change (all of them take --filter alike).
FILTERED_TYPES = [
    "preference.added",
    "preference.archived",
    "consent.updated",
    "consent.elementassociation.created",
    "consent.filterassociation.deactivated",
    "contacts.email.updated",
    "contacts.phone.added",
    "contacts.address.deleted",
    "contacts.alternateid.updated",
    "contacts.customertype.updated",
    "customfield.deleted",
    "group.updated",
]


def listed(cli, *args: str) -> list[dict[str, Any]]:
    result = cli("-o", "json", "events", "list", "--all", *args)
    assert result.exit_code == 0, result.output
    events: list[dict[str, Any]] = result.json
    return events


@pytest.mark.parametrize("event_type", FILTERED_TYPES)
def test_events_trigger_filter_value_is_what_subscription_filters_match(
    emulator: RunningEmulator, cli, event_type: str
) -> None:
    value = "Weekly Digest" if event_type.startswith("preference.") else "Work"
    result = cli("-o", "json", "events", "trigger", event_type, "--filter", value)
    assert result.exit_code == 0, result.output
    event_id = result.json["event_ids"][0]
    (event,) = [
        e for e in listed(cli, "--type", event_type, "--since", "1h") if e["EventId"] == event_id
    ]
    assert value in json.dumps(event["Data"]) + json.dumps(event.get("PreviousData"))


def test_events_trigger_on_a_given_profile_prints_event_ids_one_per_line(
    emulator: RunningEmulator, cli
) -> None:
    created = cli("-o", "json", "profiles", "create", "-f", "-", stdin='{"Tags": ["mine"]}')
    profile_id = str(created.json["ProfileId"])
    result = cli("events", "trigger", "contacts.email.deleted", "--profile-id", profile_id)
    assert result.exit_code == 0, result.output
    (event_id,) = result.stdout.split()
    stored = listed(cli, "--profile-id", profile_id)
    assert [e["EventType"] for e in stored if e["EventId"] == event_id] == [
        "contacts.email.deleted"
    ]
    assert f"contacts.email.deleted on profile {profile_id}: 1 event" in result.stderr
    profile = cli("-o", "json", "profiles", "get", profile_id).json
    assert profile["Tags"] == ["mine"]
    assert profile["Emails"] == []


def test_events_trigger_deleting_a_given_profile_needs_yes(emulator: RunningEmulator, cli) -> None:
    created = cli("-o", "json", "profiles", "create", "-f", "-", stdin='{"Tags": ["keep"]}')
    profile_id = str(created.json["ProfileId"])
    refused = cli("events", "trigger", "profile.deleted", "--profile-id", profile_id)
    assert refused.exit_code == 2
    assert cli("profiles", "get", profile_id).exit_code == 0
    done = cli("events", "trigger", "profile.deleted", "--profile-id", profile_id, "--yes")
    assert done.exit_code == 0, done.output
    assert cli("profiles", "get", profile_id).exit_code == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["contacts.mail.added"], "unknown event type 'contacts.mail.added'"),
        (["tag.added", "--filter", "Work"], "takes no filter value"),
        (["profile.created", "--profile-id", "1001"], "--profile-id does not apply"),
    ],
)
def test_events_trigger_bad_input_exits_2(
    emulator: RunningEmulator, cli, args: list[str], message: str
) -> None:
    result = cli("events", "trigger", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_events_trigger_of_a_missing_profile_exits_4(emulator: RunningEmulator, cli) -> None:
    result = cli("events", "trigger", "tag.added", "--profile-id", "987654321")
    assert result.exit_code == 4


def test_events_list_filters_by_type_and_time_and_pages(emulator: RunningEmulator, cli) -> None:
    first = cli("-o", "json", "events", "trigger", "group.added").json
    profile_id = str(first["profile_id"])
    for _ in range(2):
        cli("events", "trigger", "tag.added", "--profile-id", profile_id)
    tags = listed(cli, "--profile-id", profile_id, "--type", "tag.added")
    assert len(tags) == 2
    assert all(
        set(e) >= {"EventId", "EventType", "ProfileId", "OriginalEventTime", "Data"} for e in tags
    )
    page = cli("-o", "json", "events", "list", "--profile-id", profile_id, "--limit", "2")
    assert len(page.json) == 2
    assert "more events: --cursor" in page.stderr
    assert listed(cli, "--profile-id", profile_id, "--until", "2000-01-01T00:00:00Z") == []
    table = cli("events", "list", "--profile-id", profile_id, "--type", "group.added")
    assert "group.added" in table.stdout
    assert first["event_ids"][0] in table.stdout


def test_events_list_bad_since_exits_2(emulator: RunningEmulator, cli) -> None:
    result = cli("events", "list", "--since", "yesterday")
    assert result.exit_code == 2
    assert "--since 'yesterday'" in result.stderr


def test_events_list_by_subscription_shows_what_it_was_sent(emulator: RunningEmulator, cli) -> None:
    from prefctl.store import subscriptions
    from prefctl.store.db import open_store

    created = cli(
        "-o", "json", "subscriptions", "create", "--name", "weekly",
        "--url", "http://127.0.0.1:9/weekly", "-e", "preference.added:Weekly Digest", "--no-wait",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    # No receiver here: mark the handshake done, as a receiver answering it would.
    with open_store(emulator.store_path) as conn:
        subscriptions.set_provisioning_state(conn, created.json["Id"], "Succeeded", now=0)
    matching = cli(
        "-o", "json", "events", "trigger", "preference.added", "--filter", "Weekly Digest"
    )
    other = cli("-o", "json", "events", "trigger", "preference.added", "--filter", "Release Notes")
    sent = listed(cli, "--subscription", "weekly")
    assert [e["EventId"] for e in sent] == matching.json["event_ids"]
    assert other.json["event_ids"][0] not in [e["EventId"] for e in sent]
    assert sent[0]["SubscriptionId"] == created.json["Id"]
    assert "EventTime" in sent[0]


def test_events_list_all_as_a_table_shows_every_page(emulator: RunningEmulator, cli) -> None:
    created = cli("-o", "json", "profiles", "create", "-f", "-", stdin='{"Tags": ["paged"]}')
    profile_id = str(created.json["ProfileId"])
    for _ in range(2):
        cli("events", "trigger", "tag.added", "--profile-id", profile_id)
    table = cli("events", "list", "--profile-id", profile_id, "--all", "--limit", "1")
    assert table.exit_code == 0, table.output
    assert table.stdout == cli("events", "list", "--profile-id", profile_id).stdout
    assert table.stdout.count("tag.added") == 2
    assert "profile.created" in table.stdout


def test_events_trigger_updatedfull_with_emit_updated_full_off_names_the_setting(
    emulator: RunningEmulator, cli
) -> None:
    assert cli("settings", "set", "EmitUpdatedFull=false").exit_code == 0
    try:
        result = cli("events", "trigger", "profile.updatedfull")
    finally:
        assert cli("settings", "set", "EmitUpdatedFull=true").exit_code == 0

    assert result.exit_code == 1, result.output
    assert "produced no profile.updatedfull event" in result.stderr
    assert "prefctl settings set EmitUpdatedFull=true" in result.stderr
