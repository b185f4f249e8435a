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

from prefctl.cli._output import plain_table
from tests.helpers import run_cli, run_in_terminal

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


def test_piped_table_keeps_each_row_on_one_line_however_wide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COLUMNS")  # set by conftest; in a pipe it asks for folding at that width
    result = run_cli("events", "types")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) > 80  # wider than a terminal's 80 columns
    rows = [line for line in lines[2:] if line.strip()]
    assert len(rows) == len(run_cli("-o", "json", "events", "types").json)
    assert all(line.count("│") == lines[0].count("┃") for line in rows)
    monkeypatch.setenv("COLUMNS", "100")
    folded = run_cli("events", "types").stdout.splitlines()
    assert max(len(line) for line in folded) <= 100
    assert len(folded) > len(lines)


def test_terminal_folds_a_table_only_when_it_is_wider_than_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COLUMNS")
    piped = run_cli("events", "types").stdout  # 462 columns wide
    monkeypatch.setenv("COLUMNS", "80")  # Rich's terminal width (a new pty has no size)
    folded = ANSI.sub("", run_in_terminal("events", "types").output).replace("\r\n", "\n")
    assert max(len(line) for line in folded.splitlines()) <= 80  # Rich folded the cells
    assert "profile.create\n" not in piped
    assert "profile.create " in folded  # its last letter went to the next line
    monkeypatch.setenv("COLUMNS", "400")
    wide = run_in_terminal("events", "types")
    assert piped in ANSI.sub("", wide.output).replace("\r\n", "\n")  # the same, row by row
    assert "\x1b[1m" in wide.output  # the header in bold, as Rich shows it
