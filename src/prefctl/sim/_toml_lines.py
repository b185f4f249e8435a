"""Line numbers of keys in a TOML text, which ``tomllib`` does not give.

``KeyLines(text).line_of(("endpoint", "outages", 1, "end_minute"))`` is the line (1-based) where
that key is written; array-of-tables elements are counted by their ``[[header]]`` lines, so index 1
is the second ``[[endpoint.outages]]``. A key inside an inline table or a multi-line value is not
on a line of its own: the lookup falls back to the nearest enclosing key that is (the line of
``latency_ms = { … }``), then to the table header.

It reads the text line by line the way a person would: headers, ``key = value`` lines, multi-line
strings skipped. That is enough for error messages on files ``tomllib`` has already accepted.
"""

from __future__ import annotations

import re

__all__ = ["KeyLines", "KeyPath", "format_path"]

KeyPath = tuple[str | int, ...]

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_KEY_PART = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")
_PART = re.compile(_KEY_PART)


def _split(dotted: str) -> list[str]:
    parts = []
    for match in _PART.finditer(dotted):
        part = match.group(0)
        if part[0] in "\"'":
            part = part[1:-1]
        parts.append(part)
    return parts


class KeyLines:
    """Where each key and table of a TOML text is written."""

    def __init__(self, text: str) -> None:
        self._lines: dict[KeyPath, int] = {}
        # Array-of-tables seen so far: their path → how many elements.
        arrays: dict[KeyPath, int] = {}
        table: KeyPath = ()
        in_multiline: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_multiline is not None:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            header = _HEADER.match(line)
            if header:
                parts = _split(header.group(2))
                if header.group(1) == "[[":
                    # The array itself is named without an index; its parents with theirs.
                    table = (*self._resolve(parts[:-1], arrays), parts[-1])
                    count = arrays.get(table, 0)
                    arrays[table] = count + 1
                    self._lines.setdefault(table, number)
                    table = (*table, count)
                else:
                    table = self._resolve(parts, arrays)
                self._lines.setdefault(table, number)
                continue
            assign = _ASSIGN.match(line)
            if assign:
                path = (*table, *_split(assign.group(1)))
                self._lines.setdefault(path, number)
                rest = line[assign.end() :]
                for quotes in ('"""', "'''"):
                    if rest.count(quotes) % 2 == 1:
                        in_multiline = quotes

    @staticmethod
    def _resolve(parts: list[str], arrays: dict[KeyPath, int]) -> KeyPath:
        """A header's path, with the current index after every array-of-tables it goes through."""
        path: KeyPath = ()
        for part in parts:
            path = (*path, part)
            if path in arrays:
                path = (*path, arrays[path] - 1)
        return path

    def line_of(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest written ancestor; None when none is."""
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return None


def format_path(path: KeyPath) -> str:
    """``endpoint.outages[1].end_minute``: a key path as a person reads it."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part + 1}]"
        else:
            shown = part if re.fullmatch(_BARE, part) else f'"{part}"'
            text += f".{shown}" if text else shown
    return text
