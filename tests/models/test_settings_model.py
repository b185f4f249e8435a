"""Account webhook settings and their ranges (docs/policy.md)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from prefctl.models._base import dump_wire
from prefctl.models.settings import SETTING_RANGES, StrictWebhookSettings, WebhookSettings

DEFAULTS = {
    "MaxConcurrentRequests": 500,
    "Duration": 1,
    "MaxDeliveryAttempts": 30,
    "EventTimeToLiveMinutes": 240,
    "AlertFrequencyMin": 5,
    "AlertFrequencyMax": 30,
    "AlertThresholdMin": 1,
    "AlertThresholdMax": 15,
}
SWITCH_DEFAULTS = {"AllowHttpWebhooks": False, "EmitUpdatedFull": True}


def _error_locations(body: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        StrictWebhookSettings.model_validate(body)
    return {str(error["loc"][0]): error["msg"] for error in caught.value.errors()}


def test_webhook_settings_empty_body_gets_design_defaults() -> None:
    assert dump_wire(WebhookSettings.model_validate({})) == DEFAULTS | SWITCH_DEFAULTS


@pytest.mark.parametrize("value", [1, "true", None])
def test_webhook_settings_switch_not_a_json_boolean_is_refused(value: object) -> None:
    assert set(_error_locations({"EmitUpdatedFull": value})) == {"EmitUpdatedFull"}


def test_setting_ranges_cover_every_field_with_the_model_default() -> None:
    assert list(SETTING_RANGES) == list(DEFAULTS)
    assert {name: r.default for name, r in SETTING_RANGES.items()} == DEFAULTS


@pytest.mark.parametrize(
    ("name", "minimum", "maximum"),
    [
        ("MaxConcurrentRequests", 50, 5000),
        ("Duration", 1, 300),
        ("MaxDeliveryAttempts", 1, 30),
        ("EventTimeToLiveMinutes", 1, 240),
        ("AlertThresholdMin", 1, 100),
        ("AlertThresholdMax", 6, 1000),
    ],
)
def test_webhook_settings_bounded_setting_accepts_edges_rejects_beyond(
    name: str, minimum: int, maximum: int
) -> None:
    # Keep the Max-over-Min rules out of the way of the edge being tested.
    base = {**DEFAULTS, "AlertThresholdMin": 1, "AlertThresholdMax": 100}
    for value in (minimum, maximum):
        assert dump_wire(StrictWebhookSettings.model_validate({**base, name: value}))[name] == value
    for value in (minimum - 1, maximum + 1):
        assert set(_error_locations({**base, name: value})) == {name}
    assert (SETTING_RANGES[name].minimum, SETTING_RANGES[name].maximum) == (minimum, maximum)


def test_webhook_settings_alert_frequency_min_must_be_positive() -> None:
    assert set(_error_locations({"AlertFrequencyMin": 0})) == {"AlertFrequencyMin"}
    assert SETTING_RANGES["AlertFrequencyMin"].maximum is None


def test_webhook_settings_frequency_max_below_min_rejected_on_max() -> None:
    errors = _error_locations({"AlertFrequencyMin": 40, "AlertFrequencyMax": 30})
    assert errors == {"AlertFrequencyMax": "Value error, must be at least AlertFrequencyMin (40)"}


def test_webhook_settings_threshold_max_below_min_rejected_on_max() -> None:
    errors = _error_locations({"AlertThresholdMin": 50, "AlertThresholdMax": 20})
    assert set(errors) == {"AlertThresholdMax"}


def test_webhook_settings_max_equal_to_min_accepted() -> None:
    settings = WebhookSettings.model_validate({"AlertFrequencyMin": 7, "AlertFrequencyMax": 7})
    assert settings.alert_frequency_max == 7


@pytest.mark.parametrize("value", [True, "5", 5.0])
def test_webhook_settings_non_integer_value_rejected(value: object) -> None:
    assert set(_error_locations({"Duration": value})) == {"Duration"}


def test_webhook_settings_strict_rejects_unknown_setting() -> None:
    assert set(_error_locations({"RetryDelay": 5})) == {"RetryDelay"}


@pytest.mark.parametrize(
    ("name", "value", "others", "message"),
    [
        ("Duration", 0, None, "Duration must be at least 1 (seconds)"),
        (
            "MaxConcurrentRequests",
            5001,
            None,
            "MaxConcurrentRequests must be at most 5000 (events)",
        ),
        (
            "AlertFrequencyMax",
            3,
            {"AlertFrequencyMin": 5},
            "AlertFrequencyMax must be at least AlertFrequencyMin (5)",
        ),
        ("AlertThresholdMax", 6, {"AlertThresholdMin": 1}, None),
        ("AlertFrequencyMin", 10_000, None, None),
    ],
)
def test_setting_range_check_reports_the_broken_limit(
    name: str, value: int, others: dict[str, int] | None, message: str | None
) -> None:
    assert SETTING_RANGES[name].check(value, others) == message
