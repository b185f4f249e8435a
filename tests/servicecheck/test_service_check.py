"""``prefctl service check`` against a real emulator on 127.0.0.1: the default emulator matches in
every case; a deployment that differs is reported case by case with the setting to change; what
the check creates is deleted, also on SIGTERM; ``--no-writes`` writes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.servicecheck import CASE_NAMES, NAME_PREFIX
from tests.helpers import free_port, run_cli, wait_until

WRITE_CASES = {
    "profile_shape",
    "handshake",
    "signature_encoding",
    "event_shape",
    "event_types",
    "previous_data",
    "cleanup",
}


def _cases(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {case["name"]: case for case in report["cases"]}


def _leftovers() -> list[str]:
    """Names of subscriptions and tags of profiles the check may have left behind."""
    subs = run_cli("subscriptions", "list", "-o", "json")
    assert subs.exit_code == 0, subs.output
    names = [s["Name"] for s in subs.json if s["Name"].startswith(NAME_PREFIX)]
    profiles = run_cli("api", "GET", "/profiles?limit=200")
    assert profiles.exit_code == 0, profiles.output
    items = profiles.json.get("Profiles", profiles.json.get("Items", []))
    tags = [t for item in items for t in item.get("Tags", []) if t.startswith(NAME_PREFIX)]
    return names + [f"profile tagged {t}" for t in tags]


def test_service_check_default_emulator_every_case_matches(emulator: RunningEmulator) -> None:
    result = run_cli("service", "check", "-o", "json")

    assert result.exit_code == 0, result.output
    report = result.json
    assert [case["name"] for case in report["cases"]] == list(CASE_NAMES)
    assert [c["name"] for c in report["cases"] if c["result"] != "pass"] == []
    assert report["skipped"] == 0
    assert "profile.updatedfull" in _cases(report)["event_types"]["figures"]["event_types"]
    assert "waiting up to" in result.stderr  # the long waits are announced off a terminal
    assert _leftovers() == []


def test_service_check_table_shows_each_case_and_a_match(emulator: RunningEmulator) -> None:
    result = run_cli("service", "check", "--no-writes")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split("\t")[:2] == ["CASE", "RESULT"]
    assert "TO MATCH, SET" in lines[0]
    assert any(line.startswith("token_basic\tmatch") for line in lines)
    assert any(line.startswith("handshake\tskip") for line in lines)


def test_service_check_no_writes_skips_and_names_every_write(emulator: RunningEmulator) -> None:
    before = run_cli("settings", "get", "-o", "json").json

    result = run_cli("service", "check", "--no-writes", "-o", "json")

    assert result.exit_code == 0, result.output
    cases = _cases(result.json)
    assert {name for name, case in cases.items() if case["result"] == "skip"} == WRITE_CASES
    assert all("--no-writes" in cases[name]["reason"] for name in WRITE_CASES)
    assert "--no-writes" in cases["settings_ranges"]["reason"]
    for name in WRITE_CASES:
        assert name in result.stderr  # the skipped cases are named
    assert run_cli("subscriptions", "list", "-o", "json").json == []
    assert run_cli("settings", "get", "-o", "json").json == before


def test_service_check_junit_has_a_testcase_per_case(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    junit = tmp_path / "reports" / "service.xml"

    result = run_cli("service", "check", "--no-writes", "--junit", junit)

    assert result.exit_code == 0, result.output
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("name", "").startswith("prefctl service check ")
    assert suite.get("tests") == str(len(CASE_NAMES))
    assert suite.get("failures") == "0"
    assert suite.get("skipped") == str(len(WRITE_CASES))
    names = [case.get("name") for case in suite.iter("testcase")]
    assert names == list(CASE_NAMES)


def test_service_check_hex_profile_against_raw_emulator_differs_and_names_raw(
    emulator: RunningEmulator,
) -> None:
    assert run_cli("config", "set", "local", "webhooks.signature_encoding", "hex").exit_code == 0

    result = run_cli("service", "check", "-o", "json")

    assert result.exit_code == 1, result.output
    case = _cases(result.json)["signature_encoding"]
    assert case["result"] == "fail"
    assert case["evidence"]["setting"] == 'signature_encoding = "raw"'
    assert case["figures"]["verified_as"] == ["raw"]
    assert "signature_encoding" in result.stderr  # the failure line names the case
    assert _leftovers() == []


def test_service_check_evidence_never_shows_a_secret(emulator: RunningEmulator) -> None:
    result = run_cli("service", "check", "-o", "json")

    assert result.exit_code == 0, result.output
    account = emulator.account
    for secret in (account.client_secret, account.hashkey):
        assert secret not in result.output
    assert "eyJ" not in result.stdout  # no access token (JWT) in the evidence
    for case in result.json["cases"]:
        assert case["evidence"]["expected"], case["name"]  # every case says what it expected


def test_service_check_wrong_secret_exits_3(emulator: RunningEmulator) -> None:
    os.environ["PREFCTL_CLIENT_SECRET"] = "x" * 64
    try:
        assert run_cli("token", "clear", "--all").exit_code == 0
        result = run_cli("service", "check")
    finally:
        del os.environ["PREFCTL_CLIENT_SECRET"]

    assert result.exit_code == 3, result.output
    assert "x" * 64 not in result.output


def test_service_check_public_url_not_http_exits_2(emulator: RunningEmulator) -> None:
    result = run_cli("service", "check", "--public-url", "ftp://hooks.example.com/x")

    assert result.exit_code == 2, result.output
    assert "--public-url" in result.stderr
    assert _leftovers() == []


def test_service_check_unreachable_deployment_exits_5(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    assert run_cli("config", "set", "local", "auth_url", url).exit_code == 0
    assert run_cli("config", "set", "local", "api_url", f"{url}/api/v1").exit_code == 0
    junit = tmp_path / "service.xml"

    result = run_cli("service", "check", "--junit", junit)

    assert result.exit_code == 5, result.output
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("errors") == "1"


def test_service_check_sigterm_deletes_the_profile_and_subscription(
    emulator: RunningEmulator,
) -> None:
    # The public URL reaches nothing, so the check waits for a handshake that never comes.
    unreachable = f"http://127.0.0.1:{free_port()}/webhooks"
    prefctl = Path(sys.executable).parent / "prefctl"
    command = [str(prefctl), "service", "check", "--public-url", unreachable, "--wait", "60"]
    process = subprocess.Popen(command, env=dict(os.environ), stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _leftovers() != [], timeout=30, what="the check's subscription")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert process.returncode == 143, stderr
    assert _leftovers() == []


def test_service_check_hex_emulator_differs_and_names_the_setting(
    isolated_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = EmulatorConfig(port=free_port(), data_dir=tmp_path / "hex", signature_encoding="hex")
    running = start_in_thread(config)
    try:
        monkeypatch.setenv("PREFCTL_DATA_DIR", str(running.data_dir))
        running.write_profile(Path(os.environ["PREFCTL_CONFIG"]))
        assert (
            run_cli("config", "set", "local", "webhooks.signature_encoding", "raw").exit_code == 0
        )

        result = run_cli("service", "check", "-o", "json")
    finally:
        running.stop()

    assert result.exit_code == 1, result.output
    case = _cases(result.json)["signature_encoding"]
    assert case["result"] == "fail"
    assert case["evidence"]["setting"] == 'signature_encoding = "hex"'
    assert case["figures"]["verified_as"] == ["hex"]
    others = [c["name"] for c in result.json["cases"] if c["result"] == "fail"]
    assert others == ["signature_encoding"]


def test_emulator_start_with_an_unknown_signature_encoding_is_a_usage_error(
    isolated_env: Path, tmp_path: Path
) -> None:
    result = run_cli(
        "emulator", "start", "--data-dir", str(tmp_path / "bad"), "--signature-encoding", "b64"
    )

    assert result.exit_code == 2
    assert "signature encoding must be raw or hex, not 'b64'" in result.stderr
    assert not (tmp_path / "bad" / "emulator.db").exists()


def test_service_check_emulator_without_updatedfull_differs_and_names_the_setting(
    emulator: RunningEmulator,
) -> None:
    # The deployment plays the spec's example list exactly; the profile expects the default.
    assert run_cli("settings", "set", "EmitUpdatedFull=false").exit_code == 0
    try:
        result = run_cli("service", "check", "-o", "json")
    finally:
        assert run_cli("settings", "set", "EmitUpdatedFull=true").exit_code == 0

    assert result.exit_code == 1, result.output
    case = _cases(result.json)["event_types"]
    assert case["result"] == "fail"
    assert case["evidence"]["setting"] == "EmitUpdatedFull=false"
    assert "prefctl settings set EmitUpdatedFull=false" in case["reason"]
    assert "profile.updatedfull" not in case["figures"]["event_types"]
    others = [c["name"] for c in result.json["cases"] if c["result"] == "fail"]
    assert others == ["event_types"]
    assert _leftovers() == []
