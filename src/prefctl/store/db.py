"""Connections and transactions on the SQLite store.

The store runs in WAL mode so that the REST API, the dispatcher and CLI commands can read while one
writer writes; ``transaction`` takes the write lock up front (``BEGIN IMMEDIATE``) so a transaction
never fails half-way on a lock upgrade.

    >>> with open_store(path) as conn, transaction(conn):
    ...     conn.execute("INSERT ...")
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager, nullcontext
from pathlib import Path

from prefctl.errors import ConfigError, UsageError
from prefctl.private_files import locked

BUSY_TIMEOUT_MS = 30_000
# How long opening a store waits while ``emulator reset`` deletes it (a few milliseconds).
IN_USE_TIMEOUT_SECONDS = 10.0


def connect(path: Path | str) -> sqlite3.Connection:
    """A connection with prefctl's pragmas. Transactions are explicit (see ``transaction``)."""
    try:
        conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        conn.row_factory = sqlite3.Row
        _use_wal(conn)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    except sqlite3.DatabaseError as exc:
        if is_busy(exc):  # not a bad store: a busy one (the CLI says so)
            raise
        raise ConfigError(f"cannot open the store {path}: {exc}") from None
    return conn


def _use_wal(conn: sqlite3.Connection) -> None:
    # Turning a new store to WAL needs an exclusive lock, and SQLite answers "database is locked"
    # at once, without the busy timeout, while another connection holds one: two commands that
    # open a new store at the same moment. Wait for it as the busy timeout would.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (or "busy"): another connection held a
    lock the whole busy timeout."""
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and (
        "database is locked" in text
        or "database is busy" in text
        or "database table is locked" in text
    )


def in_use(path: Path | str) -> AbstractContextManager[None]:
    """Mark the store at ``path`` in use for the block (a shared lock beside it), so that
    ``emulator reset`` never deletes a store that a command, a dispatcher or an emulator has
    open (``reset_store`` takes the lock exclusively)."""
    if str(path) == ":memory:":
        return nullcontext()
    return locked(
        Path(path),
        shared=True,
        timeout=IN_USE_TIMEOUT_SECONDS,
        busy=lambda: UsageError(
            f"the store {path} is being reset by another prefctl command",
            hint="try again when it has finished",
        ),
    )


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction: committed when the block ends, rolled back if it raises.

    Inside a transaction already open it is a savepoint: if the block raises, its changes alone
    are undone and the outer transaction goes on; otherwise they commit with it (the emulator's
    group commit runs several writes in one transaction this way).
    """
    if conn.in_transaction:
        with _savepoint(conn):
            yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def atomic(conn: sqlite3.Connection) -> AbstractContextManager[object]:
    """A transaction of its own, or a part of the caller's when one is open (no savepoint:
    the caller's transaction is all or nothing already)."""
    return nullcontext() if conn.in_transaction else transaction(conn)


@contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A read transaction: every read in the block sees the store as it was at the first one,
    whatever other connections commit meanwhile (they are not held up; with WAL, the log only
    keeps growing until the block ends). Inside an open transaction, that one's view is used."""
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


@contextmanager
def _savepoint(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("SAVEPOINT nested")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK TO nested")
        conn.execute("RELEASE nested")
        raise
    conn.execute("RELEASE nested")


@contextmanager
def open_store(path: Path | str) -> Iterator[sqlite3.Connection]:
    """Open (creating if needed) and migrate the store at ``path``; closed when the block ends."""
    from prefctl.store.migrations import migrate

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with in_use(path):
        conn = connect(path)
        try:
            migrate(conn)
            yield conn
        finally:
            conn.close()


_STORE_HINT = "start the emulator with 'prefctl emulator start', or pass --store PATH"


def require_store(path: Path) -> None:
    """Raise ConfigError (exit 2) unless ``path`` is a prefctl store.

    For commands that act on a store they are given: they must neither create one nor turn a
    file that is not one (an empty file, another application's SQLite database) into one, which
    ``open_store`` would do. Looks, read-only, for the table every prefctl store has.
    """
    if not path.is_file():
        raise ConfigError(f"no store at {path}", hint=_STORE_HINT)
    probe = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    try:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            found = conn.execute(probe).fetchone()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"cannot open the store {path}: {exc}", hint=_STORE_HINT) from None
    if found is None:
        raise ConfigError(
            f"{path} is not a prefctl store (it has no schema_migrations table)",
            hint="pass the store of an emulator or of 'prefctl dispatcher run'",
        )


# Rows per execution of a multi-row statement at most (see ``execute_rows``).
MAX_ROWS_PER_STATEMENT = 64


def execute_rows(
    conn: sqlite3.Connection,
    statement: Callable[[int], str],
    rows: Sequence[Sequence[object]],
    *,
    first: Sequence[object] = (),
) -> list[sqlite3.Row]:
    """Run a multi-row statement (``INSERT … VALUES (…), (…)``) over ``rows``; returns what its
    executions returned (``RETURNING``), in execution order.

    ``statement(n)`` is the SQL for ``n`` rows, taking ``first`` then each row's parameters. It
    runs for 64, 32, … 1 rows, the binary digits of the count, so at most seven SQL texts per
    statement exist (cache ``statement`` so that sqlite3 reuses their prepared statements). A write
    of tens of rows costs about a third less than ``executemany``, which steps once per row.
    """
    returned: list[sqlite3.Row] = []
    start = 0
    while start < len(rows):
        size = min(MAX_ROWS_PER_STATEMENT, 1 << (len(rows) - start).bit_length() - 1)
        params = list(first)
        for row in rows[start : start + size]:
            params += row
        returned += conn.execute(statement(size), params).fetchall()
        start += size
    return returned
