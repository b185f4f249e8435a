"""``prefctl api METHOD PATH`` against a real emulator."""

from __future__ import annotations

import json
from pathlib import Path

from prefctl.emulator.serve import RunningEmulator
from tests.helpers import run_cli

PROFILE = {"CustomerName": {"FirstName": "Ann"}, "Emails": [{"Address": "ann@example.com"}]}


def test_api_get_prints_the_answer_as_one_json_line_in_a_pipe(emulator: RunningEmulator) -> None:
    result = run_cli("api", "get", "programs")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("\n") == 1
    assert json.loads(result.stdout) == run_cli("api", "GET", "/programs").json


def test_api_post_with_data_from_text_file_and_stdin(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    created = run_cli("api", "POST", "profiles", "--data", json.dumps(PROFILE))
    assert created.exit_code == 0, created.stderr
    profile_id = created.json["ProfileId"]
    body = tmp_path / "patch.json"
    body.write_text('{"CustomerName": {"FirstName": "Anna"}}')
    patched = run_cli("api", "PATCH", f"profiles/{profile_id}", "--data", f"@{body}")
    assert patched.exit_code == 0, patched.stderr
    base = f"{emulator.api_url}/{emulator.account.service_client_id}"
    fetched = run_cli("api", "GET", f"{base}/profiles/{profile_id}")
    assert fetched.json["CustomerName"]["FirstName"] == "Anna"
    piped = run_cli(
        "api",
        "PATCH",
        f"profiles/{profile_id}",
        "-d",
        "-",
        stdin='{"CustomerName": {"FirstName": "Ann"}}',
    )
    assert piped.json["CustomerName"]["FirstName"] == "Ann"


def test_api_errors_keep_the_documented_exit_codes(emulator: RunningEmulator) -> None:
    missing = run_cli("api", "GET", "profiles/999999")
    assert missing.exit_code == 4
    assert missing.stderr.startswith("error:")
    assert run_cli("api", "FETCH", "programs").exit_code == 2
    bad = run_cli("api", "POST", "profiles", "--data", "{not json")
    assert (bad.exit_code, bad.stdout) == (2, "")
    elsewhere = run_cli("api", "GET", "https://example.com/steal")
    assert elsewhere.exit_code == 2
    assert "not under the profile's api_url" in elsewhere.stderr
