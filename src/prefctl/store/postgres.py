"""The store on PostgreSQL (15 or newer): ``PgStore``, the same verbs as the SQLite ``Store``.

A team that shares one emulator runs it on PostgreSQL (CONTRIBUTING.md, "Two backends"); the
store modules run the same SQL on both engines wherever the engines agree, and choose by
``store.dialect`` where they differ. ``PgStore`` makes that possible with little ceremony:

- the SQL text keeps SQLite's placeholders: ``?`` (in order), ``?N`` (numbered) and ``:name``
  (named, with a mapping of parameters). Each text is translated once (cached) to PostgreSQL's
  ``$N`` and run through psycopg's raw-query cursor, so no ``%`` needs escaping;
- rows read as ``sqlite3.Row`` does: ``row["col"]``, ``row[0]``, ``keys()``, ``dict(row)``;
- transactions are explicit as on SQLite: ``transaction()`` (a savepoint inside one already open),
  ``atomic()``, ``snapshot()`` (one consistent view: REPEATABLE READ, READ ONLY);
- psycopg's errors leave in prefctl's words (``store_error``): a serialization failure, a
  deadlock or a lock or statement timeout is a StoreBusyError, a full disk (SQLSTATE 53100) a
  StoreDiskFullError; a server that cannot be reached is an UnreachableError (exit 5) naming the
  host, a refused password an AuthError (exit 3), and neither ever shows the password.

psycopg is the optional extra ``postgres``; this module imports it when a PostgreSQL store is
opened, and says how to install it when it is missing.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, Protocol

from prefctl.errors import ConfigError, PrefctlError
from prefctl.store.postgres_errors import (
    connect_error,
    is_postgres_location,
    pg_store_error,
    redacted,
    without_password,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "PgCursor",
    "PgRow",
    "PgStore",
    "connect_postgres",
    "is_postgres_location",
    "pg_store_error",
    "redacted",
    "translate",
]

# How long a statement waits for a lock held by another connection before it fails (busy), as
# SQLite's busy timeout does for its write lock.
LOCK_TIMEOUT_MS = 30_000
CONNECT_TIMEOUT_SECONDS = 10

_INSTALL_HINT = (
    "install prefctl with its PostgreSQL extra: pip install '.[postgres]' in prefctl's clone"
    " (or the wheel with [postgres] after its name)"
)


class PgRow:
    """A row as ``sqlite3.Row`` reads: by column name, by index, ``keys()``, ``dict(row)``."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: tuple[Any, ...], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: int | str | slice) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def keys(self) -> list[str]:
        return list(self._index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PgRow):
            return self._values == other._values and self._index == other._index
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"PgRow({dict(zip(self._index, self._values, strict=True))!r})"


def _row_factory(cursor: Any) -> Any:
    description = cursor.description
    if description is None:
        return None
    index = {column.name: i for i, column in enumerate(description)}

    def make(values: Sequence[Any]) -> PgRow:
        return PgRow(tuple(values), index)

    return make


@lru_cache(maxsize=1024)
def _rows_of(text: str) -> Callable[[Any], Any]:
    """The row factory of one statement text: the index of its columns' names is built at its
    first execution and kept, as the text answers the same columns every time (the migrations run
    before any statement of the store's). Building it per execution was a quarter of a short
    statement's cost in this module."""
    known: list[dict[str, int]] = []

    def factory(cursor: Any) -> Any:
        if known:
            index = known[0]
        else:
            description = cursor.description
            if description is None:
                return None
            index = {column.name: i for i, column in enumerate(description)}
            known.append(index)

        def make(values: Sequence[Any]) -> PgRow:
            return PgRow(tuple(values), index)

        return make

    return factory


# A string literal, a quoted identifier, a comment, a ``::`` cast, or a placeholder.
_TOKENS = re.compile(
    r"'(?:[^']|'')*'"
    r'|"(?:[^"]|"")*"'
    r"|--[^\n]*"
    r"|::"
    r"|\?(\d+)?"
    r"|(?<![:\w]):([A-Za-z_]\w*)"
)


@lru_cache(maxsize=1024)
def translate(sql: str) -> tuple[str, tuple[str, ...] | None]:
    """``sql`` with SQLite's placeholders turned into PostgreSQL's ``$N``, and the parameter
    names in the order of their numbers when it uses ``:name`` (None when it takes a sequence).

    >>> translate("SELECT * FROM t WHERE a = ? AND b = ?")
    ('SELECT * FROM t WHERE a = $1 AND b = $2', None)
    >>> translate("UPDATE t SET a = :a WHERE id = :id OR parent = :id")
    ('UPDATE t SET a = $1 WHERE id = $2 OR parent = $2', ('a', 'id'))
    """
    names: dict[str, int] = {}
    counter = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal counter
        text = match.group(0)
        if text.startswith("?"):
            if match.group(1):
                return f"${match.group(1)}"
            counter += 1
            return f"${counter}"
        name = match.group(2)
        if name is None:
            return text  # a literal, an identifier, a comment or a cast: as it is
        if name not in names:
            names[name] = len(names) + 1
        return f"${names[name]}"

    translated = _TOKENS.sub(replace, sql)
    return translated, (tuple(names) if names else None)


def _bound(sql: str, params: Sequence[Any] | Mapping[str, Any]) -> tuple[str, Sequence[Any]]:
    text, names = translate(sql)
    if names is not None:
        if not isinstance(params, Mapping):
            raise TypeError("named placeholders (:name) take a mapping of parameters")
        return text, [params[name] for name in names]
    if isinstance(params, Mapping):
        raise TypeError("placeholders ? take a sequence of parameters")
    return text, params


class Rows(Protocol):
    """What ``PgStore.execute`` returns: the statement's rows and how many it changed."""

    @property
    def rowcount(self) -> int: ...
    @property
    def description(self) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...
    def close(self) -> None: ...


# libpq's PGRES_TUPLES_OK (psycopg.pq.ExecStatus.TUPLES_OK): a result that has rows to read.
_TUPLES_OK = 2


class _NoRows:
    """The result of a statement that returns no rows (sqlite3 reads it as empty; psycopg
    would raise)."""

    __slots__ = ("rowcount",)
    description = None  # as a cursor says it has no rows

    def __init__(self, rowcount: int) -> None:
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def close(self) -> None:
        return None


class PgCursor:
    """``PgStore.cursor()``: as a sqlite3 cursor is used in the store's hot loops; with
    ``row_factory = None`` its rows are plain tuples."""

    row_factory: object = _row_factory

    def __init__(self, store: PgStore) -> None:
        self._store = store
        self._rows: Rows | None = None

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> PgCursor:
        self._rows = self._store.execute(sql, params, tuples=self.row_factory is None)
        return self

    def executemany(
        self, sql: str, seq_of_params: Sequence[Sequence[Any] | Mapping[str, Any]]
    ) -> PgCursor:
        self._rows = self._store.executemany(sql, seq_of_params)
        return self

    def _current(self) -> Rows:
        if self._rows is None:
            raise RuntimeError("the cursor has run no statement")
        return self._rows

    @property
    def rowcount(self) -> int:
        return -1 if self._rows is None else self._rows.rowcount

    def fetchone(self) -> Any:
        return self._current().fetchone()

    def fetchall(self) -> list[Any]:
        return self._current().fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._current())

    def close(self) -> None:
        if self._rows is not None:
            self._rows.close()


class PgStore:
    """One connection to a PostgreSQL store: the same verbs as the SQLite ``Store``.

    The connection is in autocommit mode and transactions are begun and ended explicitly, as
    the SQLite store does, so a read outside a transaction sees the latest commit. One PgStore
    is used by one thread at a time, as a SQLite connection is; a lock makes a stray second user
    wait rather than corrupt the protocol state.
    """

    dialect: Literal["postgresql"] = "postgresql"

    def __init__(self, conn: psycopg.Connection[Any], location: str) -> None:
        self._conn = conn
        self._url = location  # for ``reconnect``; never shown (``location`` is)
        self._depth = 0  # the transactions and snapshots of ours open (``_revive``)
        self.location = redacted(location)
        self._lock = threading.RLock()

    # -- statements -------------------------------------------------------------------------

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = (), *, tuples: bool = False
    ) -> Rows:
        """Run one statement; the cursor reads its rows (``fetchone``, ``fetchall``, iteration;
        plain tuples with ``tuples``) and ``rowcount``. Without parameters the text may hold
        several statements."""
        self._revive()
        text, values = _bound(sql, params)
        if tuples:
            from psycopg.rows import tuple_row

            cursor = self._conn.cursor(row_factory=tuple_row)
        else:
            cursor = self._conn.cursor(row_factory=_rows_of(text))
        try:
            with self._lock:
                cursor.execute(text, values or None)
        except Exception as exc:
            raise _translated(exc, self) from exc
        result = cursor.pgresult  # (not ``description``: it builds a Column object per column)
        if result is None or result.status != _TUPLES_OK:  # no rows (sqlite3 reads none)
            return _NoRows(cursor.rowcount)
        return cursor

    def executemany(
        self, sql: str, seq_of_params: Sequence[Sequence[Any] | Mapping[str, Any]]
    ) -> Rows:
        """Run one statement for each set of parameters (pipelined by psycopg)."""
        rows = list(seq_of_params)
        text, _ = translate(sql)
        values = [_bound(sql, params)[1] for params in rows]
        cursor = self._conn.cursor()
        try:
            with self._lock:
                cursor.executemany(text, values)
        except Exception as exc:
            raise _translated(exc, self) from exc
        return cursor

    def cursor(self) -> PgCursor:
        """A cursor, as ``sqlite3.Connection.cursor()`` gives (``PgCursor``)."""
        return PgCursor(self)

    # -- units of work ----------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self._conn.info.transaction_status != TransactionStatus.IDLE)

    def transaction(self) -> AbstractContextManager[PgStore]:
        """One write transaction: committed when the block ends, rolled back if it raises;
        a savepoint inside one already open (its changes alone undone if the block raises)."""
        return self._transaction()

    @contextmanager
    def _transaction(self) -> Iterator[PgStore]:
        self._revive()
        if self.in_transaction:
            with self._savepoint():
                yield self
            return
        self.execute("BEGIN")
        self._depth += 1
        try:
            yield self
            self.execute("COMMIT")
        except BaseException as exc:
            self._rollback()
            translated = _translated(exc, self)
            if translated is not exc:
                raise translated from exc
            raise
        finally:
            self._depth -= 1

    def atomic(self) -> AbstractContextManager[object]:
        """A transaction of its own, or a part of the caller's when one is open."""
        self._revive()
        return nullcontext() if self.in_transaction else self.transaction()

    def snapshot(self) -> AbstractContextManager[PgStore]:
        """A read transaction: every read in the block sees one state of the store; inside an
        open transaction, that one's view is used."""
        return self._snapshot()

    @contextmanager
    def _snapshot(self) -> Iterator[PgStore]:
        self._revive()
        if self.in_transaction:
            yield self
            return
        self.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._depth += 1
        try:
            yield self
        except BaseException as exc:
            self._rollback()
            translated = _translated(exc, self)
            if translated is not exc:
                raise translated from exc
            raise
        else:
            self.execute("COMMIT")
        finally:
            self._depth -= 1

    @contextmanager
    def _savepoint(self) -> Iterator[None]:
        self.execute("SAVEPOINT nested")
        try:
            yield
        except BaseException as exc:
            if self.in_transaction and not self.closed:
                self.execute("ROLLBACK TO SAVEPOINT nested")
                self.execute("RELEASE SAVEPOINT nested")
            translated = _translated(exc, self)
            if translated is not exc:
                raise translated from exc
            raise
        self.execute("RELEASE SAVEPOINT nested")

    def _rollback(self) -> None:
        if self.closed or not self.in_transaction:
            return
        try:
            with self._lock:
                self._conn.execute("ROLLBACK")
        except Exception:  # the connection broke: the server rolled it back itself
            return

    # -- life -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    def close(self) -> None:
        self._conn.close()

    def lost(self) -> bool:
        """Whether the connection broke (the server restarted or went out of reach): the
        transaction under way is gone, and ``reconnect`` makes a new connection."""
        return bool(self._conn.broken or self._conn.closed)

    def _revive(self) -> None:
        # Outside any transaction or snapshot of ours, a lost connection is replaced before the
        # next statement (a server restart costs one failed statement, not the connection for
        # good); inside one it is not: the block's statements must fail with their transaction.
        if self._depth == 0 and self.lost():
            self.reconnect()

    def reconnect(self) -> None:
        """Replace a lost connection with a new one to the same database (UnreachableError while
        the server does not answer yet). Whoever holds this PgStore keeps using it."""
        fresh = connect_postgres(self._url)._conn
        with self._lock:
            old, self._conn = self._conn, fresh
        old.close()

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_postgres(
    url: str,
    *,
    connect_timeout: int = CONNECT_TIMEOUT_SECONDS,
    statement_timeout_ms: int | None = None,
) -> PgStore:
    """A PgStore on the database at ``url`` (``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB``).

    UnreachableError (exit 5) naming the host when the server cannot be reached, AuthError
    (exit 3) when it refuses the credentials; the password is in neither. A statement that runs
    longer than ``statement_timeout_ms`` (when given) fails as busy.
    """
    options = f"-c lock_timeout={LOCK_TIMEOUT_MS}"
    if statement_timeout_ms is not None:
        options += f" -c statement_timeout={statement_timeout_ms}"
    try:
        import psycopg
    except ImportError:
        raise ConfigError(
            f"the store {redacted(url)} is a PostgreSQL database, and the PostgreSQL driver"
            " (psycopg) is not installed",
            hint=_INSTALL_HINT,
        ) from None
    try:
        conn = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=connect_timeout,
            cursor_factory=psycopg.RawCursor,
            options=options,
        )
    except psycopg.ProgrammingError as exc:  # a URL libpq cannot parse
        raise ConfigError(
            f"the store location {redacted(url)} is not a valid PostgreSQL URL",
            hint="write it as postgresql://USER@HOST:PORT/DATABASE",
        ) from without_password(exc, url)
    except psycopg.OperationalError as exc:
        raise connect_error(exc, url) from None
    conn.row_factory = _row_factory
    _use_int_for_bool(conn)
    return PgStore(conn, url)


def _use_int_for_bool(conn: psycopg.Connection[Any]) -> None:
    # The schema keeps SQLite's 0/1 integer flags (one schema for both engines' callers): a
    # Python bool passed for one binds as an integer, as sqlite3 binds it.
    from psycopg.types.numeric import Int8Dumper

    class BoolAsInt(Int8Dumper):
        def dump(self, obj: Any) -> bytes:
            return b"1" if obj else b"0"

    conn.adapters.register_dumper(bool, BoolAsInt)


def _translated(exc: BaseException, store: PgStore) -> BaseException:
    if isinstance(exc, PrefctlError):
        return exc
    return pg_store_error(exc, store.location) or exc
