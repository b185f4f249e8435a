"""``prefctl settings get/set`` against a real emulator."""

from __future__ import annotations

import pytest

from prefctl.emulator.serve import RunningEmulator
from prefctl.models.settings import SETTING_RANGES
from tests.helpers import free_port


def test_settings_get_json_is_the_api_object(emulator: RunningEmulator, cli) -> None:
    result = cli("-o", "json", "settings", "get")
    assert result.exit_code == 0, result.output
    assert set(result.json) == {*SETTING_RANGES, "AllowHttpWebhooks", "EmitUpdatedFull"}


def test_settings_get_table_shows_ranges(emulator: RunningEmulator, cli) -> None:
    result = cli("settings", "get")
    assert "MaxConcurrentRequests" in result.stdout
    assert "50–5000 events" in result.stdout


def test_settings_set_changes_only_the_given_settings(emulator: RunningEmulator, cli) -> None:
    before = cli("-o", "json", "settings", "get").json
    result = cli("-o", "json", "settings", "set", "Duration=7", "max-delivery-attempts=12")
    assert result.exit_code == 0, result.output
    assert result.json == {**before, "Duration": 7, "MaxDeliveryAttempts": 12}
    assert cli("-o", "json", "settings", "get").json == result.json
    assert "set Duration=7, MaxDeliveryAttempts=12" in result.stderr


def test_settings_set_out_of_range_exits_2_naming_the_range(emulator: RunningEmulator, cli) -> None:
    before = cli("-o", "json", "settings", "get").json
    result = cli("settings", "set", "MaxConcurrentRequests=10")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: MaxConcurrentRequests=10 is out of range 50–5000 events"
    assert cli("-o", "json", "settings", "get").json == before


def test_settings_set_against_the_current_values_blames_the_changed_one(
    emulator: RunningEmulator, cli
) -> None:
    above = cli("settings", "set", "AlertThresholdMin=20")
    assert above.exit_code == 2
    assert (
        "AlertThresholdMin=20 is out of range: AlertThresholdMin must be at most " in above.stderr
    )
    assert cli("settings", "set", "AlertThresholdMin=20", "AlertThresholdMax=25").exit_code == 0
    below = cli("settings", "set", "AlertThresholdMax=10")
    assert below.exit_code == 2
    assert "AlertThresholdMax must be at least AlertThresholdMin (20)" in below.stderr
    assert cli("settings", "set", "AlertThresholdMin=1", "AlertThresholdMax=15").exit_code == 0


def test_settings_set_checks_ranges_before_any_request(
    emulator: RunningEmulator, cli, monkeypatch
) -> None:
    monkeypatch.setenv("PREFCTL_API_URL", f"http://127.0.0.1:{free_port()}/api/v1")
    assert cli("settings", "set", "Duration=301").exit_code == 2
    assert cli("settings", "set", "Duration=3").exit_code == 5


def test_settings_set_unknown_key_exits_2_listing_the_known_ones(
    emulator: RunningEmulator, cli
) -> None:
    result = cli("settings", "set", "Speed=3")
    assert result.exit_code == 2
    assert "unknown setting 'Speed'" in result.stderr
    assert "MaxConcurrentRequests" in result.stderr


def test_settings_set_beyond_64_bits_is_a_range_error(emulator: RunningEmulator, cli) -> None:
    before = cli("-o", "json", "settings", "get").json
    result = cli("settings", "set", "AlertFrequencyMax=100000000000000000000")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "error: AlertFrequencyMax=100000000000000000000 is out of range "
        "1–9223372036854775807 minutes"
    )
    assert cli("-o", "json", "settings", "get").json == before


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (
            ["Duration=\u0665"],
            "error: Duration must be a whole number (1–300 seconds), not '\u0665'",
        ),
        (["Duration=1_0"], "error: Duration must be a whole number (1–300 seconds), not '1_0'"),
        (["Duration=5", "duration=6"], "error: Duration is given twice"),
    ],
)
def test_settings_set_refuses_non_ascii_digits_and_a_setting_given_twice(
    emulator: RunningEmulator, cli, pairs: list[str], message: str
) -> None:
    before = cli("-o", "json", "settings", "get").json
    result = cli("settings", "set", *pairs)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[0].startswith(message)
    assert cli("-o", "json", "settings", "get").json == before


def test_verbose_logs_each_request_on_stderr_and_never_the_token(
    emulator: RunningEmulator, cli
) -> None:
    result = cli("-v", "-o", "json", "settings", "get")
    assert result.exit_code == 0, result.output
    assert result.json["Duration"] >= 1  # stdout stays data only
    [line] = [line for line in result.stderr.splitlines() if "/settings/webhooks" in line]
    assert "GET " in line
    assert line.endswith("→ 200")
    token = cli("token", "get").stdout.strip()
    assert token
    assert token not in result.stderr


def test_settings_set_allow_http_webhooks_true_lets_a_plain_http_subscription_in(
    emulator: RunningEmulator, cli
) -> None:
    # No subscription is made for the refused URL; the one accepted stays on this machine.
    url = f"http://0.0.0.0:{free_port()}/in"
    create = ("subscriptions", "create", "--no-wait", "--name", "lan", "-e", "profile.created")
    refused = cli(*create, "--url", url)
    assert refused.exit_code == 1, refused.output
    assert "HTTPS is mandatory" in refused.stderr
    assert "AllowHttpWebhooks" in refused.stderr

    result = cli("-o", "json", "settings", "set", "AllowHttpWebhooks", "true")

    assert result.exit_code == 0, result.output
    assert result.json["AllowHttpWebhooks"] is True
    assert "set AllowHttpWebhooks=true" in result.stderr
    try:
        accepted = cli("-o", "json", *create, "--url", url)
        assert accepted.exit_code == 0, accepted.output
        assert cli("subscriptions", "delete", "lan", "--yes").exit_code == 0
    finally:
        assert cli("settings", "set", "AllowHttpWebhooks=false").exit_code == 0


def test_settings_get_table_shows_a_switch_as_true_or_false(emulator: RunningEmulator, cli) -> None:
    result = cli("settings", "get")

    assert result.exit_code == 0, result.output
    [line] = [line for line in result.stdout.splitlines() if line.startswith("EmitUpdatedFull")]
    assert line.split("\t") == ["EmitUpdatedFull", "true", "true or false", "true"]


def test_settings_set_switch_not_a_boolean_exits_2_in_words(emulator: RunningEmulator, cli) -> None:
    before = cli("-o", "json", "settings", "get").json

    result = cli("settings", "set", "EmitUpdatedFull=maybe")

    assert result.exit_code == 2, result.output
    message = "error: EmitUpdatedFull must be true or false, not 'maybe'"
    assert result.stderr.splitlines()[0].startswith(message)
    assert cli("-o", "json", "settings", "get").json == before
