"""Every table prefctl declares, rendered at 50, 80 and 120 columns: whole columns are left out in
the order the command declares, no value is ever cut, and the rest fits the terminal."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from prefctl.cli._output import Output
from prefctl.cli._tables import Columns, columns
from prefctl.cli.app import COMMANDS

EVENT_ID = "25ed800c-39ea-4afb-b8a1-0c6d6f1c2f3e"
WIDTHS = [50, 80, 120]


def declared_tables() -> list[Any]:
    """Every module-level ``Columns`` of the command modules, as test cases named ``module.NAME``."""
    found: dict[int, Any] = {}
    for module_name in COMMANDS.values():
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if isinstance(value, Columns):
                label = f"{module_name.rsplit('.', 1)[1]}.{name}"
                found.setdefault(id(value), pytest.param(label, value, id=label))
    return sorted(found.values(), key=lambda case: case.id)


def headers_shown(out: str) -> list[str]:
    return [cell.strip() for cell in out.splitlines()[0].split("┃")]


def sample(key: str, row: int) -> str:
    """A value as wide as a real one of the column named ``key``."""
    lowered = key.lower()
    if lowered in ("event_id", "eventid"):
        return EVENT_ID[:-1] + str(row)
    if "url" in lowered:
        return f"https://hooks.example.com/crm/webhooks/{row}"
    if lowered.endswith(("_at", "time", "created", "modified")) or lowered == "when":
        return f"2026-11-28T06:3{row}:58Z"
    if lowered in ("description", "last", "explanation", "filters", "events", "recipients"):
        return f"a value of several words, row {row}"
    if lowered in ("reason",):
        return "MaxDeliveryAttemptsExceeded"
    if "type" in lowered:
        return "preference.communication.added"
    return f"{key[:6]}-{row}"


def render(
    table: Columns, width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[str, str, list[dict[str, Any]]]:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # stdout counts as a terminal of that width
    rows = [{key: sample(key, n) for key, _header in table.columns} for n in range(3)]
    capsys.readouterr()
    Output(no_color=True).table(rows, table)
    printed = capsys.readouterr()
    return printed.out, printed.err, rows


def test_every_command_declares_its_tables() -> None:
    names = [case.id for case in declared_tables()]
    for expected in (
        "deadletters.LIST_COLUMNS",
        "deliveries.LIST_COLUMNS",
        "alerts.LIST_COLUMNS",
        "events.TYPES_COLUMNS",
        "subscriptions.LIST_COLUMNS",
        "config.LIST_COLUMNS",
        "profiles.SEARCH_COLUMNS",
    ):
        assert expected in names


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("name", "table"), declared_tables())
def test_table_at_width_leaves_out_whole_columns_in_the_declared_order(
    name: str,
    table: Columns,
    width: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, err, rows = render(table, width, monkeypatch, capsys)
    lines = out.splitlines()
    shown = headers_shown(out)
    kept = [(key, header) for key, header in table.columns if header in shown]
    hidden = [header for key, header in table.columns if (key, header) not in kept]
    assert len(kept) >= 1, name
    if len(kept) > 1:
        assert max(len(line) for line in lines) <= width, name
    # The columns left out are the first of the declared order: drop_first, then from the right.
    order = [table.columns[i][1] for i in table.drop_order()]
    order += [header for _key, header in reversed(table.columns[1:]) if header not in order]
    assert set(hidden) == set(order[: len(hidden)]), name
    if hidden:
        assert f"not shown at {width} columns: {', '.join(hidden)}" in err
    # No value is cut: each shown value is there whole (prose may wrap at its spaces), no "…".
    assert "…" not in out
    for row in rows:
        for key, _header in kept:
            if key in table.wrap:
                assert all(f" {word} " in out.replace("\n", " \n ") for word in row[key].split())
            else:
                assert row[key] in out, (name, key)


def test_header_of_a_declared_table_must_be_upper_case() -> None:
    with pytest.raises(ValueError, match="UPPER"):
        columns(("name", "Name"))
    with pytest.raises(ValueError, match="no column"):
        columns(("name", "NAME"), drop_first=["nme"])


def test_tables_at_80_columns_keep_what_people_scan_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prefctl.cli import alerts, deadletters, deliveries, subscriptions

    def shown(table: Columns, width: int) -> list[str]:
        out, _err, _rows = render(table, width, monkeypatch, capsys)
        return headers_shown(out)

    dead = shown(deadletters.LIST_COLUMNS, 80)
    assert "REASON" in dead
    assert "EVENT ID" not in dead
    assert "TYPE" in shown(deliveries.LIST_COLUMNS, 80)
    assert {"SUBSCRIPTION", "TO"} <= set(shown(alerts.LIST_COLUMNS, 80))
    assert {"ID", "NAME", "STATE"} <= set(shown(subscriptions.LIST_COLUMNS, 50))


def test_wide_shows_every_column(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prefctl.cli import deadletters

    monkeypatch.setenv("COLUMNS", "50")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    table = deadletters.LIST_COLUMNS
    rows = [{key: sample(key, 0) for key, _header in table.columns}]
    Output(no_color=True, wide=True).table(rows, table)
    assert headers_shown(capsys.readouterr().out) == table.headers
