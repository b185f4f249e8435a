"""``prefctl programs list`` against a real emulator (seeded programs)."""

from __future__ import annotations

from prefctl.emulator.serve import RunningEmulator


def test_programs_list_json_prints_programs_as_the_api_returns_them(
    emulator: RunningEmulator, cli
) -> None:
    result = cli("-o", "json", "programs", "list")
    assert result.exit_code == 0, result.output
    newsletter = next(p for p in result.json if p["Name"] == "Newsletter")
    assert set(newsletter) == {"ProgramId", "Name", "ProgramType", "Filters", "Channels"}
    assert {"FilterId": 1, "Name": "Weekly Digest"} in newsletter["Filters"]


def test_programs_list_table_shows_filters_and_channels(emulator: RunningEmulator, cli) -> None:
    result = cli("programs", "list")
    assert result.exit_code == 0, result.output
    assert "Weekly Digest" in result.stdout
    assert "Email, SMS, Post" in result.stdout


def test_programs_list_type_filters_in_any_case(emulator: RunningEmulator, cli) -> None:
    result = cli("-o", "json", "programs", "list", "--type", "informational")
    assert result.exit_code == 0, result.output
    assert sorted(p["Name"] for p in result.json) == ["Newsletter", "Product Updates"]


def test_programs_list_of_unknown_type_is_empty(emulator: RunningEmulator, cli) -> None:
    result = cli("programs", "list", "--type", "Nope")
    assert result.exit_code == 0
    assert "no programs" in result.stderr
