"""The text of a table: fitted to a terminal's width, drawn as Rich draws it by padding strings,
or tab-separated for a pipe. ``Output.table`` (``cli/_output.py``) decides which."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["fit_table", "plain_table", "tsv"]

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_FIELD_BREAKS = re.compile("[\t\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_MIN_TEXT = 10  # free text is shortened to no fewer cells than this (or its header's)


def tsv(lines: Iterable[Sequence[str]]) -> str:
    """Lines of tab-separated fields; tabs and line breaks inside a field become spaces, so that
    each line is one row and an empty cell is an empty field."""
    return "".join("\t".join(_FIELD_BREAKS.sub(" ", f) for f in fields) + "\n" for fields in lines)


def fit_table(
    headers: Sequence[str],
    cells: Sequence[Sequence[str]],
    width: int,
    *,
    drop_first: Sequence[int] = (),
) -> tuple[list[str], list[list[str]], list[str]]:
    """The columns and cells of a table that fit ``width`` terminal cells, and the headers of
    the columns left out.

    Free text (a cell with a space) is shortened first, with ``…``; an identifier (a cell
    without one: an id, a URL, a timestamp) and a header are never cut. When that is not
    enough, whole columns are left out: those of ``drop_first`` in order, then the rightmost,
    never the first."""
    from rich.cells import cell_len, set_cell_size

    def is_text(text: str) -> bool:
        return " " in text.strip()

    count = len(headers)
    natural = [
        max([cell_len(headers[i]), *(cell_len(row[i]) for row in cells)]) for i in range(count)
    ]
    least = [
        max(
            [
                cell_len(headers[i]),
                min(natural[i], _MIN_TEXT),
                *(cell_len(row[i]) for row in cells if not is_text(row[i])),
            ]
        )
        for i in range(count)
    ]
    widths = list(natural)
    kept = list(range(count))

    def total() -> int:
        return sum(widths[i] for i in kept) + 3 * len(kept) - 1

    order = [i for i in drop_first if 0 < i < count]
    order += [i for i in reversed(range(1, count)) if i not in order]
    while total() > width:
        spare = [i for i in kept if widths[i] > least[i]]
        if spare:  # shorten the widest free text by what is over, down to its least
            widest = max(spare, key=lambda i: widths[i] - least[i])
            widths[widest] = max(least[widest], widths[widest] - (total() - width))
            continue
        if len(kept) == 1:
            break
        kept.remove(next(i for i in order if i in kept))
        widths = [natural[i] if i in kept else widths[i] for i in range(count)]

    def cut(text: str, room: int) -> str:
        if cell_len(text) <= room:
            return text
        return set_cell_size(text, room - 1).rstrip() + "…"

    hidden = [headers[i] for i in range(count) if i not in kept]
    return (
        [headers[i] for i in kept],
        [[cut(row[i], widths[i]) for i in kept] for row in cells],
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
