from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from prefctl.errors import ConfigError
from prefctl.store import Store
from prefctl.store.db import connect, open_store, transaction
from prefctl.store.errors import StoreError
from prefctl.store.migrations import Migration, applied, bundled_migrations, migrate

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
    with pytest.raises(StoreError, match="no such table"):
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


def _rows(conn: Store, sql: str) -> list[tuple[object, ...]]:
    return [tuple(row) for row in conn.execute(sql)]


PARENTS = Migration(
    "0001_parents",
    "CREATE TABLE parents (id INTEGER PRIMARY KEY, kind TEXT CHECK (kind IN ('a', 'b', 'c')));\n"
    "CREATE TABLE children (id INTEGER PRIMARY KEY,"
    " parent_id INTEGER NOT NULL REFERENCES parents (id) ON DELETE CASCADE);\n"
    "INSERT INTO parents VALUES (1, 'a'), (2, 'b');\n"
    "INSERT INTO children VALUES (10, 1), (20, 2);",
)


def _rebuild_parents(name: str, keep: str) -> Migration:
    return Migration(
        name,
        "-- prefctl: foreign_keys=off\n"
        "CREATE TABLE parents_new (id INTEGER PRIMARY KEY,"
        " kind TEXT CHECK (kind = 'a' OR kind = 'b' OR kind = 'c'));\n"
        f"INSERT INTO parents_new SELECT * FROM parents WHERE {keep};\n"
        "DROP TABLE parents;\n"
        "ALTER TABLE parents_new RENAME TO parents;",
    )


def test_rebuilding_migration_keeps_the_rows_that_point_at_the_table(tmp_path: Path) -> None:
    conn = connect(tmp_path / "s.db")
    migrate(conn, (PARENTS, _rebuild_parents("0002_rebuild", "1")))
    # Dropping the old table cascaded to nothing, and foreign keys are enforced again after.
    assert _rows(conn, "SELECT id, parent_id FROM children ORDER BY id") == [(10, 1), (20, 2)]
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO children VALUES (30, 99)")
    conn.execute("DELETE FROM parents WHERE id = 1")
    assert _rows(conn, "SELECT id FROM children") == [(20,)]


def test_rebuilding_migration_that_orphans_rows_is_refused(tmp_path: Path) -> None:
    conn = connect(tmp_path / "s.db")
    migrate(conn, (PARENTS,))
    with pytest.raises(ConfigError, match="would leave a row of children without its parents"):
        migrate(conn, (PARENTS, _rebuild_parents("0002_rebuild", "id = 1")))
    assert applied(conn) == ["0001_parents"]
    assert conn.execute("SELECT count(*) FROM parents").fetchone()[0] == 2
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_store_from_before_the_deliveries_rebuild_keeps_its_queue(tmp_path: Path) -> None:
    bundled = bundled_migrations()
    before = tuple(m for m in bundled if m.name < "0006")
    conn = connect(tmp_path / "s.db")
    migrate(conn, before)
    conn.executescript(
        "INSERT INTO accounts (service_client_id, hashkey, signature_user_id, created_at)"
        " VALUES ('DEMO_CORP', 'k', 'u', '2026-01-01T00:00:00Z');"
        "INSERT INTO events (id, event_id, service_client_id, event_type, entity,"
        " original_event_time, data) VALUES (7, 'e-7', 'DEMO_CORP', 'profile.created',"
        " 'Profile', 1.0, '{}');"
        "INSERT INTO subscriptions (id, service_client_id, name, url, state, catch_up_on_resume,"
        " provisioning_state, selections, created_at, modified_at) VALUES (3, 'DEMO_CORP', 's',"
        " 'https://x', 'Active', 0, 'Succeeded', '[]', 1.0, 1.0);"
        "INSERT INTO deliveries (id, event_rowid, subscription_id, state, event_time, attempts,"
        " next_attempt_at, last_status) VALUES (41, 7, 3, 'queued', 1.0, 1, 61.0, 503);"
        "INSERT INTO delivery_attempts (delivery_id, attempt_number, started_at, finished_at,"
        " outcome, status) VALUES (41, 1, 1.0, 1.5, 'failed', 503);"
    )
    queue = _rows(conn, "SELECT * FROM deliveries")

    assert migrate(conn) == [m.name for m in bundled if m.name >= "0006"]
    assert _rows(conn, "SELECT * FROM deliveries") == queue
    assert _rows(conn, "SELECT delivery_id, status FROM delivery_attempts") == [(41, 503)]
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE deliveries SET state = 'lost' WHERE id = 41")
    conn.execute("DELETE FROM events WHERE id = 7")  # the queue still follows its event
    assert conn.execute("SELECT count(*) FROM delivery_attempts").fetchone()[0] == 0
