"""``prefctl events types / sign / verify``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prefctl.emulator.serve import RunningEmulator
from prefctl.webhooks import catalog
from tests.helpers import run_cli

HASHKEY = "test-hashkey"
VECTOR_TIMESTAMP = "2026-11-21T19:20:30.123Z"
VECTOR_SIGNATURE = (
    "j3eMBFLSl6Ch1/YBwLvVOc5FRQczd7ts9n193RzzciQPZlqwL8YCowuds1bFKGUxPLyDZigvRjxNwiOndbdcmQ=="
)
VECTOR_HEADER = f"Timestamp={VECTOR_TIMESTAMP},Signature={VECTOR_SIGNATURE}"
IDS = ("--client-id", "DEMO_CORP", "--signature-user-id", "events-signer")


@pytest.fixture
def hashkey_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFCTL_HASHKEY", HASHKEY)


@pytest.fixture
def profile_file(config_path: Path, tmp_path: Path) -> Path:
    """A profile 'local' whose Hashkey is in a file next to profiles.toml."""
    config_path.parent.mkdir(parents=True)
    (config_path.parent / "hashkey.txt").write_text(HASHKEY + "\n")
    config_path.write_text(
        'default = "local"\n'
        "[profiles.local]\n"
        'service_client_id = "DEMO_CORP"\n'
        "[profiles.local.webhooks]\n"
        'signature_user_id = "events-signer"\n'
        'hashkey_file = "hashkey.txt"\n'
    )
    os.chmod(config_path, 0o600)
    return config_path


# -- types ----------------------------------------------------------------------------------------
def test_events_types_lists_every_type_with_entity_and_filter_key() -> None:
    result = run_cli("events", "types")
    assert result.exit_code == 0, result.stderr
    for event_type in catalog.ALL_TYPES:
        assert event_type.name in result.stdout
    assert "ContactTypes" in result.stdout
    assert "(global)" in result.stdout


def test_events_types_entity_filter_is_case_insensitive() -> None:
    result = run_cli("-o", "json", "events", "types", "--entity", "consents")
    assert result.exit_code == 0, result.stderr
    rows = result.json
    assert {row["entity"] for row in rows} == {"Consents"}
    assert len(rows) == len(catalog.types_for("Consents"))
    assert rows[0] == {
        "type": "consent.added",
        "entity": "Consents",
        "filter_key": "ConsentTypes",
        "wildcard": "AllConsents",
        "previous_data": False,
        "description": catalog.event_type("consent.added").description,
    }


def test_events_types_json_marks_previous_data_and_global_entities() -> None:
    rows = {row["type"]: row for row in run_cli("-o", "json", "events", "types").json}
    assert rows["contacts.email.updated"]["previous_data"] is True
    assert rows["tag.added"]["filter_key"] is None


def test_events_types_unknown_entity_is_a_usage_error() -> None:
    result = run_cli("events", "types", "--entity", "Widgets")
    assert result.exit_code == 2
    assert "unknown entity 'Widgets'" in result.stderr
    assert "StandardFields" in result.stderr


# -- sign -----------------------------------------------------------------------------------------
@pytest.mark.usefixtures("hashkey_env")
def test_events_sign_fixed_timestamp_prints_the_vector_header() -> None:
    result = run_cli("events", "sign", *IDS, "--timestamp", VECTOR_TIMESTAMP)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == VECTOR_HEADER + "\n"


@pytest.mark.usefixtures("hashkey_env")
def test_events_sign_without_timestamp_signs_now_and_verifies() -> None:
    header = run_cli("events", "sign", *IDS).stdout.strip()
    assert header.startswith("Timestamp=20")
    assert run_cli("events", "verify", *IDS, "--header", header).exit_code == 0


@pytest.mark.usefixtures("hashkey_env")
def test_events_sign_json_gives_header_parts_and_signed_string() -> None:
    result = run_cli("-o", "json", "events", "sign", *IDS, "-t", VECTOR_TIMESTAMP)
    assert result.json == {
        "header_name": "Service-Webhook",
        "header": VECTOR_HEADER,
        "timestamp": VECTOR_TIMESTAMP,
        "signature": VECTOR_SIGNATURE,
        "signed_string": f"DEMO_CORP:events-signer:{VECTOR_TIMESTAMP}",
        "encoding": "raw",
    }


@pytest.mark.usefixtures("profile_file")
def test_events_sign_takes_credentials_from_the_profile() -> None:
    result = run_cli("events", "sign", "--timestamp", VECTOR_TIMESTAMP)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == VECTOR_HEADER


@pytest.mark.usefixtures("profile_file")
def test_events_sign_flags_override_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTHER_KEY", "another-key")
    result = run_cli(
        "events", "sign", "-t", VECTOR_TIMESTAMP, "--hashkey-env", "OTHER_KEY", "--client-id", "X"
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() != VECTOR_HEADER
    check = run_cli(
        "events",
        "verify",
        "--header",
        result.stdout.strip(),
        "--now",
        VECTOR_TIMESTAMP,
        "--client-id",
        "X",
        "--hashkey-env",
        "OTHER_KEY",
    )
    assert check.exit_code == 0, check.stderr


def test_events_sign_hashkey_file_flag_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFCTL_HASHKEY", "a-key-the-flag-must-beat")
    (tmp_path / "key").write_text(HASHKEY + "\n")
    monkeypatch.chdir(tmp_path)
    result = run_cli("events", "sign", *IDS, "-t", VECTOR_TIMESTAMP, "--hashkey-file", "key")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == VECTOR_HEADER


def test_events_sign_without_hashkey_names_where_to_put_it() -> None:
    result = run_cli("events", "sign", *IDS)
    assert result.exit_code == 2
    assert "no webhook Hashkey" in result.stderr
    assert "PREFCTL_HASHKEY" in result.stderr


@pytest.mark.usefixtures("hashkey_env")
def test_events_sign_without_signature_user_id_is_a_config_error() -> None:
    result = run_cli("events", "sign", "--client-id", "DEMO_CORP")
    assert result.exit_code == 2
    assert "signature_user_id" in result.stderr
    assert "--signature-user-id" in result.stderr


@pytest.mark.usefixtures("hashkey_env")
def test_events_sign_rejects_a_timestamp_that_is_not_rfc3339() -> None:
    result = run_cli("events", "sign", *IDS, "--timestamp", "2026-11-21 19:20")
    assert result.exit_code == 2
    assert "--timestamp" in result.stderr


def test_events_sign_has_no_flag_taking_the_hashkey_itself() -> None:
    result = run_cli("events", "sign", "--help")
    assert "--hashkey-file" in result.stdout
    assert "--hashkey " not in result.stdout
    assert run_cli("events", "sign", "--hashkey", "x").exit_code == 2


# -- verify ---------------------------------------------------------------------------------------
@pytest.mark.usefixtures("hashkey_env")
def test_events_verify_valid_header_exits_0() -> None:
    result = run_cli("events", "verify", *IDS, "-H", VECTOR_HEADER, "--now", VECTOR_TIMESTAMP)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "signature verifies" in result.stderr


@pytest.mark.usefixtures("hashkey_env")
def test_events_verify_accepts_the_header_with_its_name() -> None:
    header = f"Service-Webhook: {VECTOR_HEADER}"
    result = run_cli("events", "verify", *IDS, "-H", header, "--now", VECTOR_TIMESTAMP)
    assert result.exit_code == 0, result.stderr


@pytest.mark.usefixtures("hashkey_env")
@pytest.mark.parametrize(
    ("header", "now", "message"),
    [
        (VECTOR_HEADER, "2026-11-21T19:30:30.123Z", "600 s old"),
        (VECTOR_HEADER, "2026-11-21T19:10:30.123Z", "in the future"),
        (VECTOR_HEADER.replace("30.123Z", "31.123Z"), VECTOR_TIMESTAMP, "does not match"),
        ("Timestamp=yesterday,Signature=abc=", VECTOR_TIMESTAMP, "not RFC 3339"),
        ("", VECTOR_TIMESTAMP, "no Service-Webhook header"),
    ],
)
def test_events_verify_invalid_header_exits_1_with_one_line_reason(
    header: str, now: str, message: str
) -> None:
    result = run_cli("events", "verify", *IDS, "-H", header, "--now", now)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


@pytest.mark.usefixtures("hashkey_env")
def test_events_verify_tolerance_widens_the_window() -> None:
    args = ("events", "verify", *IDS, "-H", VECTOR_HEADER, "--now", "2026-11-21T19:30:30.123Z")
    assert run_cli(*args).exit_code == 1
    assert run_cli(*args, "--tolerance", "900").exit_code == 0


@pytest.mark.usefixtures("hashkey_env")
def test_events_verify_explain_shows_the_steps_but_never_the_hashkey() -> None:
    altered = VECTOR_HEADER.replace("30.123Z", "31.123Z")
    result = run_cli(
        "events", "verify", *IDS, "-H", altered, "--now", VECTOR_TIMESTAMP, "--explain"
    )
    assert result.exit_code == 1
    assert "DEMO_CORP:events-signer:2026-11-21T19:20:31.123Z" in result.stdout
    assert "1.000 s in the future (tolerance 300 s)" in result.stdout
    assert VECTOR_SIGNATURE in result.stdout  # the given one
    assert "parsed as" in result.stdout
    assert HASHKEY not in result.output


@pytest.mark.usefixtures("hashkey_env")
def test_events_verify_json_prints_the_explanation_valid_or_not() -> None:
    good = run_cli(
        "-o", "json", "events", "verify", *IDS, "-H", VECTOR_HEADER, "--now", VECTOR_TIMESTAMP
    )
    assert good.exit_code == 0
    assert good.json["ok"] is True
    assert good.json["signed_string"] == f"DEMO_CORP:events-signer:{VECTOR_TIMESTAMP}"
    assert good.json["age_seconds"] == 0
    bad = run_cli("-o", "json", "events", "verify", *IDS, "-H", "garbage")
    assert bad.exit_code == 1
    assert bad.json["ok"] is False
    assert bad.json["reason"] == "malformed"
    assert HASHKEY not in bad.output + good.output


@pytest.mark.usefixtures("hashkey_env")
def test_events_verify_bad_now_is_a_usage_error() -> None:
    result = run_cli("events", "verify", *IDS, "-H", VECTOR_HEADER, "--now", "noon")
    assert result.exit_code == 2
    assert "--now 'noon'" in result.stderr


def test_events_verify_explicit_unknown_profile_is_not_silently_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFCTL_HASHKEY", HASHKEY)
    result = run_cli("-p", "prod", "events", "verify", *IDS, "-H", VECTOR_HEADER)
    assert result.exit_code == 2
    assert "unknown profile 'prod'" in result.stderr


# -- list (against the emulator) ------------------------------------------------------------------
def test_events_list_unknown_type_exits_2_with_the_catalog_hint(emulator: RunningEmulator) -> None:
    result = run_cli("events", "list", "--type", "no.such")

    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "unknown event type 'no.such'" in line
    assert "'prefctl events types'" in line


def test_events_list_since_after_until_exits_2(emulator: RunningEmulator) -> None:
    result = run_cli("events", "list", "--since", "1m", "--until", "2h")

    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert "--since (" in line
    assert "is after --until (" in line


def test_events_list_known_type_and_ordered_range_exit_0(emulator: RunningEmulator) -> None:
    result = run_cli("events", "list", "--type", "tag.added", "--since", "2h", "--until", "1m")

    assert result.exit_code == 0, result.output


def test_events_list_unknown_subscription_exits_4(emulator: RunningEmulator) -> None:
    result = run_cli("events", "list", "--subscription", "nosuch")

    assert result.exit_code == 4, result.output


# -- signature encoding ---------------------------------------------------------------------------
HEX_SIGNATURE = (
    "OGY3NzhjMDQ1MmQyOTdhMGExZDdmNjAxYzBiYmQ1MzljZTQ1NDUwNzMzNzdiYjZjZjY3ZDdkZGQxY2YzNzIyNDBmNjY1"
    "YWIwMmZjNjAyYTMwYjlkYjM1NmM1Mjg2NTMxM2NiYzgzNjYyODJmNDYzYzRkYzIyM2E3NzViNzVjOTk="
)
HEX_HEADER = f"Timestamp={VECTOR_TIMESTAMP},Signature={HEX_SIGNATURE}"


@pytest.mark.usefixtures("hashkey_env")
def test_events_sign_signature_encoding_hex_prints_the_hex_vector_header() -> None:
    result = run_cli("events", "sign", *IDS, "-t", VECTOR_TIMESTAMP, "--signature-encoding", "hex")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == HEX_HEADER


def test_events_sign_takes_the_signature_encoding_from_the_profile(profile_file: Path) -> None:
    text = profile_file.read_text() + 'signature_encoding = "hex"\n'
    profile_file.write_text(text)
    result = run_cli("-o", "json", "events", "sign", "-t", VECTOR_TIMESTAMP)
    assert result.exit_code == 0, result.output
    assert (result.json["signature"], result.json["encoding"]) == (HEX_SIGNATURE, "hex")


@pytest.mark.usefixtures("hashkey_env")
def test_events_verify_hex_header_with_default_encoding_says_to_try_hex() -> None:
    result = run_cli("events", "verify", *IDS, "-H", HEX_HEADER, "--now", VECTOR_TIMESTAMP)
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "it matches Base64 of the hex digest: try --signature-encoding hex" in line
    assert 'signature_encoding = "hex"' in line


@pytest.mark.usefixtures("hashkey_env")
def test_events_verify_explain_and_json_name_the_matching_encoding() -> None:
    args = ("events", "verify", *IDS, "-H", VECTOR_HEADER, "--now", VECTOR_TIMESTAMP)
    explained = run_cli(*args, "--explain", "--signature-encoding", "hex")
    assert explained.exit_code == 1
    assert "given matches\tBase64 of the raw digest" in explained.stdout
    as_json = run_cli("-o", "json", *args, "--signature-encoding", "hex")
    assert (as_json.json["encoding"], as_json.json["matches_encoding"]) == ("hex", "raw")
    assert run_cli(*args).exit_code == 0


@pytest.mark.usefixtures("hashkey_env")
def test_events_verify_unknown_signature_encoding_is_a_usage_error() -> None:
    result = run_cli("events", "verify", *IDS, "-H", HEX_HEADER, "--signature-encoding", "b64")
    assert result.exit_code == 2
    assert "signature_encoding must be one of raw, hex, not 'b64'" in result.stderr
