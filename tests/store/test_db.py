from __future__ import annotations

import functools
from pathlib import Path

from prefctl.store.db import execute_rows, open_store


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
