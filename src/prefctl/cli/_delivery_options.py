"""Options shared by the commands that act on the emulator's data: its data dir (``emulator``
and its support-team operations), the store, the dead-letter filters and the time bounds
(``deliveries``, ``deadletters`` and ``replay``)."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prefctl.cli._complete import subscription_refs
from prefctl.config import ENV_DATA_DIR, ENV_STORE
from prefctl.dispatcher.policy import DeadLetterReason

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prefctl.dispatcher.deadletters import DeadLetterFilter
    from prefctl.store import Store


DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help=f"Folder of the emulator's store (env: {ENV_DATA_DIR}; default: the user data dir).",
        show_default=False,
        file_okay=False,
    ),
]


# The store an operator command acts on (``deliveries``, ``deadletters``, ``replay``, ``alerts``,
# ``dispatcher tls``): a SQLite file or a PostgreSQL database, as ``dispatcher run`` takes it.
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="PATH|URL",
        envvar=ENV_STORE,
        help="Store to act on: a SQLite file, or a PostgreSQL database "
        f"(postgresql://USER@HOST:PORT/DB) (env: {ENV_STORE}; default: the store of the emulator "
        f"in the data dir, env: {ENV_DATA_DIR}).",
        show_default=False,
        show_envvar=False,
    ),
]
# The store of the emulator's support-team commands (``emulator accounts``, ``clients``, ``users``):
# the one ``emulator start --store`` serves, or a SQLite file; opened with ``admin_store``.
AdminStoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="PATH|URL",
        envvar=ENV_STORE,
        help="The emulator's store: a PostgreSQL database (postgresql://USER@HOST:PORT/DB), as "
        f"'emulator start --store' serves it, or a SQLite file (env: {ENV_STORE}; default: the "
        f"store of the emulator in the data dir, env: {ENV_DATA_DIR}).",
        show_default=False,
        show_envvar=False,
    ),
]
# The account a support-team command acts on (``emulator clients``, ``users``, ``alerts``): what
# it names or changes must be that account's, and another account's is "not found" like a missing
# one. None: the emulator's own account (the core resolves it: prefctl.emulator.admin).
AccountOption = Annotated[
    str | None,
    typer.Option(
        "--account",
        metavar="NAME",
        help="The account to act on: its service client id, as 'emulator accounts list' shows "
        "it (default: the emulator's own account, profile local's).",
        show_default=False,
    ),
]
# The store of a long-running server (``dispatcher run``): a SQLite file or a PostgreSQL database.
StoreLocationOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="PATH|URL",
        envvar=ENV_STORE,
        help="Store to deliver from: a SQLite file, or a PostgreSQL database "
        "(postgresql://USER@HOST:PORT/DB; shared by any number of dispatchers) "
        f"(env: {ENV_STORE}; default: the emulator's store in its data dir, env: {ENV_DATA_DIR}).",
        show_default=False,
        show_envvar=False,
    ),
]


def chosen_store(store: str | None, data_dir: Path | None = None) -> Path | str | None:
    """The store ``--store`` (or ``PREFCTL_STORE``, which Typer reads into it) names, else the
    PostgreSQL database the emulator serving from the data dir serves (its pid file records the
    URL without a password: libpq's PGPASSWORD or ~/.pgpass give it). None: neither, so the data
    dir's SQLite file (``store_location``)."""
    from prefctl.dispatcher.operations import resolve_store_location

    if store:
        return resolve_store_location(store)
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import daemon

    return daemon.served_store(resolve_data_dir(data_dir))


def store_location(store: str | None, data_dir: Path | None = None) -> Path | str:
    """The store a command acts on: ``chosen_store``, else the emulator's SQLite file."""
    from prefctl.dispatcher.operations import resolve_store

    return chosen_store(store, data_dir) or resolve_store(None, data_dir)


@contextmanager
def admin_store(directory: Path, store: str | None) -> Iterator[Store]:
    """The store of the emulator's support-team commands: the one ``--store`` names (it must be a
    store already: a typo never makes a new one), else the PostgreSQL database the emulator
    serving from the data dir serves (its pid file records the URL without a password:
    PGPASSWORD or ~/.pgpass give it), else the data dir's SQLite store (created on first use, as
    ``emulator start`` does)."""
    from prefctl.emulator import admin
    from prefctl.store.db import require_store

    location = chosen_store(store, directory)
    if location is not None:
        require_store(location)  # a typo never makes a new store, on either backend
    with admin.open_admin_store(directory, None if location is None else str(location)) as conn:
        yield conn


SubscriptionRefOption = Annotated[
    str | None,
    typer.Option(
        "--subscription",
        metavar="NAME|ID",
        help="Only this subscription's (its Name or Id).",
        autocompletion=subscription_refs,
        show_default=False,
    ),
]
ReasonOption = Annotated[
    DeadLetterReason | None,
    typer.Option("--reason", help="Only dead letters with this reason.", show_default=False),
]
StatusOption = Annotated[
    int | None,
    typer.Option(
        "--status",
        min=100,
        max=599,
        metavar="CODE",
        help="Only dead letters whose last attempt got this HTTP status.",
        show_default=False,
    ),
]
EventOption = Annotated[
    list[str] | None,
    typer.Option(
        "--event", metavar="EVENT_ID", help="Only this EventId (repeatable).", show_default=False
    ),
]
SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="TIME",
        help="Dead-lettered at or after this time: RFC 3339, or an age such as 15m, 2h, 3d.",
        show_default=False,
    ),
]
UntilOption = Annotated[
    str | None,
    typer.Option(
        "--until",
        metavar="TIME",
        help="Dead-lettered at or before this time (same forms as --since).",
        show_default=False,
    ),
]


def subscription_id(store: Path | str, ref: str | None) -> int | None:
    """The Id a ``--subscription NAME|ID`` names in the store (None when not given)."""
    if ref is None:
        return None
    if ref.strip().isdigit():
        return int(ref)
    from prefctl.dispatcher.operations import open_existing_store
    from prefctl.store.subscriptions import id_of

    with open_existing_store(store) as conn:
        return id_of(conn, ref)


def moment(text: str | None, flag: str) -> float | None:
    """A ``--since``/``--until`` value as Unix seconds (None when not given)."""
    if text is None:
        return None
    from prefctl.clock import parse_moment

    return parse_moment(text, now=datetime.now(UTC), flag=flag).timestamp()


def dead_letter_filter(
    *,
    reason: DeadLetterReason | None,
    status: int | None,
    subscription: int | None,
    events: list[str] | None,
    since: str | None,
    until: str | None,
) -> DeadLetterFilter:
    """The dead letters the filter options select."""
    from prefctl.dispatcher.deadletters import DeadLetterFilter

    return DeadLetterFilter(
        reason=None if reason is None else reason.value,
        last_status=status,
        subscription_id=subscription,
        event_ids=tuple(events or ()),
        since=moment(since, "--since"),
        until=moment(until, "--until"),
    )
