"""Account-level webhook and alert settings (spec "Limits").

``SETTING_RANGES`` (``prefctl.models.setting_ranges``) is the single source of the limits: the
pydantic fields are built from it, the CLI checks values with ``SettingRange.check`` before
sending, and the docs list it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_pascal, to_snake

from prefctl.models._base import WireModel, strict_model
from prefctl.models.setting_ranges import (
    INTEGER_MAX,
    SETTING_RANGES,
    SETTING_SWITCHES,
    SettingRange,
)

__all__ = [
    "INTEGER_MAX",
    "SETTING_RANGES",
    "SettingRange",
    "StrictWebhookSettings",
    "WebhookSettings",
]


def _field(name: str) -> Any:
    limits = SETTING_RANGES[name]
    # strict: a JSON true or "5" is not a count; the service expects integers.
    return Field(
        default=limits.default,
        ge=limits.minimum,
        le=limits.maximum,
        strict=True,
        description=limits.description,
    )


def _switch(name: str) -> Any:
    switch = SETTING_SWITCHES[name]
    # strict: a JSON true or false, not 1 or "true".
    return Field(default=switch.default, strict=True, description=switch.description)


class WebhookSettings(WireModel):
    """The account's delivery and alert settings (``GET/PUT /settings/webhooks``).

    Every field has its default, so a PUT that leaves a setting out resets it to the default.
    """

    max_concurrent_requests: int = _field("MaxConcurrentRequests")
    duration: int = _field("Duration")
    max_delivery_attempts: int = _field("MaxDeliveryAttempts")
    event_time_to_live_minutes: int = _field("EventTimeToLiveMinutes")
    alert_frequency_min: int = _field("AlertFrequencyMin")
    alert_frequency_max: int = _field("AlertFrequencyMax")
    alert_threshold_min: int = _field("AlertThresholdMin")
    alert_threshold_max: int = _field("AlertThresholdMax")
    # The emulator's own switches (docs/decisions.md); a real deployment has neither.
    allow_http_webhooks: bool = _switch("AllowHttpWebhooks")
    emit_updated_full: bool = _switch("EmitUpdatedFull")

    # Each Max is declared after its Min, so the Min is in info.data (unless it was invalid).
    @field_validator("alert_frequency_max", "alert_threshold_max")
    @classmethod
    def _not_below_min(cls, value: int, info: ValidationInfo) -> int:
        floor_name = SETTING_RANGES[to_pascal(info.field_name or "")].at_least or ""
        floor = info.data.get(to_snake(floor_name))
        if floor is not None and value < floor:
            raise ValueError(f"must be at least {floor_name} ({floor})")
        return value


if TYPE_CHECKING:
    StrictWebhookSettings = WebhookSettings
else:
    StrictWebhookSettings = strict_model(WebhookSettings)
