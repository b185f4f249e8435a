"""What shell completion offers from a store: subscription names and Ids, dead letters' EventIds,
delivery ids, ProfileIds, alert ids.

Every function reads the store read-only with a short lock timeout and answers an empty list
when there is no store, it is locked, or it is of another version: a TAB must answer at once and
never print an error into the prompt. Imports nothing but ``sqlite3``, so that a TAB costs no more
than the query (``prefctl.store.db`` brings the migrations and the error classes). A PostgreSQL
store (a ``postgresql://`` URL) is read through ``PgStore`` with a one-second connect timeout
and a statement timeout of ``_TIMEOUT_S``; any failure answers an empty list as well.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LIMIT = 200  # a shell shows no more than this usefully; the newest come first
_TIMEOUT_S = 0.2


def _open(store: Path | str) -> Any:
    """A connection that reads the store, or None when it cannot be read at once."""
    from prefctl.store.postgres import is_postgres_location

    if is_postgres_location(store):
        from prefctl.errors import PrefctlError
        from prefctl.store.postgres import connect_postgres

        try:
            return connect_postgres(
                str(store), connect_timeout=1, statement_timeout_ms=int(_TIMEOUT_S * 1000)
            )
        except PrefctlError:  # unreachable, refused, no driver: nothing to offer
            return None
    if not Path(store).is_file():
        return None
    try:
        return sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=_TIMEOUT_S)
    except sqlite3.Error:
        return None


@contextmanager
def _reading(store: Path | str) -> Iterator[Any]:
    conn = _open(store)
    try:
        yield conn
    finally:
        if conn is not None:
            conn.close()


def _values(store: Path | str, sql: str) -> list[str]:
    from prefctl.errors import PrefctlError

    with _reading(store) as conn:
        if conn is None:
            return []
        try:
            rows = conn.execute(sql, (LIMIT,)).fetchall()
        except (sqlite3.Error, PrefctlError):  # locked, damaged, another version, unreachable
            return []
    return [str(value) for row in rows for value in row]


def subscription_refs(store: Path | str) -> list[str]:
    """Names, then Ids, of the subscriptions that are not deleted."""
    pairs = _values(
        store, "SELECT name, id FROM subscriptions WHERE deleted_at IS NULL ORDER BY id LIMIT ?"
    )
    return list(dict.fromkeys([*pairs[0::2], *pairs[1::2]]))


def dead_letter_event_ids(store: Path | str) -> list[str]:
    """EventIds of the dead letters, newest first."""
    return list(
        dict.fromkeys(
            _values(
                store,
                "SELECT e.event_id FROM deliveries d JOIN events e ON e.id = d.event_rowid"
                " WHERE d.state = 'dead_lettered' ORDER BY d.id DESC LIMIT ?",
            )
        )
    )


def delivery_ids(store: Path | str) -> list[str]:
    """Ids of the deliveries, newest first."""
    return _values(store, "SELECT id FROM deliveries ORDER BY id DESC LIMIT ?")


def profile_ids(store: Path | str) -> list[str]:
    """ProfileIds of the customer profiles, newest first."""
    return _values(store, "SELECT profile_id FROM profiles ORDER BY profile_id DESC LIMIT ?")
