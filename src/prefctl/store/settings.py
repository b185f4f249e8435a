"""Account webhook and alert settings (docs/policy.md), by wire name.

The names, ranges and defaults are ``models.settings.SETTING_RANGES``; a setting never written
has its default there, so a new setting in a later release needs no migration. Values are checked
against the ranges here too, because support-team commands write settings without the REST API.

    >>> get_settings(conn, "DEMO_CORP")["MaxConcurrentRequests"]
    500
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from prefctl.errors import UsageError
from prefctl.models.setting_ranges import SETTING_RANGES
from prefctl.store._dialect import lock_account

if TYPE_CHECKING:
    from prefctl.store import Store

__all__ = ["default_settings", "get_settings", "put_settings", "update_settings"]


def default_settings() -> dict[str, int]:
    """Every setting at its default, in the documented order."""
    return {name: limits.default for name, limits in SETTING_RANGES.items()}


def get_settings(conn: Store, account: str) -> dict[str, int]:
    """Every setting of ``account``: stored values over the defaults."""
    settings = default_settings()
    rows = conn.execute(
        "SELECT name, value FROM webhook_settings WHERE service_client_id = ?", (account,)
    )
    settings.update((name, value) for name, value in rows if name in settings)
    return settings


def put_settings(conn: Store, account: str, values: Mapping[str, int]) -> dict[str, int]:
    """Replace the settings (PUT): a setting left out goes back to its default."""
    return _write(conn, account, {**default_settings(), **values})


def update_settings(conn: Store, account: str, changes: Mapping[str, int]) -> dict[str, int]:
    """Change some settings and keep the others (checked together: run it in a transaction,
    which no other writer of the account's settings then interleaves)."""
    lock_account(conn, account)
    return _write(conn, account, {**get_settings(conn, account), **changes})


def _write(conn: Store, account: str, settings: dict[str, int]) -> dict[str, int]:
    problems = [f"unknown setting {name!r}" for name in settings if name not in SETTING_RANGES]
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
        [(account, name, value) for name, value in settings.items()],
    )
    return settings
