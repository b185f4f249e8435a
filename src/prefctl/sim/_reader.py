"""Typed reads from parsed TOML, each failure one ``UsageError`` naming the line and the key.

``Reader`` is the scenario validator's toolbox: every method takes a ``Table`` (a dict with its
key path) and a key, and either returns a checked value or raises
``"{source}:{line}: {key.path}: {what is wrong}"``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from prefctl.errors import UsageError
from prefctl.sim._toml_lines import KeyLines, KeyPath, format_path

__all__ = ["REQUIRED", "Reader", "Table"]

T = TypeVar("T")
K = TypeVar("K")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


@dataclass(frozen=True, slots=True)
class Table:
    """A TOML table and where it is: ``("endpoint", "outages", 0)``."""

    data: dict[str, Any]
    path: KeyPath


class Reader:
    """Checked reads from the tables of one TOML text (``source`` names it in errors)."""

    def __init__(self, source: str, lines: KeyLines) -> None:
        self.source = source
        self.lines = lines

    # -- errors -----------------------------------------------------------------------------------
    def error(self, path: KeyPath, message: str) -> UsageError:
        line = self.lines.line_of(path)
        where = f"{self.source}:{line}" if line is not None else self.source
        key = format_path(path)
        return UsageError(f"{where}: {key}: {message}" if key else f"{where}: {message}")

    def unknown(self, path: KeyPath, what: str, known: Sequence[str]) -> UsageError:
        name = str(path[-1])
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"
        if len(known) > 12 and not close:
            hint = ""
        return self.error(path, f"unknown {what}{hint}")

    def known_keys(self, table: Table, allowed: Sequence[str]) -> None:
        for key in table.data:
            if key not in allowed:
                raise self.unknown((*table.path, key), "key", allowed)

    # -- containers -------------------------------------------------------------------------------
    def table(self, parent: Table, key: str) -> Table:
        """The sub-table ``key`` (empty when absent)."""
        path = (*parent.path, key)
        value = parent.data.get(key, {})
        if not isinstance(value, dict):
            raise self.error(path, f"must be a table, not {_kind(value)}")
        return Table(value, path)

    def array_of_tables(self, parent: Table, key: str) -> list[Table]:
        """``[[key]]`` entries (or an array of inline tables); none when absent."""
        path = (*parent.path, key)
        value = parent.data.get(key, [])
        if not isinstance(value, list):
            raise self.error(path, f"must be an array of tables ([[{format_path(path)}]])")
        tables = []
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.error((*path, index), f"must be a table, not {_kind(item)}")
            tables.append(Table(item, (*path, index)))
        return tables

    # -- scalars ----------------------------------------------------------------------------------
    def raw(self, table: Table, key: str, *, default: Any) -> Any:
        return table.data.get(key, default)

    def _get(self, table: Table, key: str, default: object) -> Any:
        if key in table.data:
            return table.data[key]
        if isinstance(default, _Required):
            raise self.error((*table.path, key), "is required")
        return default

    def value(self, table: Table, key: str, kind: type[T], *, default: T | _Required) -> T:
        value = self._get(table, key, default)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise self.error((*table.path, key), f"must be {_name(kind)}, not {_kind(value)}")
        return value

    def optional_string(self, table: Table, key: str) -> str | None:
        return None if key not in table.data else self.value(table, key, str, default=REQUIRED)

    def string(self, table: Table, key: str, *, default: str | _Required = REQUIRED) -> str:
        value = self.value(table, key, str, default=default)
        if not value.strip():
            raise self.error((*table.path, key), "must not be empty")
        return value

    def string_list(self, table: Table, key: str) -> list[str]:
        value = self._get(table, key, REQUIRED)
        path = (*table.path, key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(path, "must be an array of strings")
        return list(value)

    def integer(self, table: Table, key: str, *, default: int | _Required = REQUIRED) -> int:
        return self.value(table, key, int, default=default)

    def number(
        self,
        table: Table,
        key: str,
        *,
        default: float | _Required = REQUIRED,
        above: float | None = None,
        at_least: float | None = None,
        at_most: float | None = None,
    ) -> float:
        value = self._get(table, key, default)
        path = (*table.path, key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(path, f"must be a number, not {_kind(value)}")
        number = float(value)
        # nan passes every comparison below and inf runs every sum over: neither is a quantity.
        if not math.isfinite(number):
            raise self.error(path, f"must be a finite number, not {value}")
        if above is not None and not number > above:
            raise self.error(path, f"{value} must be greater than {above:g}")
        if at_least is not None and number < at_least:
            raise self.error(path, f"{value} must be at least {at_least:g}")
        if at_most is not None and number > at_most:
            raise self.error(path, f"{value} must be at most {at_most:g}")
        return number

    def choice(
        self, table: Table, key: str, choices: Sequence[str], *, default: str | _Required
    ) -> str:
        value = self.value(table, key, str, default=default)
        if value not in choices:
            quoted = ", ".join(f'"{c}"' for c in choices)
            raise self.error((*table.path, key), f'"{value}" is not one of {quoted}')
        return value

    def weights(self, table: Table, key_type: Callable[[str], K]) -> tuple[tuple[K, float], ...]:
        """A table of name → weight (finite numbers ≥ 0, not all 0), normalised to sum to 1, in
        the file's order."""
        if not table.data:
            raise self.error(table.path, "must name at least one entry")
        pairs = [(key, self.number(table, key, at_least=0)) for key in table.data]
        largest = max(weight for _, weight in pairs)
        if largest <= 0:
            raise self.error(table.path, "the weights must not all be 0")
        # Scaled first so that the largest is below 1 and huge weights (1e308 + 1e308) cannot
        # overflow the sum. By a power of two, which is exact: the shares are those of the
        # weights as written.
        exponent = math.frexp(largest)[1]
        scaled = [(key, math.ldexp(weight, -exponent)) for key, weight in pairs]
        total = sum(weight for _, weight in scaled)
        return tuple((key_type(key), weight / total) for key, weight in scaled)

    # -- windows ----------------------------------------------------------------------------------
    def span(
        self, entry: Table, duration: float, horizon: float | None = None
    ) -> tuple[float, float]:
        """``start_minute``/``end_minute`` of a window: start within the load's duration, end
        after start and no later than ``horizon`` (an endpoint's windows: the last moment an
        attempt can be made) or, without one, than the load's end (a load window)."""
        start = self.number(entry, "start_minute", at_least=0)
        end = self.number(entry, "end_minute", at_least=0)
        if start >= duration:
            raise self.error(
                (*entry.path, "start_minute"),
                f"{start:g} is not within the load (duration_minutes = {duration:g})",
            )
        if end <= start:
            word = "before" if end < start else "equal to"
            raise self.error(
                (*entry.path, "end_minute"), f"{end:g} is {word} start_minute ({start:g})"
            )
        if horizon is None and end > duration:
            raise self.error(
                (*entry.path, "end_minute"),
                f"{end:g} is after the end of the load (duration_minutes = {duration:g})",
            )
        if horizon is not None and end > horizon:
            raise self.error(
                (*entry.path, "end_minute"),
                f"{end:g} is after minute {horizon:g}, when the last possible attempt is due",
            )
        return start, end

    def no_overlap(self, spans: list[tuple[float, float]], parent: Table, key: str) -> None:
        for index, (start, end) in enumerate(spans):
            for other, (o_start, o_end) in enumerate(spans[:index]):
                if start < o_end and o_start < end:
                    raise self.error(
                        (*parent.path, key, index),
                        f"minutes {start:g}-{end:g} overlap"
                        f" {format_path((*parent.path, key, other))}"
                        f" (minutes {o_start:g}-{o_end:g})",
                    )


def _kind(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names.update({list: "an array", dict: "a table"})
    return names.get(type(value), type(value).__name__)


def _name(kind: type) -> str:
    names = {bool: "true or false", int: "an integer", str: "a string"}
    return names.get(kind, f"a {kind.__name__}")
