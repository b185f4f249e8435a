"""``prefctl settings``: the account's webhook delivery and alert settings (docs/policy.md).

prefctl settings get
prefctl settings set Duration=5 MaxDeliveryAttempts=10     (ranges checked before sending)
prefctl settings set EmitUpdatedFull=false                  (the emulator's own switches)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.api.shapes import scalar
from prefctl.cli._api import api_client
from prefctl.cli._context import get_state
from prefctl.cli._tables import columns
from prefctl.cli.app import new_group

if TYPE_CHECKING:
    from prefctl.cli._context import State


def register(root: typer.Typer) -> None:
    group = new_group("settings", "The account's webhook delivery and alert settings.")
    group.command("get")(get_settings)
    group.command("set")(set_settings)
    root.add_typer(group)


GET_COLUMNS = columns(
    ("setting", "SETTING"),
    ("value", "VALUE"),
    ("range", "RANGE"),
    ("default", "DEFAULT"),
    drop_first=["range"],
)


def get_settings() -> None:
    """Show each setting with its range and default."""
    from prefctl.api.settings import SettingsApi

    state = get_state()
    with api_client(state) as client:
        settings = SettingsApi(client).get()
    _show(state, settings)


def set_settings(
    pairs: Annotated[
        list[str],
        typer.Argument(
            metavar="KEY=VALUE...",
            help="Settings to change, e.g. Duration=5, max-delivery-attempts=10 or (emulator "
            "only) EmitUpdatedFull=false; 'prefctl settings get' lists them.",
        ),
    ],
) -> None:
    """Change some settings; the others keep their values.

    Every value is checked against its range before anything is sent (exit 2 naming the setting and its range).
    """
    from prefctl.api.settings import SettingsApi, parse_changes
    from prefctl.api.shapes import text

    state = get_state()
    changes = parse_changes(pairs)
    with api_client(state) as client:
        settings = SettingsApi(client).update(changes)
    _show(state, settings)
    state.out.success("set " + ", ".join(f"{key}={text(value)}" for key, value in changes.items()))


def _show(state: State, settings: dict[str, Any]) -> None:
    from prefctl.api.settings import describe_range
    from prefctl.api.shapes import text
    from prefctl.models.setting_ranges import SETTING_RANGES, SETTING_SWITCHES

    if state.json:
        state.out.json(settings)
        return
    rows = []
    for name, value in settings.items():
        limits, switch = SETTING_RANGES.get(name), SETTING_SWITCHES.get(name)
        row = {
            "setting": name,
            "value": scalar(value),  # another shape: an empty cell (api/shapes)
            "range": describe_range(limits) if limits else None,
            "default": limits.default if limits else None,
        }
        if switch is not None:
            row.update(value=text(value), range="true or false", default=text(switch.default))
        rows.append(row)
    state.out.table(
        rows,
        GET_COLUMNS,
    )
