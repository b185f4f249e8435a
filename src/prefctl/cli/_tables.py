"""The text of a table: fitted to a terminal's width, drawn as Rich draws it by padding strings,
or tab-separated for a pipe. ``Output.table`` (``cli/_output.py``) decides which."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_MIN_WRAP = 20  # prose is wrapped to no fewer cells than this (or its longest word)

__all__ = ["Columns", "as_columns", "columns", "fit_table", "plain_table", "tsv"]

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_FIELD_BREAKS = re.compile("[\t\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def tsv(lines: Iterable[Sequence[str]]) -> str:
    """Lines of tab-separated fields; tabs and line breaks inside a field become spaces, so that
    each line is one row and an empty cell is an empty field."""
    return "".join("\t".join(_FIELD_BREAKS.sub(" ", f) for f in fields) + "\n" for fields in lines)


@dataclass(frozen=True)
class Columns:
    """A table's columns and what it gives up first on a narrow terminal.

    ``columns`` are ``(key of the row, HEADER)`` pairs in the order shown, headers in UPPER case.
    ``drop_first`` names the keys left out first, in order, when the table is wider than the
    terminal: long identifiers (EventIds, URLs) before what people scan a list for (names,
    states, reasons, types); it may name the first column. Columns not named there go next,
    from the right, the first column last; one column always stays. A column is shown whole or
    not at all: no value is ever cut. ``--wide`` shows every column and a pipe gets them all,
    tab-separated."""

    columns: tuple[tuple[str, str], ...]
    drop_first: tuple[str, ...] = ()
    wrap: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        keys = [key for key, _header in self.columns]
        for key, header in self.columns:
            if header != header.upper():
                raise ValueError(f"column {key!r}: headers are UPPER case, not {header!r}")
        wrong = [key for key in (*self.drop_first, *self.wrap) if key not in keys]
        if wrong:
            raise ValueError(f"drop_first or wrap: {wrong} name no column of the table")

    @property
    def headers(self) -> list[str]:
        return [header for _key, header in self.columns]

    def drop_order(self) -> list[int]:
        """Indexes of the ``drop_first`` columns, in order."""
        keys = [key for key, _header in self.columns]
        return [keys.index(key) for key in self.drop_first]

    def wrapped(self) -> list[int]:
        """Indexes of the ``wrap`` columns."""
        keys = [key for key, _header in self.columns]
        return [keys.index(key) for key in self.wrap]


def columns(
    *pairs: tuple[str, str], drop_first: Sequence[str] = (), wrap: Sequence[str] = ()
) -> Columns:
    """A table's declaration: ``columns(("id", "ID"), ("name", "NAME"), drop_first=["id"])``."""
    return Columns(tuple(pairs), tuple(drop_first), tuple(wrap))


def as_columns(
    columns: Columns | Sequence[tuple[str, str]], drop_first: Sequence[str] = ()
) -> Columns:
    """``columns`` as a declaration; a list of pairs gets its headers in UPPER case."""
    if isinstance(columns, Columns):
        return columns
    return Columns(tuple((key, header.upper()) for key, header in columns), tuple(drop_first))


def fit_table(
    headers: Sequence[str],
    cells: Sequence[Sequence[str]],
    width: int,
    *,
    drop_order: Sequence[int] = (),
    wrap: Sequence[int] = (),
) -> tuple[list[str], list[list[str]], list[str]]:
    """The columns and cells of a table that fit ``width`` terminal cells, and the headers of
    the columns left out.

    Whole columns are left out, those of ``drop_order`` first (indexes), until the rest fits;
    then the prose of the ``wrap`` columns is wrapped at spaces (a cell of several lines), down
    to its longest word or ``_MIN_WRAP`` cells; then more columns go, from the right, the first
    one never. No value is ever shortened. The last column left stays, however wide."""
    from rich.cells import cell_len

    count = len(headers)
    natural = [
        max([cell_len(headers[i]), *(cell_len(row[i]) for row in cells)]) for i in range(count)
    ]
    least = list(natural)
    for i in wrap:
        words = [cell_len(word) for row in cells for word in row[i].split()]
        least[i] = max([cell_len(headers[i]), min(natural[i], _MIN_WRAP), *words])

    def needed(kept: list[int], widths: list[int]) -> int:
        return sum(widths[i] for i in kept) + 3 * len(kept) - 1

    kept = list(range(count))
    declared = [i for i in drop_order if 0 <= i < count]
    order = declared + [i for i in reversed(range(1, count)) if i not in declared]
    for i in declared:  # the columns given up first go before any prose is wrapped
        if len(kept) == 1 or needed(kept, natural) <= width:
            break
        kept.remove(i)
    while len(kept) > 1 and needed(kept, least) > width:  # then the rest, from the right
        kept.remove(next(i for i in order if i in kept))
    widths = list(natural)
    while needed(kept, widths) > width:  # wrap the widest prose by what is over
        spare = [i for i in kept if widths[i] > least[i]]
        if not spare:
            break
        widest = max(spare, key=lambda i: widths[i] - least[i])
        widths[widest] = max(least[widest], widths[widest] - (needed(kept, widths) - width))

    def fitted(text: str, i: int) -> str:
        if cell_len(text) <= widths[i]:
            return text
        import textwrap

        lines = textwrap.wrap(text, widths[i], break_long_words=False, break_on_hyphens=False)
        return "\n".join(lines)

    hidden = [headers[i] for i in range(count) if i not in kept]
    return (
        [headers[i] for i in kept],
        [[fitted(row[i], i) for i in kept] for row in cells],
        hidden,
    )


def plain_table(
    headers: Sequence[str],
    cells: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    width: int | None = None,
) -> list[str] | None:
    """The lines of ``Output.table``'s table, one per row, when no cell needs folding.

    The same characters as Rich's rendering (no edge, a heavy header rule, padded cells), made
    by padding strings: Rich measures and wraps every cell (30,000 rows: 10.8 s, against 0.29 s
    here; bench/tables.py). None when a cell or the title holds a control character (a line
    break, a tab, an escape) or one of no width (a combining mark), which Rich decides how to
    show; when the table is wider than
    ``width`` (a terminal's, or ``$COLUMNS``), where Rich folds the cells, or narrower than its
    title; with ``width`` None (a pipe or a file) rows are never folded: each stays one line.
    """
    from rich.cells import cell_len

    if not all(_plain(text) for text in [*headers, title or ""]) or not all(
        _plain(text) for row in cells for text in row
    ):
        return None
    header_sizes = [cell_len(header) for header in headers]
    sizes = [[cell_len(text) for text in row] for row in cells]
    widths = [max(column) for column in zip(header_sizes, *sizes, strict=True)]
    total = sum(widths) + 3 * len(widths) - 1
    if (width is not None and total > width) or (
        title is not None and (cell_len(title) > total or title != title.strip())
    ):
        return None  # Rich folds the cells, or the title over the table's width

    def line(texts: Sequence[str], own: Sequence[int], separator: str) -> str:
        return separator.join(
            f" {text}{' ' * (room - size)} "
            for text, size, room in zip(texts, own, widths, strict=True)
        )

    lines = [] if title is None else [_centred(title, total)]
    lines.append(line(headers, header_sizes, "┃"))
    lines.append("╇".join("━" * (room + 2) for room in widths))
    lines.extend(line(row, row_sizes, "│") for row, row_sizes in zip(cells, sizes, strict=True))
    return lines


def _plain(text: str) -> bool:
    """Whether ``text`` shows as its characters, each one or two cells wide."""
    if text.isascii():
        return _CONTROL.search(text) is None
    from rich.cells import get_character_cell_size

    return _CONTROL.search(text) is None and all(get_character_cell_size(c) for c in text)


def _centred(text: str, width: int) -> str:
    from rich.cells import cell_len

    spare = max(width - cell_len(text), 0)
    return " " * (spare // 2) + text + " " * (spare - spare // 2)
