"""What the store modules write differently for each engine, in one place.

The modules run the same SQL on SQLite and PostgreSQL wherever the engines agree and branch on
``store.dialect`` where they do not. The differences the delivery queue meets are few, and
these helpers name them:

- ``portable(conn, sql)``: SQLite's planner hints are dropped for PostgreSQL, which has none (its
  planner picks the same partial indexes and join order by itself): ``INDEXED BY name`` goes,
  and ``CROSS JOIN … ON`` (SQLite: join in this order) becomes a plain ``JOIN``;
- ``any_of(conn, column, values)``: "``column`` is one of ``values``": SQLite unpacks a JSON array
  (``json_each``), PostgreSQL compares with an array parameter (``= ANY``);
- ``lock_account(conn, account)``: on PostgreSQL, serialize the account's read-then-write changes
  (SQLite's write transaction does already);
- ``notify_due(conn)``: on PostgreSQL, tell the dispatchers that listen (``store/wakeups.py``)
  that deliveries came due, in the transaction that made them so; SQLite's dispatchers poll.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = ["DUE_CHANNEL", "any_of", "is_postgres", "lock_account", "notify_due", "portable"]

# The channel of ``NOTIFY`` that wakes an idle dispatcher on PostgreSQL.
DUE_CHANNEL = "prefctl_deliveries_due"

_HINT = re.compile(r"\s+INDEXED BY \w+")


def is_postgres(conn: object) -> bool:
    """Whether ``conn`` is a PostgreSQL store (``PgStore``)."""
    return getattr(conn, "dialect", "sqlite") == "postgresql"


def portable(conn: object, sql: str) -> str:
    """``sql`` for ``conn``'s engine: as written for SQLite, without index hints otherwise."""
    return _without_hints(sql) if is_postgres(conn) else sql


@functools.lru_cache(maxsize=256)
def _without_hints(sql: str) -> str:
    return _HINT.sub("", sql).replace(" CROSS JOIN ", " JOIN ")


def any_of(conn: object, column: str, values: Iterable[Any]) -> tuple[str, Any]:
    """The condition "``column`` is one of ``values``" and its one parameter, for ``conn``."""
    if is_postgres(conn):
        return f"{column} = ANY(?)", list(values)
    condition = f"{column} IN (SELECT value FROM json_each(?))"  # noqa: S608 (a column name)
    return condition, orjson.dumps(list(values)).decode()


def notify_due(conn: Any) -> None:
    """On PostgreSQL, wake the listening dispatchers when this transaction commits (one
    notification per transaction however often it is called: PostgreSQL folds equal ones)."""
    if is_postgres(conn):
        conn.execute(f"NOTIFY {DUE_CHANNEL}")


def lock_account(conn: Any, account: str) -> None:
    """Make this transaction the only writer of ``account``'s read-then-write changes until it
    ends (settings checked against each other, the one-Url-per-event-type rule of
    subscriptions). SQLite's write transactions hold the whole store already; on PostgreSQL the
    account's row is locked (``FOR NO KEY UPDATE``), so two API workers serialize on it, as their
    writes would on SQLite, instead of each deciding on what the other has not committed.

    Not ``FOR UPDATE``: that also blocks the foreign-key checks (``FOR KEY SHARE``) of writes to
    the account's other rows, so a handshake runner that had updated a subscription (holding the
    subscriptions version row) and then waited on its check deadlocked with a create that held
    the account and waited on that version row (a 503 "busy" on PostgreSQL)."""
    if is_postgres(conn):
        conn.execute(
            "SELECT 1 FROM accounts WHERE service_client_id = ? FOR NO KEY UPDATE", (account,)
        )
