"""Settings changes: KEY=VALUE parsing and the range check made before anything is sent."""

from __future__ import annotations

import pytest

from prefctl.api.settings import check_settings, parse_changes
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
