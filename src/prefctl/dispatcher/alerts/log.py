"""Reading the failure alerts that were sent: ``prefctl alerts list`` and ``show``.

Alerts are found in two places of the data dir, and read from both: the store, which records every
alert with its full text whichever sink took it (SMTP included), and the mbox ``alerts.mbox``, which
may also hold alerts of an earlier store (after ``emulator reset``). An alert in both is listed once
(by Message-ID), with the store's record of how it was sent.

A store ``location`` given (a SQLite file or a PostgreSQL URL: ``--store``, or the database the emulator
serves) is read instead of the data dir's store file; it must exist. The data dir's mbox is read
too when there is one: with a store given, a data dir that does not exist only has no mbox.
Without a store, a data dir that does not exist is ``ConfigError`` (exit 2); one with no alerts
lists none. A
``subscription`` (Name or Id) that names no subscription of the store and no alert (at any time:
a deleted subscription's alerts stay in the mbox with its Id and Name) is ``NotFoundError``.

Listing reads the headers of each alert only (``mail.parse_headers``), and skips an mbox alert
the store already has; ``show_alert`` looks in the store first, stops at its match, and parses
that one alert in full.

    >>> entries = list_alerts(data_dir, subscription="orders", since=epoch_seconds)
    >>> show_alert(data_dir, "3").message.get_content()
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import getaddresses, parsedate_to_datetime
from pathlib import Path
from typing import Any

from prefctl.dispatcher.alerts.mail import (
    MBOX_FILE,
    DecodedHeaders,
    message_id,
    parse_headers,
    parse_message,
    read_mbox_bytes,
)
from prefctl.errors import ConfigError, NotFoundError
from prefctl.store import Store, accounts, subscriptions
from prefctl.store import alerts as store
from prefctl.store.timestamps import wire_time

__all__ = ["AlertEntry", "list_alerts", "show_alert"]


@dataclass(frozen=True)
class AlertEntry:
    """One alert email and what is known of its sending (nothing more for a mbox-only one).

    The entries of ``list_alerts`` hold the headers of the email and its body unparsed
    (``get_content()`` still reads it); ``show_alert``'s holds the whole parsed email."""

    message: EmailMessage
    created_at: float
    record: store.AlertRecord | None = None

    @property
    def id(self) -> int | None:
        if self.record is not None:
            return self.record.id
        return _int(self._headers.get("X-Prefctl-Alert-Id"))

    @property
    def message_id(self) -> str:
        return self._headers.get("Message-ID") or ""

    @property
    def subscription_id(self) -> int | None:
        return _int(self._headers.get("X-Prefctl-Subscription-Id"))

    @property
    def subscription_name(self) -> str | None:
        return self._headers.get("X-Prefctl-Subscription-Name")

    def to_dict(self) -> dict[str, Any]:
        """snake_case keys, RFC 3339 times; ``sink`` is ``mbox`` for an alert found only there."""
        header, record = self._headers.get, self.record
        return {
            "id": self.id,
            "message_id": self.message_id,
            "created_at": wire_time(self.created_at),
            "sent_at": wire_time(record.sent_at) if record and record.sent_at else None,
            "state": record.state if record else "sent",
            "sink": record.sink if record else "mbox",
            "smtp_error": record.smtp_error if record else None,
            "account": _text(header("X-Prefctl-Account")),
            "environment": _text(header("X-Prefctl-Environment")),
            "subscription_id": self.subscription_id,
            "subscription_name": self.subscription_name,
            "incident_id": _int(header("X-Prefctl-Incident-Id")),
            "kind": _text(header("X-Prefctl-Alert-Kind")),
            "dead_letters": _int(header("X-Prefctl-Dead-Letters")),
            "recipients": list(_recipients(tuple(self._headers.get_all("To")))),
            "subject": _text(header("Subject")),
        }

    @functools.cached_property
    def _headers(self) -> DecodedHeaders:
        return DecodedHeaders(self.message)


def list_alerts(
    data_dir: Path,
    *,
    location: Path | str | None = None,
    subscription: str | None = None,
    since: float | None = None,
) -> list[AlertEntry]:
    """Alerts of the data dir (or of the store at ``location``), oldest first; ``subscription`` is
    an id or a name."""
    if location is None:
        _require_data_dir(data_dir)
    entries: dict[str, AlertEntry] = {}
    with _store(data_dir, location) as conn:
        names = _subscription_names(conn)
        if conn is not None:
            for record in store.list_alerts(conn):
                entry = AlertEntry(parse_headers(record.message), record.created_at, record)
                entries[record.message_id] = entry
    for entry, _text in _mbox_alerts(data_dir, entries):
        entries[entry.message_id] = entry
    selected = [e for e in entries.values() if _matches(e, subscription)]
    if subscription is not None and not selected and not _names_one(names, subscription):
        raise NotFoundError(
            f"subscription {subscription} not found",
            hint="'prefctl subscriptions list' shows the subscriptions",
        )
    selected = [e for e in selected if since is None or e.created_at >= since]
    return sorted(selected, key=lambda e: (e.created_at, e.id or 0))


def show_alert(data_dir: Path, ident: str, *, location: Path | str | None = None) -> AlertEntry:
    """The alert with this id (as listed) or Message-ID (angle brackets optional).

    The store's alerts are searched first, oldest first, as listed: an mbox kept across a reset
    may repeat an id. The mbox is read only when none of them is the one."""
    wanted = ident.strip()
    if location is None:
        _require_data_dir(data_dir)
    with _store(data_dir, location) as conn:
        records = [] if conn is None else store.list_alerts(conn)
    # One record per Message-ID, the one list_alerts keeps.
    kept = {record.message_id: record for record in records}
    for record in sorted(kept.values(), key=lambda r: (r.created_at, r.id)):
        if _is_wanted(wanted, record.id, message_id(record.message)):
            return AlertEntry(parse_message(record.message), record.created_at, record)
    found = [
        (entry, text)
        for entry, text in _mbox_alerts(data_dir, kept)
        if _is_wanted(wanted, entry.id, entry.message_id)
    ]
    if found:
        entry, text = min(found, key=lambda item: (item[0].created_at, item[0].id or 0))
        return AlertEntry(parse_message(text), entry.created_at)
    raise NotFoundError(
        f"no alert {ident} in {data_dir}", hint="'prefctl alerts list' shows the alerts"
    )


def _require_data_dir(data_dir: Path) -> None:
    if not data_dir.is_dir():
        raise ConfigError(
            f"no data dir at {data_dir}",
            hint="start the emulator with 'prefctl emulator start', or pass --data-dir D",
        )


def _mbox_alerts(data_dir: Path, store_ids: Collection[str]) -> list[tuple[AlertEntry, bytes]]:
    """The alerts of the mbox (the first of each Message-ID) that are not in the store, with
    their text. Only their headers are parsed, and only of those not in the store."""
    found = []
    seen = set(store_ids)
    for text in read_mbox_bytes(data_dir / MBOX_FILE):
        known_id = message_id(text)
        if known_id in seen:
            continue  # the store's record of it is listed
        message = parse_headers(text)
        headers = DecodedHeaders(message)
        if headers.get("X-Prefctl-Alert-Id") is None:
            continue  # not an alert of prefctl
        seen.add(known_id)
        found.append((AlertEntry(message, _date(headers)), text))
    return found


def _is_wanted(wanted: str, alert_id: int | None, message_id: str) -> bool:
    if wanted.isdigit() and alert_id == int(wanted):
        return True
    return message_id.strip("<>") == wanted.strip("<>")


@contextmanager
def _store(data_dir: Path, location: Path | str | None) -> Iterator[Store | None]:
    from prefctl.config.paths import store_path
    from prefctl.store.db import open_store

    if location is not None:
        from prefctl.dispatcher.operations import open_existing_store

        with open_existing_store(location) as conn:
            yield conn
        return
    path = store_path(data_dir)
    if not path.is_file():  # reading alerts never creates a store
        yield None
        return
    with open_store(path) as conn:
        yield conn


def _subscription_names(conn: Store | None) -> list[tuple[int, str]]:
    """(Id, Name) of every subscription of the store, in any account."""
    if conn is None:
        return []
    return [
        (record.id, record.name)
        for account in accounts.list_accounts(conn)
        for record in subscriptions.list_subscriptions(conn, account.service_client_id)
    ]


def _names_one(names: list[tuple[int, str]], subscription: str) -> bool:
    if subscription.isdigit():
        return any(number == int(subscription) for number, _ in names)
    return any(name == subscription for _, name in names)


def _matches(entry: AlertEntry, subscription: str | None) -> bool:
    if subscription is None:
        return True
    if subscription.isdigit():
        return entry.subscription_id == int(subscription)
    return entry.subscription_name == subscription


def _date(headers: DecodedHeaders) -> float:
    try:
        return parsedate_to_datetime(str(headers.get("Date"))).timestamp()
    except (TypeError, ValueError):
        return 0.0


@functools.lru_cache(maxsize=1024)
def _recipients(to: tuple[str, ...]) -> tuple[str, ...]:
    # Alerts of a subscription repeat its recipients.
    return tuple(address for _, address in getaddresses(to))


def _int(value: object) -> int | None:
    try:
        return None if value is None else int(str(value))
    except ValueError:
        return None


def _text(value: object) -> str | None:
    # strip(): a header folded right after its colon (the email package does that to a long
    # Subject with no space early enough) reads back with a leading space.
    return None if value is None else str(value).strip()
