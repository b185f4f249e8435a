"""Connections and transactions on the SQLite store, and how SQLite's errors read.

The store runs in WAL mode so that the REST API, the dispatcher and CLI commands can read while one
writer writes; ``transaction`` takes the write lock up front (``BEGIN IMMEDIATE``) so a transaction
never fails half-way on a lock upgrade. ``db.py`` opens, creates and checks store files on top of
this (and the migrations use it), so both import it.

    >>> with transaction(conn):
    ...     conn.execute("INSERT ...")

``connect`` returns a ``Store``: the one object per connection that callers outside ``store/``
hold and pass (the package docstring says how it is used).
"""

from __future__ import annotations

import errno
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson

from prefctl.errors import ConfigError, PrefctlError, UsageError
from prefctl.private_files import locked
from prefctl.store.errors import StoreBusyError, StoreDamagedError, StoreDiskFullError, StoreError

if TYPE_CHECKING:
    from prefctl.store import Store as AnyStore

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DAMAGED_HINT",
    "DRIVER_ERROR",
    "IN_USE_TIMEOUT_SECONDS",
    "SQLITE_CORRUPT",
    "SQLITE_FULL",
    "SQLITE_NOTADB",
    "Store",
    "StoreDamagedError",
    "atomic",
    "connect",
    "disk_full",
    "in_use",
    "is_busy",
    "is_damaged",
    "is_disk_full",
    "snapshot",
    "store_error",
    "stored_json",
    "transaction",
]

BUSY_TIMEOUT_MS = 30_000
# The base class of the driver's errors, for the one place that must register for it by class:
# a server's last handler (the emulator's), which hands what it gets to ``store_error``.
DRIVER_ERROR: type[Exception] = sqlite3.Error
# How long opening a store waits while ``emulator reset`` deletes it (a few milliseconds).
IN_USE_TIMEOUT_SECONDS = 10.0


class Store(sqlite3.Connection):
    """One connection to the store: what callers outside ``store/`` hold, pass and annotate.

    The store's operations are the functions of the store modules, named for what they hold and
    taking the Store first (``delivery_claims.claim_due(store, …)``, ``subscriptions.get_subscription``);
    the Store itself offers the unit of work: ``transaction()``, ``atomic()``, ``snapshot()`` and
    ``close()``. Callers never run SQL on it (a test checks that nothing outside ``store/`` calls
    ``execute``), and they catch the store's errors (``store.errors``), never the driver's.

    **[decision]** It is the driver's connection itself (a subclass made by ``connect``), not a
    wrapper around it: an operation reaches SQLite with no call in between, so the dispatcher's
    claim and record loops and the emulator's group writer cost what they did (bench/dispatcher.py,
    bench/api.py). The second backend, PostgreSQL, gives its own ``PgStore`` (postgres.py) with
    the same verbs; the store modules choose their SQL by ``dialect`` where the engines differ
    (a class attribute: reading it costs SQLite's path nothing measurable).
    """

    dialect: Literal["sqlite"] = "sqlite"

    def transaction(self) -> AbstractContextManager[Store]:
        """One write transaction (``transaction``); a savepoint inside one already open."""
        return _transaction(self)

    def atomic(self) -> AbstractContextManager[object]:
        """A transaction of its own, or a part of the caller's when one is open (``atomic``)."""
        return nullcontext() if self.in_transaction else _transaction(self)

    def snapshot(self) -> AbstractContextManager[Store]:
        """A read transaction: every read in the block sees one state of the store."""
        return _snapshot(self)


_Conn = TypeVar("_Conn", bound=sqlite3.Connection)
# A store on either engine (``PgStore``: postgres.py), for the functions below that take both.
_AnyConn = TypeVar("_AnyConn", bound="AnyStore")


def connect(path: Path | str) -> Store:
    """A connection with prefctl's pragmas. Transactions are explicit (see ``transaction``).

    (``store.db.connect`` also takes a ``postgresql://`` URL: this one is SQLite's.)"""
    try:
        conn = sqlite3.connect(
            str(path),
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
            factory=Store,
        )
        conn.row_factory = sqlite3.Row
        _use_wal(conn)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    except sqlite3.DatabaseError as exc:
        if is_busy(exc):  # not a bad store: a busy one (the CLI says so)
            raise
        if is_disk_full(exc):
            raise disk_full(path) from None
        # An I/O error reading a store file that exists is as good as damage for its callers: it
        # cannot be read (the damage property test finds "disk I/O error" for zeroed pages).
        unreadable = is_damaged(exc) or (_code(exc) == SQLITE_IOERR and Path(path).is_file())
        error = StoreDamagedError if unreadable else ConfigError
        hint = DAMAGED_HINT if unreadable else None
        raise error(f"cannot open the store {path}: {exc}", hint=hint) from None
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
    if isinstance(exc, StoreBusyError):
        return True
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and (
        "database is locked" in text
        or "database is busy" in text
        or "database table is locked" in text
    )


# SQLite's primary result codes (https://www.sqlite.org/rescode.html).
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_NOTADB = 26


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full: SQLite's SQLITE_FULL ("database or disk is full")
    or an OSError ENOSPC (or EDQUOT: over the user's quota)."""
    if isinstance(exc, StoreDiskFullError):
        return True
    if isinstance(exc, sqlite3.Error):
        return _code(exc) == SQLITE_FULL or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


# What SQLite says when the schema it reads no longer holds a table, column or index prefctl's
# migrations made: prefctl's statements all run against the migrated schema (every one is
# tested), and none drops anything, so while a store is served this means its schema pages
# were overwritten.
_SCHEMA_GONE = ("no such table", "no such column", "no such index")


def is_damaged(exc: BaseException) -> bool:
    """Whether ``exc`` says the store file is damaged: SQLITE_CORRUPT, SQLITE_NOTADB, text that
    is not UTF-8 (prefctl writes none: the bytes were overwritten), a table, column or index of
    the migrated schema gone (see ``_SCHEMA_GONE``), or a ``StoreDamagedError``."""
    if isinstance(exc, StoreDamagedError):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc)
    return (
        _code(exc) in (SQLITE_CORRUPT, SQLITE_NOTADB)
        or "malformed" in text
        or text.startswith("Could not decode to UTF-8")
        or text.startswith(_SCHEMA_GONE)
    )


def stored_json(text: str | bytes) -> Any:
    """The JSON value of a column prefctl wrote; ``StoreDamagedError`` when it no longer parses
    (prefctl stores only valid JSON: the bytes were overwritten, in an overflow page SQLite's
    own checks do not read)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise StoreDamagedError(
            f"a stored value no longer reads as JSON ({exc})", hint=DAMAGED_HINT, reason=str(exc)
        ) from None


def disk_full(path: Path | str | None, reason: str = "") -> StoreDiskFullError:
    """The error of a write refused for want of space on the disk of ``path``."""
    where = f" of the store {path}" if path else ""
    return StoreDiskFullError(
        f"the disk{where} is full: nothing was written",
        hint="free some space on it and try again; what was stored before is intact",
        reason=reason,
    )


def store_error(exc: BaseException) -> PrefctlError | None:
    """``exc`` in prefctl's words when it is the driver's: a
    StoreDamagedError, StoreDiskFullError, StoreBusyError, or StoreError for any other error of
    the driver; ``exc`` itself when it is one of these already; None for anything else. Every
    error leaving a transaction or a snapshot is translated so; a caller at the edge of the
    process (the CLI's last handler, the emulator's) passes what escaped a plain read here."""
    if isinstance(exc, StoreError):
        return exc
    if not isinstance(exc, sqlite3.Error):  # a full disk's OSError is not the store's own
        if "psycopg" in sys.modules:  # a PostgreSQL store is open in this process
            from prefctl.store.postgres import pg_store_error

            return pg_store_error(exc)
        return None
    reason = str(exc)
    if is_damaged(exc):
        return StoreDamagedError(
            f"the store is damaged: {reason}", hint=DAMAGED_HINT, reason=reason
        )
    if is_disk_full(exc):
        return StoreDiskFullError(
            f"the disk is full: {reason}", hint="free some space on it and try again", reason=reason
        )
    if is_busy(exc):
        return StoreBusyError(
            "the store is busy: another prefctl command kept it locked for over"
            f" {BUSY_TIMEOUT_MS / 1000:g} s",
            hint="try again when it has finished",
            reason=reason,
        )
    return StoreError(f"the store failed: {reason}", reason=reason)


def _translated(exc: BaseException, conn: sqlite3.Connection) -> BaseException:
    """What leaves a transaction or a snapshot for ``exc``: a driver error in prefctl's words
    (a full disk naming the store's file), anything else as it is."""
    if not isinstance(exc, sqlite3.Error):
        return exc
    if is_disk_full(exc):
        return disk_full(_store_file(conn), str(exc))
    return store_error(exc) or exc


DAMAGED_HINT = (
    "check it with: sqlite3 FILE 'PRAGMA integrity_check'; restore a copy, or start afresh with"
    " 'prefctl emulator reset'"
)


def _store_file(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("PRAGMA database_list").fetchone()
    except sqlite3.Error:
        return None
    return str(row[2]) if row is not None and row[2] else None


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


def transaction(conn: _AnyConn) -> AbstractContextManager[_AnyConn]:
    """One write transaction: committed when the block ends, rolled back if it raises.

    Inside a transaction already open it is a savepoint: if the block raises, its changes alone
    are undone and the outer transaction goes on; otherwise they commit with it (the emulator's
    group commit runs several writes in one transaction this way). ``conn.transaction()`` says
    the same; this form also takes a plain ``sqlite3.Connection``.
    """
    if conn.dialect == "postgresql":
        return conn.transaction()  # type: ignore[return-value]
    return _transaction(conn)  # type: ignore[type-var]


@contextmanager
def _transaction(conn: _Conn) -> Iterator[_Conn]:
    if conn.in_transaction:
        with _savepoint(conn):
            yield conn
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:  # busy past the timeout: another process holds the lock
        raise _translated(exc, conn) from exc
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        # After some errors (a full disk, an I/O error) SQLite has rolled the transaction back
        # itself: a ROLLBACK would then fail and hide the error that matters.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        translated = _translated(exc, conn)
        if translated is not exc:
            raise translated from exc
        raise


def atomic(conn: AnyStore) -> AbstractContextManager[object]:
    """A transaction of its own, or a part of the caller's when one is open (no savepoint:
    the caller's transaction is all or nothing already)."""
    return nullcontext() if conn.in_transaction else transaction(conn)


def snapshot(conn: _AnyConn) -> AbstractContextManager[_AnyConn]:
    """A read transaction: every read in the block sees the store as it was at the first one,
    whatever other connections commit meanwhile (they are not held up; with WAL, the log only
    keeps growing until the block ends). Inside an open transaction, that one's view is used."""
    if conn.dialect == "postgresql":
        return conn.snapshot()  # type: ignore[return-value]
    return _snapshot(conn)  # type: ignore[type-var]


@contextmanager
def _snapshot(conn: _Conn) -> Iterator[_Conn]:
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN")
    try:
        yield conn
    except sqlite3.Error as exc:
        raise _translated(exc, conn) from exc
    finally:
        conn.execute("COMMIT")


@contextmanager
def _savepoint(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("SAVEPOINT nested")
    try:
        yield
    except BaseException as exc:
        # Not in a transaction any more: SQLite rolled the whole of it back (a full disk), so
        # the enclosing transaction fails as well (``conn.in_transaction`` tells its caller).
        if conn.in_transaction:
            conn.execute("ROLLBACK TO nested")
            conn.execute("RELEASE nested")
        translated = _translated(exc, conn)
        if translated is not exc:
            raise translated from exc
        raise
    conn.execute("RELEASE nested")
