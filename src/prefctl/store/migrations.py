"""Ordered, named schema migrations, each applied in its own transaction and recorded in
``schema_migrations``.

A migration is one file ``store/schema/NNNN_name.sql``; they run in the order of their names. Add a
new file for every change; never edit one that has shipped.

A migration that rebuilds a table (SQLite cannot alter a constraint in place) starts with the line
``-- prefctl: foreign_keys=off``. It then runs as SQLite's table-rebuild procedure asks
(https://www.sqlite.org/lang_altertable.html#otheralter): foreign keys off around its transaction,
so dropping the old table cascades to nothing, and ``PRAGMA foreign_key_check`` clean before its
commit.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from prefctl.errors import ConfigError
from prefctl.store.connection import transaction

FOREIGN_KEYS_OFF = "-- prefctl: foreign_keys=off"


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str

    @property
    def rebuilds_tables(self) -> bool:
        """Whether it runs with foreign keys off (its first line is ``FOREIGN_KEYS_OFF``)."""
        return self.sql.lstrip().startswith(FOREIGN_KEYS_OFF)


def bundled_migrations() -> tuple[Migration, ...]:
    """The migrations shipped in ``prefctl/store/schema``, in order."""
    from importlib.resources import files

    folder = files("prefctl.store") / "schema"
    names = sorted(f.name for f in folder.iterdir() if f.name.endswith(".sql"))
    return tuple(
        Migration(name.removesuffix(".sql"), (folder / name).read_text(encoding="utf-8"))
        for name in names
    )


def applied(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations already applied, in order."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations"
        " (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    return [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY rowid")]


def migrate(conn: sqlite3.Connection, migrations: tuple[Migration, ...] | None = None) -> list[str]:
    """Apply the migrations not yet applied; returns their names. A failing one rolls back."""
    migrations = bundled_migrations() if migrations is None else migrations
    done = set(applied(conn))
    known = {m.name for m in migrations}
    unknown = [name for name in done if name not in known]
    if unknown:
        raise ConfigError(
            f"the store was written by a newer prefctl (migration '{unknown[0]}' is unknown)",
            hint="upgrade prefctl, or use another --data-dir",
        )
    ran = []
    for migration in migrations:
        if migration.name in done:
            continue
        rebuilds = migration.rebuilds_tables
        with _foreign_keys_off(conn) if rebuilds else nullcontext(), transaction(conn):
            if _is_applied(conn, migration.name):  # by another command opening the store too
                continue
            for statement in _statements(migration.sql):
                conn.execute(statement)
            if rebuilds:
                _check_foreign_keys(conn, migration.name)
            conn.execute(
                "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                (migration.name, time.time()),
            )
        ran.append(migration.name)
    return ran


def _is_applied(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute("SELECT 1 FROM schema_migrations WHERE name = ?", (name,)).fetchone()
    return found is not None


@contextmanager
def _foreign_keys_off(conn: sqlite3.Connection) -> Iterator[None]:
    # A no-op inside a transaction, so it is set around the migration's own.
    was_on = bool(conn.execute("PRAGMA foreign_keys").fetchone()[0])
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        yield
    finally:
        if was_on:
            conn.execute("PRAGMA foreign_keys=ON")


def _check_foreign_keys(conn: sqlite3.Connection, name: str) -> None:
    broken = conn.execute("PRAGMA foreign_key_check").fetchone()
    if broken is not None:
        raise ConfigError(
            f"migration '{name}' would leave a row of {broken[0]} without its {broken[2]} row",
            hint="the store is unchanged; report this with the store's schema",
        )


def _statements(sql: str) -> list[str]:
    # executescript() would commit the surrounding transaction; split on complete statements.
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
