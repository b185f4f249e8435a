"""How long ``Output.table`` takes to print a large listing (the ``--all`` of a big account).

Prints the time for N rows of six columns (a delivery listing: 36-character EventIds, types,
profiles, states, attempts, times) written to a file, through ``Output.table`` (its plain path)
and through Rich's ``Table`` at the same width (the path for cells that must fold).
Run: ``.venv/bin/python bench/tables.py [--rows 30000]``.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import uuid

from rich.console import Console
from rich.table import Table
from rich.text import Text

from prefctl.cli._output import Output

COLUMNS = [
    ("EventId", "event"),
    ("EventType", "type"),
    ("ProfileId", "profile"),
    ("state", "state"),
    ("attempts", "attempts"),
    ("time", "time"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=30_000)
    args = parser.parse_args()
    rows = [
        {
            "EventId": str(uuid.uuid4()),
            "EventType": "contacts.email.added",
            "ProfileId": 1000 + i,
            "state": "delivered",
            "attempts": 1 + i % 5,
            "time": "2026-11-27T13:00:00Z",
        }
        for i in range(args.rows)
    ]
    saved = sys.stdout
    sys.stdout = io.StringIO()
    try:
        start = time.perf_counter()
        Output().table(rows, COLUMNS)
        plain = time.perf_counter() - start
        width = max(len(line) for line in sys.stdout.getvalue().splitlines())
    finally:
        sys.stdout = saved
    console = Console(file=io.StringIO(), width=width, no_color=True)
    start = time.perf_counter()
    table = Table(show_edge=False, header_style="bold")
    for _key, header in COLUMNS:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*[Text(str(row[key])) for key, _header in COLUMNS])
    console.print(table)
    rich = time.perf_counter() - start
    print(f"{args.rows:,} rows, {width} columns wide")
    print(f"Output.table (plain path): {plain:.2f} s")
    print(f"Rich Table:                {rich:.2f} s")


if __name__ == "__main__":
    main()
