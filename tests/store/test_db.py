from __future__ import annotations

import functools
import pickle
from pathlib import Path

import pytest

from prefctl.emulator.write_process import run_batch
from prefctl.errors import DiskFullError
from prefctl.store import Store
from prefctl.store.db import connect, execute_rows, open_store, transaction
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


@pytest.mark.slow
def test_processes_opening_a_new_store_at_once_all_get_it_migrated(tmp_path: Path) -> None:
    # Two commands on a fresh data dir (an emulator start and 'emulator users add' in one CI
    # step): turning the new file to WAL and running the migrations must not fail either of them
    # with "database is locked" or a migration applied twice.
    for attempt in range(6):
        outputs = run_at_once(_OPEN_AT_ONCE, str(tmp_path / f"s{attempt}.db"), processes=6)
        assert len({out for out, _ in outputs}) == 1  # every one sees every migration once


# Run by each process at the same moment: make sure the data dir has a store.
_ENSURE_AT_ONCE = """
from pathlib import Path
from prefctl.store.db import ensure_private_store
print(ensure_private_store(Path(sys.argv[1])).stat().st_size > 0)
"""


def test_processes_creating_the_emulator_store_at_once_never_see_it_empty(tmp_path: Path) -> None:
    # An empty store is refused as one that lost its data: the one being created must never
    # be seen empty by another command starting at the same moment.
    for attempt in range(4):
        outputs = run_at_once(_ENSURE_AT_ONCE, str(tmp_path / f"d{attempt}"), processes=6)
        assert {out.strip() for out, _ in outputs} == {"True"}, outputs


def _full(path: Path) -> Store:
    """A connection to a new store that may not grow past a few pages: SQLite's own
    SQLITE_FULL, as a full disk gives it (``max_page_count`` is this connection's limit)."""
    conn = connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO t (body) VALUES ('kept')")
    conn.execute("PRAGMA max_page_count = 8")
    return conn


def _insert_rows(rows: int, conn: Store) -> int:
    for _ in range(rows):
        conn.execute("INSERT INTO t (body) VALUES (?)", ("x" * 2000,))
    return rows


def test_transaction_on_a_full_disk_raises_disk_full_and_keeps_what_was_stored(
    tmp_path: Path,
) -> None:
    conn = _full(tmp_path / "s.db")

    with pytest.raises(DiskFullError) as caught, transaction(conn):
        _insert_rows(100, conn)

    assert str(tmp_path / "s.db") in str(caught.value)  # not "cannot rollback …"
    assert not conn.in_transaction
    assert [row[0] for row in conn.execute("SELECT body FROM t")] == ["kept"]
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with transaction(conn):  # the connection is usable again
        _insert_rows(1, conn)


def test_writer_batch_meeting_a_full_disk_fails_every_job_and_stores_none(tmp_path: Path) -> None:
    conn = _full(tmp_path / "s.db")
    jobs = [pickle.dumps(functools.partial(_insert_rows, rows)) for rows in (1, 100, 1, 1)]

    outcomes = run_batch(conn, jobs)

    # The jobs after the one that filled the disk did not run, and commit, on their own.
    assert [ok for ok, _ in outcomes] == [False] * 4
    assert all(isinstance(value, DiskFullError) for _, value in outcomes)
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1
