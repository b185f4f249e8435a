from __future__ import annotations

import functools
from pathlib import Path

from prefctl.store.db import execute_rows, open_store
from tests.helpers import run_at_once


@functools.cache
def _insert(rows: int) -> str:
    return "INSERT INTO t (n, tag) VALUES " + ", ".join(["(?, ?)"] * rows) + " RETURNING n, id"


def test_execute_rows_writes_every_row_in_order_and_returns_what_they_return(
    tmp_path: Path,
) -> None:
    with open_store(tmp_path / "s.db") as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, tag TEXT)")
        returned = execute_rows(conn, _insert, [(n, "x") for n in range(100)])  # 64 + 32 + 4
        assert sorted(tuple(row) for row in returned) == [(n, n + 1) for n in range(100)]
        assert [row[0] for row in conn.execute("SELECT n FROM t ORDER BY id")] == list(range(100))
        assert execute_rows(conn, _insert, []) == []
        assert _insert.cache_info().currsize == 3  # one SQL text per chunk size used


# Run by each process at the same moment: open (create and migrate) the store.
_OPEN_AT_ONCE = """
from prefctl.store.db import open_store
with open_store(sys.argv[1]) as conn:
    print(conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0])
"""


def test_processes_opening_a_new_store_at_once_all_get_it_migrated(tmp_path: Path) -> None:
    # Two commands on a fresh data dir (an emulator start and 'emulator users add' in one CI
    # step): turning the new file to WAL and running the migrations must not fail either of them
    # with "database is locked" or a migration applied twice.
    for attempt in range(6):
        outputs = run_at_once(_OPEN_AT_ONCE, str(tmp_path / f"s{attempt}.db"), processes=6)
        assert len({out for out, _ in outputs}) == 1  # every one sees every migration once
