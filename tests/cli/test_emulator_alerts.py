"""``prefctl emulator alerts enable/disable``: the support team's switch, on the emulator's store."""

from __future__ import annotations

from typing import Any

import pytest

from prefctl.emulator.serve import RunningEmulator


@pytest.fixture
def subscription(emulator: RunningEmulator, cli) -> dict[str, Any]:
    result = cli(
        "-o", "json", "subscriptions", "create", "--name", "alerted",
        "--url", "http://127.0.0.1:9/alerted", "-e", "tag.deleted", "--no-wait",
    )  # fmt: skip
    if result.exit_code == 1 and ("already sends" in result.stderr or "named" in result.stderr):
        return dict(cli("-o", "json", "subscriptions", "get", "alerted").json)
    assert result.exit_code == 0, result.output
    return dict(result.json)


def test_alerts_enable_sets_recipients_that_the_api_then_shows(
    subscription: dict[str, Any], cli
) -> None:
    result = cli(
        "-o", "json", "emulator", "alerts", "enable", "--subscription", "alerted",
        "--recipient", "ops@example.com", "-r", "oncall@example.com",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.json == {
        "subscription_id": subscription["Id"],
        "name": "alerted",
        "url": "http://127.0.0.1:9/alerted",
        "alerts_enabled": True,
        "recipients": ["ops@example.com", "oncall@example.com"],
    }
    shown = cli("-o", "json", "subscriptions", "get", "alerted").json
    assert shown["Alerts"] == {
        "Enabled": True,
        "Recipients": ["ops@example.com", "oncall@example.com"],
    }
    assert "go to ops@example.com, oncall@example.com" in result.stderr


def test_alerts_disable_turns_them_off(subscription: dict[str, Any], cli) -> None:
    cli("emulator", "alerts", "enable", "-s", "alerted", "-r", "ops@example.com")
    result = cli("emulator", "alerts", "disable", "--subscription", str(subscription["Id"]))
    assert result.exit_code == 0, result.output
    shown = cli("-o", "json", "subscriptions", "get", "alerted").json
    assert shown["Alerts"] == {"Enabled": False, "Recipients": []}


def test_alerts_enable_with_a_bad_address_exits_2(subscription: dict[str, Any], cli) -> None:
    result = cli("emulator", "alerts", "enable", "-s", "alerted", "-r", "not-an-address")
    assert result.exit_code == 2
    assert "'not-an-address' is not an email address" in result.stderr


def test_alerts_enable_of_an_unknown_subscription_exits_4(emulator: RunningEmulator, cli) -> None:
    result = cli("emulator", "alerts", "enable", "-s", "nobody", "-r", "ops@example.com")
    assert result.exit_code == 4
    assert "no subscription named 'nobody'" in result.stderr


def test_alerts_cannot_be_changed_through_the_rest_api(
    subscription: dict[str, Any], cli, tmp_path
) -> None:
    import json

    body = {
        "Name": "alerted",
        "Url": subscription["Url"],
        "Subscriptions": subscription["Subscriptions"],
        "Alerts": {"Enabled": True, "Recipients": ["sneaky@example.com"]},
    }
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    result = cli("subscriptions", "update", "alerted", "--file", str(path))
    assert result.exit_code == 1
    assert "prefctl emulator alerts" in result.stderr
