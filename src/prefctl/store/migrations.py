"""Ordered, named schema migrations, each applied in its own transaction and recorded in
``schema_migrations``.

A migration is one file ``store/schema/NNNN_name.sql``; they run in the order of their names. Add a
new file for every change; never edit one that has shipped.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from prefctl.errors import ConfigError
from prefctl.store.db import transaction


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str


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
        with transaction(conn):
            for statement in _statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                (migration.name, time.time()),
            )
        ran.append(migration.name)
    return ran


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
