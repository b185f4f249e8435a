"""Connections and transactions on the SQLite store.

The store runs in WAL mode so that the REST API, the dispatcher and CLI commands can read while one
writer writes; ``transaction`` takes the write lock up front (``BEGIN IMMEDIATE``) so a transaction
never fails half-way on a lock upgrade.

    >>> with open_store(path) as conn, transaction(conn):
    ...     conn.execute("INSERT ...")
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager, nullcontext
from pathlib import Path

from prefctl.config import paths
from prefctl.errors import ConfigError, DiskFullError, UsageError
from prefctl.private_files import locked, make_private_dir

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
        if is_disk_full(exc):
            raise disk_full(path) from None
        raise ConfigError(f"cannot open the store {path}: {exc}", hint=_damaged_hint(exc)) from None
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


# SQLite's primary result codes (https://www.sqlite.org/rescode.html).
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_NOTADB = 26


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full: SQLite's SQLITE_FULL ("database or disk is full")
    or an OSError ENOSPC (or EDQUOT: over the user's quota)."""
    if isinstance(exc, sqlite3.Error):
        return _code(exc) == SQLITE_FULL or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def is_damaged(exc: BaseException) -> bool:
    """Whether ``exc`` says the store file is damaged: SQLITE_CORRUPT, SQLITE_NOTADB, or text
    that is not UTF-8 (prefctl writes none: the bytes were overwritten)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc)
    return (
        _code(exc) in (SQLITE_CORRUPT, SQLITE_NOTADB)
        or "malformed" in text
        or text.startswith("Could not decode to UTF-8")
    )


def disk_full(path: Path | str | None) -> DiskFullError:
    """The error of a write refused for want of space on the disk of ``path``."""
    where = f" of the store {path}" if path else ""
    return DiskFullError(
        f"the disk{where} is full: nothing was written",
        hint="free some space on it and try again; what was stored before is intact",
    )


DAMAGED_HINT = (
    "check it with: sqlite3 FILE 'PRAGMA integrity_check'; restore a copy, or start afresh with"
    " 'prefctl emulator reset'"
)


def _damaged_hint(exc: BaseException) -> str | None:
    return DAMAGED_HINT if is_damaged(exc) else None


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
        conn.execute("COMMIT")
    except BaseException as exc:
        # After some errors (a full disk, an I/O error) SQLite has rolled the transaction back
        # itself: a ROLLBACK would then fail and hide the error that matters.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if is_disk_full(exc):
            raise disk_full(_store_file(conn)) from exc
        raise


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
    except BaseException as exc:
        # Not in a transaction any more: SQLite rolled the whole of it back (a full disk), so
        # the enclosing transaction fails as well (``conn.in_transaction`` tells its caller).
        if conn.in_transaction:
            conn.execute("ROLLBACK TO nested")
            conn.execute("RELEASE nested")
        if is_disk_full(exc):
            raise disk_full(_store_file(conn)) from exc
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
            try:
                migrate(conn)
            except sqlite3.DatabaseError as exc:
                if is_damaged(exc):
                    raise _damaged(Path(path), exc) from None
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


def check_integrity(
    conn: sqlite3.Connection, path: Path, *, timeout: float = QUICK_CHECK_SECONDS
) -> bool:
    """ConfigError (exit 2) naming ``path`` when SQLite's ``PRAGMA quick_check`` finds the store
    damaged. Bounded by ``timeout``: a store too large to check in that time is not checked
    (returns False; True when it was checked and is sound)."""
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


def _damaged(path: Path, reason: object) -> ConfigError:
    return ConfigError(f"the store {path} is damaged ({reason})", hint=DAMAGED_HINT)


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
