"""What PostgreSQL's errors and store URLs read as in prefctl's words: a URL without its
password, the host it names, and psycopg's errors as prefctl's (``store/errors.py`` and the exit
codes of ``errors.py``). ``postgres.py`` raises them; psycopg is imported only when an error is
one of its own."""

from __future__ import annotations

import re

from prefctl.errors import AuthError, ConfigError, PrefctlError, UnreachableError
from prefctl.store.errors import StoreBusyError, StoreDiskFullError, StoreError

__all__ = [
    "connect_error",
    "is_postgres_location",
    "pg_store_error",
    "redacted",
    "without_password",
]


def is_postgres_location(location: object) -> bool:
    """Whether ``location`` (a --store value) names a PostgreSQL database (``postgresql://…``
    or ``postgres://…``) rather than a SQLite file."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def redacted(url: str) -> str:
    """``url`` without its password (``postgresql://user@host:port/db``), whether it is in the
    user part or a ``password=`` (or ``sslpassword=``) parameter: for messages, logs and files."""
    url = re.sub(r"^(\w+://[^:/@]*):[^@]*@", r"\1@", url)
    url = re.sub(r"([?&])(?:ssl)?password=[^&]*(?:&|$)", r"\1", url)
    return url.rstrip("?&")


def without_password(exc: BaseException, url: str) -> BaseException | None:
    return None if _password(url) and _password(url) in str(exc) else exc


def _password(url: str) -> str:
    match = re.match(r"^\w+://[^:/@]*:([^@]*)@", url)
    return match.group(1) if match else ""


def _where(url: str) -> str:
    """The host (and port) the URL names, for an error message."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(url)
    except Exception:  # an unparsable URL: say the URL without its password
        return redacted(url)
    host = str(info.get("host") or "localhost")
    port = info.get("port")
    return f"{host}:{port}" if port else host


def connect_error(exc: BaseException, url: str) -> PrefctlError:
    text = str(exc)
    secret = _password(url)
    if secret:
        text = text.replace(secret, "***")
    where = _where(url)
    if "authentication failed" in text or "no password supplied" in text:
        return AuthError(
            f"PostgreSQL at {where} refused the credentials of the store {redacted(url)}",
            hint="check the user and password in the URL (or PGPASSWORD / ~/.pgpass)",
        )
    if 'database "' in text and "does not exist" in text:
        return ConfigError(
            f"the PostgreSQL server at {where} has no database named in {redacted(url)}",
            hint="create it first: createdb -h HOST -U USER DATABASE",
        )
    if "role" in text and "does not exist" in text:
        return AuthError(
            f"PostgreSQL at {where} has no role named in {redacted(url)}",
            hint="check the user in the URL",
        )
    # libpq: 'connection to server at "HOST", port N failed: Connection refused' and a hint line.
    first = text.strip().splitlines()[0] if text.strip() else "no answer"
    reason = first.rsplit("failed: ", 1)[-1].strip()
    return UnreachableError(
        f"cannot reach PostgreSQL at {where}: {reason}",
        hint="check that the server runs and that the host and port in --store are right",
    )


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None)


# SQLSTATEs of "another transaction is in the way": serialization failure, deadlock, lock not
# available (lock_timeout), and a statement cancelled by its timeout.
_BUSY_STATES = ("40001", "40P01", "55P03", "57014")
_DISK_FULL = "53100"


def pg_store_error(exc: BaseException, location: str = "") -> PrefctlError | None:
    """``exc`` in prefctl's words when it is psycopg's (StoreBusyError, StoreDiskFullError,
    UnreachableError for a connection lost, StoreError otherwise); ``exc`` itself when it is a
    StoreError already; None for anything else."""
    if isinstance(exc, StoreError):
        return exc
    try:
        import psycopg
    except ImportError:
        return None
    if not isinstance(exc, psycopg.Error):
        return None
    reason = str(exc).strip()
    state = _sqlstate(exc)
    where = f" {location}" if location else ""
    if state in _BUSY_STATES:
        return StoreBusyError(
            f"the store{where} is busy: another connection held what this one needed",
            hint="try again when it has finished",
            reason=reason,
        )
    if state == _DISK_FULL:
        return StoreDiskFullError(
            f"the disk of the PostgreSQL store{where} is full: nothing was written",
            hint="free some space on the database server and try again",
            reason=reason,
        )
    if isinstance(exc, psycopg.OperationalError) and state is None:
        return UnreachableError(
            f"lost the connection to the PostgreSQL store{where}: {reason}",
            hint="check that the server runs; prefctl reconnects when it is back",
        )
    return StoreError(f"the store failed: {reason}", reason=reason)
