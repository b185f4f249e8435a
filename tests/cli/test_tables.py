"""Tables for people: one row per line in a pipe, Rich's folding only where a terminal needs it."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import get_character_cell_size
from rich.console import Console
from rich.table import Table
from rich.text import Text

from prefctl.cli._tables import fit_table, plain_table, tsv
from tests.helpers import run_cli

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def rich_rendering(headers: list[str], cells: list[list[str]], title: str | None) -> str:
    """What ``Output.table`` printed before it had a plain path: Rich, wide enough not to fold."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=10_000, no_color=True)
    table = Table(title=title, show_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in cells:
        table.add_row(*[Text(text) for text in row])
    console.print(table)
    return buffer.getvalue()


PRINTABLE = st.text(
    st.characters(blacklist_categories=["Cc", "Cs", "Zl", "Zp", "Mn", "Me", "Cf"]), max_size=12
)


@settings(max_examples=80, deadline=None)
@given(
    data=st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            st.lists(PRINTABLE, min_size=n, max_size=n),
            st.lists(st.lists(PRINTABLE, min_size=n, max_size=n), min_size=1, max_size=6),
        )
    ),
    title=st.one_of(  # titles are prefctl's own words
        st.none(), st.from_regex(r"[A-Za-z0-9,;:()—-]+( [A-Za-z0-9,;:()—-]+)*", fullmatch=True)
    ),
)
def test_plain_table_is_rich_table_character_for_character(
    data: tuple[list[str], list[list[str]]], title: str | None
) -> None:
    headers, cells = data
    lines = plain_table(headers, cells, title=title)
    if lines is None:
        texts = [*headers, *(text for row in cells for text in row)]
        if any(get_character_cell_size(c) == 0 for text in texts for c in text):
            return  # a character of no width (a combining mark): Rich decides how to show it
        untitled = plain_table(headers, cells)  # else a title wider than the table: Rich folds it
        assert untitled is not None
        assert title is not None
        assert len(title) > len(untitled[0])
        return
    assert "\n".join(lines) + "\n" == rich_rendering(headers, cells, title)


def test_plain_table_leaves_control_characters_and_narrow_terminals_to_rich() -> None:
    assert plain_table(["a"], [["two\nlines"]]) is None
    assert plain_table(["a"], [["\x1b[31mred"]]) is None
    assert plain_table(["a"], [["e\u0301"]]) is None  # a combining accent: no width of its own
    assert plain_table(["id"], [["x" * 100]], width=80) is None
    assert plain_table(["id"], [["x" * 70]], width=80) is not None


def test_piped_table_is_a_header_and_tab_separated_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # a width asked for does not matter in a pipe
    result = run_cli("events", "types")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split("\t") == ["TYPE", "ENTITY", "FILTER KEY", "PREVIOUS DATA", "DESCRIPTION"]
    types = run_cli("-o", "json", "events", "types").json
    assert len(lines) == 1 + len(types)
    assert all(line.count("\t") == 4 for line in lines)
    assert not re.search("[┃│━╇\x1b]", result.stdout)
    assert [line.split("\t")[0] for line in lines[1:]] == [t["type"] for t in types]


def test_piped_table_keeps_empty_cells_as_empty_fields() -> None:
    assert tsv([["a", "", "c"], ["x\ty", "two\nlines", ""]]) == "a\t\tc\nx y\ttwo lines\t\n"


def test_terminal_table_at_80_columns_never_splits_identifiers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # stdout counts as a terminal of 80 columns
    result = run_cli("events", "types")
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    types = run_cli("-o", "json", "events", "types").json
    assert all(f" {t['type']} " in result.stdout for t in types)
    words = " ".join(line.split("│", 1)[-1].strip() for line in lines[2:])
    assert all(t["description"] in words for t in types)  # wrapped at its spaces, never cut
    assert "…" not in result.stdout
    assert "(--wide shows all)" in result.stderr
    wide = run_cli("--wide", "events", "types").stdout
    assert "DESCRIPTION" in wide.splitlines()[0]
    assert len(wide.splitlines()) == 2 + len(types)  # one line a row
    assert run_cli("events", "types", "-o", "wide").stdout == wide


def test_fit_table_leaves_out_whole_columns_and_never_cuts_a_value() -> None:
    event_id = "25ed800c-39ea-4afb-b8a1-0c6d6f1c2f3e"
    headers = ["ID", "EVENT ID", "ATTEMPTS", "LAST"]
    cells = [["1", event_id, "3", "503 (the service is unavailable right now, try later)"]]
    kept, rows, hidden = fit_table(headers, cells, 70)
    assert kept == ["ID", "EVENT ID", "ATTEMPTS"]
    assert hidden == ["LAST"]
    assert rows == [["1", event_id, "3"]]
    kept, rows, hidden = fit_table(headers, cells, 72, drop_order=[1])
    assert hidden == ["EVENT ID"]
    assert rows == [["1", "3", cells[0][3]]]
    kept, rows, hidden = fit_table(headers, cells, 30)  # narrower than the EventId
    assert kept == ["ID"]
    assert hidden == ["EVENT ID", "ATTEMPTS", "LAST"]
    kept, rows, hidden = fit_table(headers, cells, 30, drop_order=[1, 0])  # the first, declared
    assert kept == ["ATTEMPTS"]
    kept, rows, hidden = fit_table(headers, cells, 10, drop_order=[0, 1, 2, 3])
    assert kept == ["LAST"]  # the last column left stays, however wide


def test_policy_explain_at_60_columns_gives_up_the_jitter_bounds_and_wraps_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    result = run_cli("policy", "explain")
    printed = result.stdout
    rows = [line for line in printed.splitlines() if "│" in line]
    assert all(len(line) <= 60 for line in printed.splitlines())
    attempts = [row.split("│")[0].strip().strip("()") for row in rows[:16]]
    assert attempts == [str(n) for n in range(1, 17)]  # the attempts: one line each
    assert "not shown at 60 columns: EARLIEST, LATEST" in result.stderr
    assert "TimeToLiveExceeded:" in printed
    assert "…" not in printed
