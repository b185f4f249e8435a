from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from prefctl.errors import ConfigError
from prefctl.store.db import connect, open_store, transaction
from prefctl.store.migrations import Migration, applied, migrate

FIRST = Migration("0001_widgets", "CREATE TABLE widgets (id INTEGER PRIMARY KEY, name TEXT);")
BROKEN = Migration(
    "0002_broken",
    "CREATE TABLE gadgets (id INTEGER PRIMARY KEY);\nINSERT INTO no_such_table VALUES (1);",
)


def test_migrate_applies_in_order_once(tmp_path: Path) -> None:
    conn = connect(tmp_path / "s.db")
    assert migrate(conn, (FIRST,)) == ["0001_widgets"]
    assert migrate(conn, (FIRST,)) == []
    assert applied(conn) == ["0001_widgets"]


def test_failing_migration_rolls_back(tmp_path: Path) -> None:
    conn = connect(tmp_path / "s.db")
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, (FIRST, BROKEN))
    assert applied(conn) == ["0001_widgets"]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "gadgets" not in tables


def test_store_from_newer_prefctl_is_refused(tmp_path: Path) -> None:
    conn = connect(tmp_path / "s.db")
    migrate(conn, (FIRST,))
    with pytest.raises(ConfigError, match="newer prefctl"):
        migrate(conn, ())


def test_open_store_uses_wal_and_transaction_rolls_back(tmp_path: Path) -> None:
    with open_store(tmp_path / "deep" / "s.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.execute("CREATE TABLE t (x INTEGER)")
        with pytest.raises(RuntimeError), transaction(conn):
            conn.execute("INSERT INTO t VALUES (1)")
            raise RuntimeError("boom")
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0


def test_transaction_inside_transaction_rolls_back_only_its_own_block(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        with transaction(conn):
            conn.execute("INSERT INTO t VALUES (1)")
            with pytest.raises(RuntimeError), transaction(conn):
                conn.execute("INSERT INTO t VALUES (2)")
                raise RuntimeError("boom")
            with transaction(conn):
                conn.execute("INSERT INTO t VALUES (3)")
        assert [row[0] for row in conn.execute("SELECT x FROM t ORDER BY x")] == [1, 3]
