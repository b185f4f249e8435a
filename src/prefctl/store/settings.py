"""Account webhook and alert settings (docs/policy.md), by wire name.

The names, ranges and defaults are ``models.settings.SETTING_RANGES``; a setting never written
has its default there, so a new setting in a later release needs no migration. Values are checked
against the ranges here too, because support-team commands write settings without the REST API.
The emulator's true/false switches (``SETTING_SWITCHES``) are kept as 0 or 1 and read as booleans.

    >>> get_settings(conn, "DEMO_CORP")["MaxConcurrentRequests"]
    500
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from prefctl.errors import UsageError
from prefctl.models.setting_ranges import SETTING_NAMES, SETTING_RANGES, SETTING_SWITCHES
from prefctl.store._dialect import lock_account

if TYPE_CHECKING:
    from prefctl.store import Store

__all__ = [
    "default_settings",
    "get_settings",
    "get_switch",
    "put_settings",
    "update_settings",
]


def default_settings() -> dict[str, int]:
    """Every setting at its default, in the documented order (switches as booleans)."""
    defaults = {name: limits.default for name, limits in SETTING_RANGES.items()}
    return defaults | {name: switch.default for name, switch in SETTING_SWITCHES.items()}


def get_settings(conn: Store, account: str) -> dict[str, int]:
    """Every setting of ``account``: stored values over the defaults."""
    settings = default_settings()
    rows = conn.execute(
        "SELECT name, value FROM webhook_settings WHERE service_client_id = ?", (account,)
    )
    settings.update(
        (name, bool(value) if name in SETTING_SWITCHES else value)
        for name, value in rows
        if name in settings
    )
    return settings


def get_switch(conn: Store, account: str, name: str) -> bool:
    """One of the emulator's switches (``SETTING_SWITCHES``) of ``account``: one row read, for
    the paths that ask on every write."""
    row = conn.execute(
        "SELECT value FROM webhook_settings WHERE service_client_id = ? AND name = ?",
        (account, name),
    ).fetchone()
    return SETTING_SWITCHES[name].default if row is None else bool(row[0])


def put_settings(conn: Store, account: str, values: Mapping[str, int]) -> dict[str, int]:
    """Replace the settings (PUT): a setting left out goes back to its default."""
    return _write(conn, account, {**default_settings(), **values})


def update_settings(conn: Store, account: str, changes: Mapping[str, int]) -> dict[str, int]:
    """Change some settings and keep the others (checked together: run it in a transaction,
    which no other writer of the account's settings then interleaves)."""
    lock_account(conn, account)
    return _write(conn, account, {**get_settings(conn, account), **changes})


def _write(conn: Store, account: str, settings: dict[str, int]) -> dict[str, int]:
    problems = [f"unknown setting {name!r}" for name in settings if name not in SETTING_NAMES]
    problems += [
        f"{name} must be true or false"
        for name in SETTING_SWITCHES
        if not isinstance(settings[name], bool)
    ]
    for name, limits in SETTING_RANGES.items():
        value = settings[name]
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{name} must be an integer")
            continue
        problem = limits.check(value, settings)
        if problem:
            problems.append(problem)
    if problems:
        raise UsageError("; ".join(problems), hint="`prefctl settings get` shows the ranges")
    conn.executemany(
        "INSERT INTO webhook_settings (service_client_id, name, value) VALUES (?, ?, ?)"
        " ON CONFLICT (service_client_id, name) DO UPDATE SET value = excluded.value",
        [(account, name, int(value)) for name, value in settings.items()],
    )
    return settings
