"""Account webhook and alert settings over the REST API (docs/policy.md): ``/settings/webhooks``.

PUT replaces the whole record (a setting left out goes back to its default), so ``update`` reads
the current settings, applies the changes and checks every value against ``SETTING_RANGES``
*before* sending: a bad value never reaches the service, and the error names the setting and its
range. ``parse_changes`` reads ``KEY=VALUE`` pairs; keys are the wire names in any case, or
their kebab-case form (``max-concurrent-requests``). The emulator's own switches
(``SETTING_SWITCHES``: ``AllowHttpWebhooks``, ``EmitUpdatedFull``) take true or false.

    >>> SettingsApi(client).update(parse_changes(["Duration=5", "max-delivery-attempts=10"]))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from prefctl.api.client import ApiClient, Resource
from prefctl.errors import UsageError
from prefctl.models.setting_ranges import (
    SETTING_NAMES,
    SETTING_RANGES,
    SETTING_SWITCHES,
    SettingRange,
    parse_switch,
)

__all__ = [
    "SETTINGS_PATH",
    "SettingsApi",
    "check_settings",
    "describe_range",
    "parse_changes",
    "setting_name",
]

SETTINGS_PATH = "/settings/webhooks"


def describe_range(limits: SettingRange) -> str:
    """``1–300 seconds``, ``1 or more minutes``…"""
    if limits.maximum is None:
        return f"{limits.minimum} or more {limits.unit}"
    return f"{limits.minimum}–{limits.maximum} {limits.unit}"


def setting_name(key: str) -> str:
    """The wire name of ``key`` (``duration``, ``max-delivery-attempts``…); UsageError if none."""
    folded = key.strip().replace("-", "").replace("_", "").lower()
    for name in SETTING_NAMES:
        if name.lower() == folded:
            return name
    raise UsageError(f"unknown setting '{key}'", hint=f"settings: {', '.join(SETTING_NAMES)}")


_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+", re.ASCII)


def _pairs(args: list[str]) -> Iterable[tuple[str, str]]:
    """``KEY=VALUE`` arguments, or a setting's name followed by its value as the next argument
    (``AllowHttpWebhooks true``, as ``config set`` takes them)."""
    position = 0
    while position < len(args):
        arg = args[position]
        key, sep, raw = arg.partition("=")
        if not sep:
            following = args[position + 1] if position + 1 < len(args) else None
            if following is None or "=" in following:
                raise UsageError(f"'{arg}' is not KEY=VALUE", hint="e.g. Duration=5")
            key, raw = arg, following
            position += 1
        position += 1
        yield key, raw


def parse_changes(pairs: Iterable[str]) -> dict[str, int | bool]:
    """``["Duration=5"]`` → ``{"Duration": 5}``; UsageError for a bad pair, a value that is not
    a whole number in ASCII digits (``int()`` alone would take ``٥`` or ``1_0``) or, for a
    switch, not true or false, or a setting given twice (which of the two was meant?)."""
    changes: dict[str, int | bool] = {}
    for key, raw in _pairs(list(pairs)):
        name = setting_name(key)
        if name in changes:
            raise UsageError(f"{name} is given twice", hint="give each setting once")
        text = raw.strip()
        if name in SETTING_SWITCHES:
            try:
                changes[name] = parse_switch(name, raw)
            except ValueError as exc:
                raise UsageError(str(exc), hint=f"e.g. {name}=true") from None
            continue
        try:
            if not _WHOLE_NUMBER.fullmatch(text):
                raise ValueError(text)
            changes[name] = int(text)
        except ValueError:
            raise UsageError(
                f"{name} must be a whole number ({describe_range(SETTING_RANGES[name])}), "
                f"not '{raw}'"
            ) from None
    return changes


def check_settings(settings: Mapping[str, Any], changed: Iterable[str] | None = None) -> None:
    """UsageError (one line) for the first setting out of its range. The changed ones are
    checked first, and a pair that disagrees (a Max below its Min) is blamed on the one that was
    changed, so the message names what the user typed."""
    known = {k: v for k, v in settings.items() if k in SETTING_RANGES and isinstance(v, int)}
    for name, switch in SETTING_SWITCHES.items():
        if name in settings and not isinstance(settings[name], bool):
            raise UsageError(
                f"{name} must be true or false, not {settings[name]!r}",
                hint=f"{name}: {switch.description}",
            )
    changed = [name for name in changed or () if name in known]
    for name in dict.fromkeys([*changed, *known]):
        limits, value = SETTING_RANGES[name], known[name]
        if limits.check(value) is not None:
            bounds = describe_range(limits)
            if value > limits.upper:  # "1 or more" still ends where a request's integers do
                bounds = f"{limits.minimum}–{limits.upper} {limits.unit}"
            raise UsageError(f"{name}={value} is out of range {bounds}")
    for higher, limits in SETTING_RANGES.items():
        lower = limits.at_least
        if lower is None or higher not in known or lower not in known:
            continue
        if known[higher] >= known[lower]:
            continue
        if lower in changed and higher not in changed:
            raise UsageError(
                f"{lower}={known[lower]} is out of range: {lower} must be at most "
                f"{higher} ({known[higher]})"
            )
        raise UsageError(
            f"{higher}={known[higher]} is out of range: {higher} must be at least "
            f"{lower} ({known[lower]})"
        )


class SettingsApi:
    """The account's delivery and alert settings."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def get(self) -> Resource:
        return self.client.resource("GET", SETTINGS_PATH)

    def put(self, settings: Mapping[str, Any]) -> Resource:
        """PUT the whole record, after checking every value's range."""
        check_settings(settings)
        return self.client.resource("PUT", SETTINGS_PATH, body=dict(settings))

    def update(self, changes: Mapping[str, int]) -> Resource:
        """Apply ``changes`` to the current settings and PUT the result (ranges checked first).
        A switch the deployment does not show (a real service has none) is a UsageError."""
        if not changes:
            raise UsageError("nothing to set", hint="pass KEY=VALUE pairs, e.g. Duration=5")
        # Each value against its own range before any request; against the others after the GET.
        check_settings(changes, changes)
        current = self.get()
        for name in changes:
            if name in SETTING_SWITCHES and name not in current:
                raise UsageError(
                    f"{name} is an emulator-only setting: this deployment has none",
                    hint="prefctl settings get lists the deployment's settings",
                )
        merged = {**current, **changes}
        check_settings(merged, changes)
        return self.client.resource("PUT", SETTINGS_PATH, body=merged)
