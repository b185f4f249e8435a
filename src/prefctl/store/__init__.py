"""The store of the emulator and the dispatcher: the one seam between prefctl and its database.

Everything prefctl keeps (accounts, profiles, subscriptions, events, the delivery queue, alerts)
is read and written here, and only here:

- ``Store`` is the one object per connection that callers hold and pass:
  ``store.db.open_store(location)`` or ``store.db.connect(location)`` gives one, on SQLite (a
  path: ``connection.Store``) or PostgreSQL (a ``postgresql://`` URL: ``postgres.PgStore``). Its
  verbs are the unit of work: ``transaction()``, ``atomic()``, ``snapshot()``, ``close()``;
  ``dialect`` says which engine it is, for the store modules' SQL where the engines differ.
- The operations are functions of the modules named for what they hold, each taking the Store
  first and speaking the callers' words: ``delivery_claims.claim_due``, ``subscriptions.get_subscription``,
  ``delivery_stats.delivery_counts``, ``events.stored_rowid`` …
- Failures are prefctl's (``errors.py``: StoreError, StoreBusyError, StoreDamagedError,
  StoreDiskFullError); ``store_error`` words what a plain read let through.
- SQL, the drivers (``sqlite3``, ``psycopg``), rowids, PRAGMAs and the drivers' errors never
  leave this package: an import-linter contract (pyproject.toml) and a test
  (tests/store/test_seam.py) say so.

    >>> from prefctl.store.db import open_store
    >>> from prefctl.store.delivery_claims import release_claims
    >>> with open_store(path) as store, store.transaction():
    ...     release_claims(store, owner)

CONTRIBUTING.md ("The store seam", "Two backends") says how to add an operation and how the two
backends are laid out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3
    from typing import TypeAlias

    from prefctl.store.connection import Store as SqliteStore
    from prefctl.store.postgres import PgRow, PgStore

    # What callers annotate: a store on either engine (the SQLite ``Store`` of connection.py or
    # the ``PgStore`` of postgres.py), both with the same verbs and a ``dialect``.
    Store: TypeAlias = SqliteStore | PgStore
    # A row either store reads: ``row["col"]``, ``row[0]``, ``keys()``.
    Row: TypeAlias = sqlite3.Row | PgRow

__all__ = ["Store"]


def __getattr__(name: str) -> Any:
    # Lazily: importing a light module of the package (timestamps) does not load the driver.
    if name == "Store":
        from prefctl.store.connection import Store

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
