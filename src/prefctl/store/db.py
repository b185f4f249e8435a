"""Store files: open (creating and migrating on first use), create, check, and the connections
and transactions on them (``connection.py``, re-exported here: most callers need both).

    >>> with open_store(path) as conn, transaction(conn):
    ...     conn.execute("INSERT ...")
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from prefctl.config import paths
from prefctl.errors import ConfigError, DiskFullError
from prefctl.private_files import make_private_dir
from prefctl.store import connection
from prefctl.store.connection import (
    BUSY_TIMEOUT_MS,
    DAMAGED_HINT,
    DRIVER_ERROR,
    IN_USE_TIMEOUT_SECONDS,
    SQLITE_CORRUPT,
    SQLITE_FULL,
    SQLITE_NOTADB,
    Store,
    StoreDamagedError,
    atomic,
    disk_full,
    in_use,
    is_busy,
    is_damaged,
    is_disk_full,
    snapshot,
    store_error,
    transaction,
)
from prefctl.store.postgres import is_postgres_location

if TYPE_CHECKING:
    from prefctl.store import Store as AnyStore

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DAMAGED_HINT",
    "DRIVER_ERROR",
    "IN_USE_TIMEOUT_SECONDS",
    "MAX_ROWS_PER_STATEMENT",
    "QUICK_CHECK_SECONDS",
    "SQLITE_CORRUPT",
    "SQLITE_FULL",
    "SQLITE_NOTADB",
    "Store",
    "StoreDamagedError",
    "atomic",
    "check_integrity",
    "check_readable",
    "connect",
    "create_store",
    "damage_found",
    "disk_full",
    "ensure_private_store",
    "execute_rows",
    "in_use",
    "is_busy",
    "is_damaged",
    "is_disk_full",
    "is_postgres_location",
    "open_store",
    "refuse_emptied",
    "require_store",
    "snapshot",
    "sqlite_file",
    "store_error",
    "transaction",
]


def sqlite_file(location: Path | str) -> Path | str:
    """The SQLite file a location that is not a PostgreSQL URL names (``sqlite:PATH`` → PATH)."""
    return _sqlite_path(location)


def _sqlite_path(location: Path | str) -> Path | str:
    # ``sqlite:PATH`` (or ``sqlite://PATH``) names the same file as PATH.
    if isinstance(location, str) and location.startswith("sqlite:"):
        rest = location.removeprefix("sqlite:")
        return rest.removeprefix("//") if rest.startswith("///") else rest
    return location


@overload
def connect(location: Path) -> Store: ...
@overload
def connect(location: str) -> AnyStore: ...
def connect(location: Path | str) -> AnyStore:
    """A connection to the store at ``location``: a SQLite file (a path, or ``sqlite:PATH``),
    or a PostgreSQL database (``postgresql://USER@HOST:PORT/DB``, a ``PgStore``). Not migrated:
    ``open_store`` migrates."""
    if is_postgres_location(location):
        from prefctl.store.postgres import connect_postgres

        return connect_postgres(str(location))
    return connection.connect(_sqlite_path(location))


@overload
def open_store(location: Path) -> AbstractContextManager[Store]: ...
@overload
def open_store(location: str) -> AbstractContextManager[AnyStore]: ...
def open_store(location: Path | str) -> AbstractContextManager[AnyStore]:
    """Open (creating if needed) and migrate the store at ``location`` (a SQLite path, or a
    ``postgresql://`` URL: see ``connect``); closed when the block ends."""
    return _open_store(location)


@contextmanager
def _open_store(location: Path | str) -> Iterator[AnyStore]:
    from prefctl.store.migrations import migrate

    if is_postgres_location(location):
        store = connect(str(location))
        try:
            migrate(store)
            yield store
        finally:
            store.close()
        return
    path = _sqlite_path(location)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with in_use(path):
        conn = connection.connect(path)
        try:
            try:
                migrate(conn)
            except (sqlite3.DatabaseError, StoreDamagedError) as exc:
                if is_damaged(exc):
                    raise _damaged(Path(path), getattr(exc, "reason", exc)) from None
                raise
            yield conn
        finally:
            conn.close()


def create_store(path: Path) -> None:
    """Create a migrated store at ``path`` (mode 0600) unless one exists, atomically: it is
    built beside it and linked into place, so ``path`` never exists as an empty file (an empty
    one is a store that lost its data: see ``refuse_emptied``)."""
    from prefctl.store.migrations import migrate

    scratch = path.with_name(f".{path.name}.new-{os.getpid()}-{time.monotonic_ns()}")
    try:
        fd = os.open(scratch, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.chmod(scratch, 0o600)
        with closing(connect(scratch)) as conn:
            migrate(conn)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        try:
            os.link(scratch, path)
        except FileExistsError:
            pass  # another command created it meanwhile: theirs is as good
    except DiskFullError:
        raise disk_full(path) from None
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full(path) from None
        raise
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{scratch}{suffix}").unlink(missing_ok=True)


def refuse_emptied(path: Path) -> None:
    """ConfigError (exit 2) when the store at ``path`` exists but is empty (0 bytes, no
    write-ahead log): its account and credentials are lost, and opening it would silently make a
    new account whose credentials no profile holds."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    wal = Path(f"{path}-wal")
    if size == 0 and not (wal.exists() and wal.stat().st_size > 0):
        raise ConfigError(
            f"the store {path} is empty (0 bytes): its account and credentials are lost",
            hint="restore it from a copy, or run 'prefctl emulator reset' to start a new account"
            " (profile 'local' then gets new credentials)",
        )


# How long the start-up check of a store may take at most (see ``check_integrity``).
QUICK_CHECK_SECONDS = 5.0


def check_integrity(conn: AnyStore, path: Path, *, timeout: float = QUICK_CHECK_SECONDS) -> bool:
    """ConfigError (exit 2) naming ``path`` when SQLite's ``PRAGMA quick_check`` finds the store
    damaged. Bounded by ``timeout``: a store too large to check in that time is not checked
    (returns False; True when it was checked and is sound). A PostgreSQL store is the server's
    to keep sound: not checked here (False)."""
    if conn.dialect == "postgresql":
        return False
    deadline = time.monotonic() + timeout
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            return False
        raise _damaged(path, exc) from None
    except sqlite3.DatabaseError as exc:
        raise _damaged(path, exc) from None
    finally:
        conn.set_progress_handler(None, 0)
    problems = [str(row[0]) for row in rows if row[0] != "ok"]
    if problems:
        raise _damaged(path, "; ".join(problems))
    return True


def check_readable(conn: AnyStore) -> None:
    """Read a row of the store, so that a store that cannot be read (damaged, gone, a full disk
    on the way) says so now: raises a StoreError, returns None when it reads."""
    try:
        conn.execute("SELECT 1 FROM accounts LIMIT 1").fetchall()
    except sqlite3.Error as exc:  # (a PostgreSQL store raises prefctl's errors itself)
        raise (store_error(exc) or exc) from exc


def damage_found(path: Path | str, *, timeout: float = QUICK_CHECK_SECONDS) -> str | None:
    """What SQLite's quick check finds damaged in the store at ``path`` (read only, on a
    connection of its own, bounded by ``timeout``); None when it reads as sound or could not be
    checked in time. For a failure that may be the damage's doing. A PostgreSQL store is the
    server's to keep sound: None."""
    if is_postgres_location(path):
        return None
    try:
        conn = connect(path)
    except Exception as exc:  # any failure to open it is the answer
        return str(exc)
    try:
        check_integrity(conn, Path(path), timeout=timeout)
    except Exception as exc:  # the quick check, or SQLite failing to run it
        return str(exc)
    finally:
        conn.close()
    return None


def _damaged(path: Path, reason: object) -> StoreDamagedError:
    return StoreDamagedError(f"the store {path} is damaged ({reason})", hint=DAMAGED_HINT)


_STORE_HINT = "start the emulator with 'prefctl emulator start', or pass --store PATH|URL"


def require_store(location: Path | str) -> None:
    """Raise ConfigError (exit 2) unless ``location`` is a prefctl store.

    For commands that act on a store they are given: they must neither create one nor turn a
    file that is not one (an empty file, another application's SQLite database) into one, which
    ``open_store`` would do. Looks, read-only, for the table every prefctl store has. A
    PostgreSQL database (a ``postgresql://`` URL) is looked into the same way, on a connection
    of its own: unreachable is UnreachableError (exit 5), a refused password AuthError (exit 3).
    """
    if is_postgres_location(location):
        _require_postgres_store(str(location))
        return
    path = Path(_sqlite_path(location))
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


def _require_postgres_store(url: str) -> None:
    from prefctl.store.postgres import connect_postgres, redacted

    with closing(connect_postgres(url)) as conn:
        found = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not found[0]:
        raise ConfigError(
            f"the PostgreSQL database {redacted(url)} is not a prefctl store"
            " (it has no schema_migrations table)",
            hint="pass the database of an emulator or of 'prefctl dispatcher run'",
        )


# Rows per execution of a multi-row statement at most (see ``execute_rows``).
MAX_ROWS_PER_STATEMENT = 64


def execute_rows(
    conn: AnyStore,
    statement: Callable[[int], str],
    rows: Sequence[Sequence[object]],
    *,
    first: Sequence[object] = (),
) -> list[Any]:
    """Run a multi-row statement (``INSERT … VALUES (…), (…)``) over ``rows``; returns what its
    executions returned (``RETURNING``), in execution order.

    ``statement(n)`` is the SQL for ``n`` rows, taking ``first`` then each row's parameters. It
    runs for 64, 32, … 1 rows, the binary digits of the count, so at most seven SQL texts per
    statement exist (cache ``statement`` so that sqlite3 reuses their prepared statements). A write
    of tens of rows costs about a third less than ``executemany``, which steps once per row.
    """
    returned: list[Any] = []
    start = 0
    while start < len(rows):
        size = min(MAX_ROWS_PER_STATEMENT, 1 << (len(rows) - start).bit_length() - 1)
        params = list(first)
        for row in rows[start : start + size]:
            params += row
        cursor = conn.execute(statement(size), params)
        if cursor.description is not None:  # rows to return (PostgreSQL's refuses to fetch none)
            returned += cursor.fetchall()
        start += size
    return returned


def ensure_private_store(data_dir: Path) -> Path:
    """Create the data dir (0700) and a migrated store (0600) if missing; the store's path.

    SQLite creates its -wal and -shm files with the main file's mode, so they stay private too.
    An existing store that is empty is refused (``store.db.refuse_emptied``): it lost its data.
    """
    make_private_dir(data_dir, "the data folder")
    path = paths.store_path(data_dir)
    refuse_emptied(path)
    if not path.exists():
        create_store(path)
    return path
