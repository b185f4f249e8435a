"""``GET/PUT /settings/webhooks``: docs/policy.md ranges, 400 with field errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from prefctl.models.settings import SETTING_RANGES
from tests.emulator.routes._api import Api, assert_problem

DEFAULTS = {name: limits.default for name, limits in SETTING_RANGES.items()} | {
    "AllowHttpWebhooks": False,
    "EmitUpdatedFull": True,
}


@pytest.fixture
def settings_api(api: Api) -> Iterator[Api]:
    yield api
    api.put("/settings/webhooks", json={})  # back to the defaults for the next test


def test_settings_get_shows_every_setting_at_its_default(settings_api: Api) -> None:
    assert settings_api.get("/settings/webhooks").json() == DEFAULTS


def test_settings_put_replaces_and_resets_what_is_left_out(settings_api: Api) -> None:
    settings_api.put("/settings/webhooks", json={"MaxDeliveryAttempts": 5})

    answer = settings_api.put("/settings/webhooks", json={"Duration": 10})

    assert answer.status_code == 200
    assert answer.json() == {**DEFAULTS, "Duration": 10}
    assert settings_api.get("/settings/webhooks").json() == {**DEFAULTS, "Duration": 10}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"MaxConcurrentRequests": 49}, "MaxConcurrentRequests"),
        ({"Duration": 301}, "Duration"),
        ({"MaxDeliveryAttempts": 31}, "MaxDeliveryAttempts"),
        ({"EventTimeToLiveMinutes": 0}, "EventTimeToLiveMinutes"),
        ({"AlertThresholdMax": 5}, "AlertThresholdMax"),
        ({"AlertFrequencyMin": 10, "AlertFrequencyMax": 9}, "AlertFrequencyMax"),
        ({"Duration": "soon"}, "Duration"),
        ({"Retries": 3}, "Retries"),
    ],
)
def test_settings_put_out_of_range_is_400_naming_the_field_and_writes_nothing(
    settings_api: Api, body: dict[str, object], field: str
) -> None:
    problem = assert_problem(settings_api.put("/settings/webhooks", json=body), 400)

    assert [error["field"] for error in problem["errors"]] == [field]
    assert settings_api.get("/settings/webhooks").json() == DEFAULTS
