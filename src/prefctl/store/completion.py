"""What shell completion offers from a store: subscription names and Ids, dead letters' EventIds,
delivery ids, ProfileIds, alert ids.

Every function reads the store read-only with a short lock timeout and answers an empty list
when there is no store, it is locked, or it is of another version: a TAB must answer at once and
never print an error into the prompt. Imports nothing but ``sqlite3``, so that a TAB costs no more
than the query (``prefctl.store.db`` brings the migrations and the error classes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

LIMIT = 200  # a shell shows no more than this usefully; the newest come first
_TIMEOUT_S = 0.2


@contextmanager
def _reading(store: Path) -> Iterator[sqlite3.Connection | None]:
    if not store.is_file():
        yield None
        return
    try:
        conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=_TIMEOUT_S)
    except sqlite3.Error:
        yield None
        return
    try:
        yield conn
    finally:
        conn.close()


def _values(store: Path, sql: str) -> list[str]:
    with _reading(store) as conn:
        if conn is None:
            return []
        try:
            rows = conn.execute(sql, (LIMIT,)).fetchall()
        except sqlite3.Error:  # locked, damaged, or a store of another version
            return []
    return [str(value) for row in rows for value in row]


def subscription_refs(store: Path) -> list[str]:
    """Names, then Ids, of the subscriptions that are not deleted."""
    pairs = _values(
        store, "SELECT name, id FROM subscriptions WHERE deleted_at IS NULL ORDER BY id LIMIT ?"
    )
    return list(dict.fromkeys([*pairs[0::2], *pairs[1::2]]))


def dead_letter_event_ids(store: Path) -> list[str]:
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


def delivery_ids(store: Path) -> list[str]:
    """Ids of the deliveries, newest first."""
    return _values(store, "SELECT id FROM deliveries ORDER BY id DESC LIMIT ?")


def profile_ids(store: Path) -> list[str]:
    """ProfileIds of the customer profiles, newest first."""
    return _values(store, "SELECT profile_id FROM profiles ORDER BY profile_id DESC LIMIT ?")
