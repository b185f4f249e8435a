"""The limits of the account's webhook and alert settings (spec "Limits"), with no pydantic:
``prefctl settings get`` and ``set`` check values against them, and ``prefctl.models.settings``
builds its fields from them.

Beside the spec's integer settings, ``SETTING_SWITCHES`` are the emulator's own true/false
account settings: choices the emulator makes where the spec leaves room (docs/decisions.md).

>>> SETTING_RANGES["Duration"].check(0)
'Duration must be at least 1 (seconds)'
>>> parse_switch("EmitUpdatedFull", "False")
False
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from prefctl.webhooks.https_rule import ALLOW_HTTP_SETTING

__all__ = [
    "ALLOW_HTTP_SETTING",
    "EMIT_UPDATED_FULL",
    "INTEGER_MAX",
    "SETTING_NAMES",
    "SETTING_RANGES",
    "SETTING_SWITCHES",
    "SettingRange",
    "SettingSwitch",
    "parse_switch",
]


# Requests carry integers as signed 64-bit JSON numbers, so a setting without a maximum of its own
# ("value above 0" in the spec) still cannot exceed this.
INTEGER_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class SettingRange:
    """Limits of one setting. ``maximum`` None means no limit of its own (``upper`` is then
    ``INTEGER_MAX``); ``at_least`` names a setting this one may not be below."""

    name: str
    minimum: int
    maximum: int | None
    default: int
    unit: str
    description: str
    at_least: str | None = None

    @property
    def upper(self) -> int:
        """The largest value accepted: ``maximum``, else the largest integer a request carries."""
        return INTEGER_MAX if self.maximum is None else self.maximum

    def check(self, value: int, others: Mapping[str, int] | None = None) -> str | None:
        """A message when ``value`` is out of range (given the settings it needs), else None."""
        if value < self.minimum:
            return f"{self.name} must be at least {self.minimum} ({self.unit})"
        if value > self.upper:
            return f"{self.name} must be at most {self.upper} ({self.unit})"
        if self.at_least is not None and others is not None and self.at_least in others:
            floor = others[self.at_least]
            if value < floor:
                return f"{self.name} must be at least {self.at_least} ({floor})"
        return None


SETTING_RANGES: Mapping[str, SettingRange] = MappingProxyType(
    {
        r.name: r
        for r in (
            SettingRange(
                "MaxConcurrentRequests", 50, 5000, 500, "events", "events attempted per cycle"
            ),
            SettingRange("Duration", 1, 300, 1, "seconds", "wait between delivery cycles"),
            SettingRange(
                "MaxDeliveryAttempts", 1, 30, 30, "attempts", "attempts before dead-lettering"
            ),
            SettingRange(
                "EventTimeToLiveMinutes", 1, 240, 240, "minutes", "age at which events dead-letter"
            ),
            SettingRange(
                "AlertFrequencyMin",
                1,
                None,
                5,
                "minutes",
                "window in which dead letters open an alert",
            ),
            SettingRange(
                "AlertFrequencyMax",
                1,
                None,
                30,
                "minutes",
                "least time between two alerts; quiet time that closes an incident",
                at_least="AlertFrequencyMin",
            ),
            SettingRange(
                "AlertThresholdMin", 1, 100, 1, "dead letters", "failures in the window to alert"
            ),
            SettingRange(
                "AlertThresholdMax",
                6,
                1000,
                15,
                "dead letters",
                "failures after which alerting pauses",
                at_least="AlertThresholdMin",
            ),
        )
    }
)


EMIT_UPDATED_FULL = "EmitUpdatedFull"


@dataclass(frozen=True, slots=True)
class SettingSwitch:
    """An emulator-only account setting that is true or false (a real deployment has none)."""

    name: str
    default: bool
    description: str


SETTING_SWITCHES: Mapping[str, SettingSwitch] = MappingProxyType(
    {
        s.name: s
        for s in (
            SettingSwitch(
                ALLOW_HTTP_SETTING,
                False,
                "emulator only: accept and deliver to plain-http webhook URLs on hosts other than "
                "loopback (a private test network; the spec makes HTTPS mandatory)",
            ),
            SettingSwitch(
                EMIT_UPDATED_FULL,
                True,
                "emulator only: send profile.updatedfull beside profile.updated on every update "
                "(false: the spec's example list exactly)",
            ),
        )
    }
)

# Every account setting, in the order ``settings get`` shows them.
SETTING_NAMES: tuple[str, ...] = (*SETTING_RANGES, *SETTING_SWITCHES)

_TRUE, _FALSE = frozenset({"true", "yes", "on", "1"}), frozenset({"false", "no", "off", "0"})


def parse_switch(name: str, text: str) -> bool:
    """``true``/``false`` (also yes/no, on/off, 1/0, any case) as a bool; ValueError with a
    message that names the switch and what it takes otherwise."""
    folded = text.strip().lower()
    if folded in _TRUE:
        return True
    if folded in _FALSE:
        return False
    raise ValueError(f"{name} must be true or false, not '{text}'")
