"""Settings changes: KEY=VALUE parsing and the range check made before anything is sent."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest

from prefctl.api.client import ApiClient
from prefctl.api.settings import SettingsApi, check_settings, parse_changes
from prefctl.errors import UsageError
from prefctl.models.settings import SETTING_RANGES


def test_parse_changes_accepts_wire_names_in_any_case_and_kebab_case() -> None:
    changes = parse_changes(["Duration=5", "max-delivery-attempts=10", "alertthresholdmin=2"])
    assert changes == {"Duration": 5, "MaxDeliveryAttempts": 10, "AlertThresholdMin": 2}


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("Duration", "is not KEY=VALUE"),
        ("Speed=3", "unknown setting 'Speed'"),
        ("Duration=fast", "Duration must be a whole number (1–300 seconds), not 'fast'"),
    ],
)
def test_parse_changes_bad_pair_is_usage_error(pair: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_changes([pair])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"Duration": 0}, "Duration=0 is out of range 1–300 seconds"),
        (
            {"MaxConcurrentRequests": 5001},
            "MaxConcurrentRequests=5001 is out of range 50–5000 events",
        ),
        ({"AlertFrequencyMin": 0}, "AlertFrequencyMin=0 is out of range 1 or more minutes"),
        (
            {"AlertThresholdMin": 20, "AlertThresholdMax": 10},
            "AlertThresholdMax=10 is out of range: AlertThresholdMax must be at least "
            "AlertThresholdMin (20)",
        ),
    ],
)
def test_check_settings_names_the_setting_and_its_range(
    settings: dict[str, int], message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        check_settings(settings)
    assert str(caught.value) == message


def test_check_settings_accepts_every_default() -> None:
    check_settings({name: r.default for name, r in SETTING_RANGES.items()})


def test_check_settings_reports_the_changed_setting_first() -> None:
    current = {"AlertFrequencyMin": 5, "AlertFrequencyMax": 30}
    with pytest.raises(UsageError, match=r"^AlertFrequencyMin=0"):
        check_settings({**current, "AlertFrequencyMin": 0}, ["AlertFrequencyMin"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["EmitUpdatedFull=false"], {"EmitUpdatedFull": False}),
        (["allow-http-webhooks=TRUE"], {"AllowHttpWebhooks": True}),
        (["AllowHttpWebhooks", "yes", "Duration=5"], {"AllowHttpWebhooks": True, "Duration": 5}),
        (["emitupdatedfull", "0"], {"EmitUpdatedFull": False}),
    ],
)
def test_parse_changes_switches_take_true_or_false_also_as_key_value(
    args: list[str], expected: dict[str, object]
) -> None:
    changes = parse_changes(args)

    assert changes == expected
    assert all(type(changes[name]) is type(value) for name, value in expected.items())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["EmitUpdatedFull=maybe"], "EmitUpdatedFull must be true or false, not 'maybe'"),
        (["AllowHttpWebhooks", "Duration=5"], "'AllowHttpWebhooks' is not KEY=VALUE"),
    ],
)
def test_parse_changes_switch_not_a_boolean_is_usage_error(args: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_changes(args)


def test_settings_update_a_switch_on_a_deployment_without_it_is_usage_error_unsent() -> None:
    """A real deployment shows the spec's eight settings only: the emulator's switches are not
    sent there (a local stand-in answering as such a deployment)."""
    puts: list[str] = []

    class Deployment(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({name: r.default for name, r in SETTING_RANGES.items()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:
            puts.append(self.path)
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Deployment)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = ApiClient(f"http://127.0.0.1:{server.server_address[1]}/api/v1", "ACME")
        with pytest.raises(UsageError, match="EmitUpdatedFull is an emulator-only setting"):
            SettingsApi(client).update({"EmitUpdatedFull": False})
    finally:
        server.shutdown()
        server.server_close()

    assert puts == []
