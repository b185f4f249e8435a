"""Reading the failure alerts that were sent: ``prefctl alerts list`` and ``show``.

Alerts are found in two places of the data dir, and read from both: the store, which records every
alert with its full text whichever sink took it (SMTP included), and the mbox ``alerts.mbox``, which
may also hold alerts of an earlier store (after ``emulator reset``). An alert in both is listed once
(by Message-ID), with the store's record of how it was sent.

A data dir that does not exist is ``ConfigError`` (exit 2); one with no alerts lists none. A
``subscription`` (Name or Id) that names no subscription of the store and no alert (at any time:
a deleted subscription's alerts stay in the mbox with its Id and Name) is ``NotFoundError``.

    >>> entries = list_alerts(data_dir, subscription="orders", since=epoch_seconds)
    >>> show_alert(data_dir, "3").message.get_content()
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import getaddresses, parsedate_to_datetime
from pathlib import Path
from typing import Any

from prefctl.dispatcher.mail import MBOX_FILE, parse_message, read_mbox
from prefctl.errors import ConfigError, NotFoundError
from prefctl.store import accounts, subscriptions
from prefctl.store import alerts as store
from prefctl.store.timestamps import wire_time

__all__ = ["AlertEntry", "list_alerts", "show_alert"]


@dataclass(frozen=True)
class AlertEntry:
    """One alert email and what is known of its sending (nothing more for a mbox-only one)."""

    message: EmailMessage
    created_at: float
    record: store.AlertRecord | None = None

    @property
    def id(self) -> int | None:
        if self.record is not None:
            return self.record.id
        return _int(self.message["X-Prefctl-Alert-Id"])

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"] or "")

    @property
    def subscription_id(self) -> int | None:
        return _int(self.message["X-Prefctl-Subscription-Id"])

    @property
    def subscription_name(self) -> str | None:
        name = self.message["X-Prefctl-Subscription-Name"]
        return None if name is None else str(name)

    def to_dict(self) -> dict[str, Any]:
        """snake_case keys, RFC 3339 times; ``sink`` is ``mbox`` for an alert found only there."""
        header, record = self.message, self.record
        return {
            "id": self.id,
            "message_id": self.message_id,
            "created_at": wire_time(self.created_at),
            "sent_at": wire_time(record.sent_at) if record and record.sent_at else None,
            "state": record.state if record else "sent",
            "sink": record.sink if record else "mbox",
            "smtp_error": record.smtp_error if record else None,
            "account": _text(header["X-Prefctl-Account"]),
            "environment": _text(header["X-Prefctl-Environment"]),
            "subscription_id": self.subscription_id,
            "subscription_name": self.subscription_name,
            "incident_id": _int(header["X-Prefctl-Incident-Id"]),
            "kind": _text(header["X-Prefctl-Alert-Kind"]),
            "dead_letters": _int(header["X-Prefctl-Dead-Letters"]),
            "recipients": [address for _, address in getaddresses(header.get_all("To", []))],
            "subject": _text(header["Subject"]),
        }


def list_alerts(
    data_dir: Path, *, subscription: str | None = None, since: float | None = None
) -> list[AlertEntry]:
    """Alerts of the data dir, oldest first; ``subscription`` is an id or a name."""
    if not data_dir.is_dir():
        raise ConfigError(
            f"no data dir at {data_dir}",
            hint="start the emulator with 'prefctl emulator start', or pass --data-dir D",
        )
    entries: dict[str, AlertEntry] = {}
    with _store(data_dir) as conn:
        names = _subscription_names(conn)
        if conn is not None:
            for record in store.list_alerts(conn):
                entry = AlertEntry(parse_message(record.message), record.created_at, record)
                entries[record.message_id] = entry
    for message in read_mbox(data_dir / MBOX_FILE):
        message_id = str(message["Message-ID"] or "")
        if message_id in entries or message["X-Prefctl-Alert-Id"] is None:
            continue  # known from the store, or not an alert of prefctl
        entries[message_id] = AlertEntry(message, _date(message))
    selected = [e for e in entries.values() if _matches(e, subscription)]
    if subscription is not None and not selected and not _names_one(names, subscription):
        raise NotFoundError(
            f"subscription {subscription} not found",
            hint="'prefctl subscriptions list' shows the subscriptions",
        )
    selected = [e for e in selected if since is None or e.created_at >= since]
    return sorted(selected, key=lambda e: (e.created_at, e.id or 0))


def show_alert(data_dir: Path, ident: str) -> AlertEntry:
    """The alert with this id (as listed) or Message-ID (angle brackets optional)."""
    wanted = ident.strip()
    entries = list_alerts(data_dir)
    # The store's alerts first: an mbox kept across a reset may repeat an id.
    entries.sort(key=lambda e: e.record is None)
    for entry in entries:
        if wanted.isdigit() and entry.id == int(wanted):
            return entry
        if entry.message_id.strip("<>") == wanted.strip("<>"):
            return entry
    raise NotFoundError(
        f"no alert {ident} in {data_dir}", hint="'prefctl alerts list' shows the alerts"
    )


@contextmanager
def _store(data_dir: Path) -> Iterator[sqlite3.Connection | None]:
    from prefctl.emulator.paths import store_path
    from prefctl.store.db import open_store

    path = store_path(data_dir)
    if not path.is_file():  # reading alerts never creates a store
        yield None
        return
    with open_store(path) as conn:
        yield conn


def _subscription_names(conn: sqlite3.Connection | None) -> list[tuple[int, str]]:
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


def _date(message: EmailMessage) -> float:
    try:
        return parsedate_to_datetime(str(message["Date"])).timestamp()
    except (TypeError, ValueError):
        return 0.0


def _int(value: object) -> int | None:
    try:
        return None if value is None else int(str(value))
    except ValueError:
        return None


def _text(value: object) -> str | None:
    # strip(): a header folded right after its colon (the email package does that to a long
    # Subject with no space early enough) reads back with a leading space.
    return None if value is None else str(value).strip()
