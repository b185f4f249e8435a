"""The dead-letter queue: list, show, redrive, export and purge dead-lettered deliveries.

A dead letter is a delivery in state ``dead_lettered``. It prints as docs/cli.md says::

    {"event_id", "event_type", "subscription_id", "reason", "attempts", "last_status",
     "last_error", "first_attempt_at", "last_attempt_at"}

Filters (``DeadLetterFilter``): reason, last HTTP status, subscription, event ids, and a time range
on when the delivery was dead-lettered. A subscription id that is no subscription of the store and
has no dead letter there is ``NotFoundError`` (exit 4), not an empty selection: a mistyped id must
not read as "no dead letters". A dead letter is named by its EventId, or by its delivery
id when the event went to several subscriptions.

- **Redrive** puts the selected dead letters back in the queue as fresh deliveries of the same
  event to the same subscription: EventId unchanged, attempts back to 0, a new EventTime (docs/webhooks.md: the time the event was queued for the subscription, later on replay) from which the
  time-to-live runs again, due at once. The attempt log is kept. Dead letters of a deleted
  subscription (they outlive it) have nowhere to go and stay; ``prefctl replay --to`` can
  re-deliver them.
- **Export** writes each dead letter with the event as it was sent (``"event"``), as NDJSON or one
  JSON array; ``prefctl replay --file`` reads it back.
- **Purge** deletes the selected dead letters and their attempt logs (the events stay).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson

from prefctl.dispatcher.operations import iter_deliveries
from prefctl.errors import NotFoundError, UsageError
from prefctl.store import Store, accounts, subscriptions
from prefctl.store.db import snapshot, transaction
from prefctl.store.deliveries import requeue
from prefctl.store.delivery_history import (
    AttemptRecord,
    DeliveryQuery,
    DeliveryRecord,
    delete_deliveries,
    get_delivery,
    list_attempts,
)
from prefctl.store.events import get_event
from prefctl.store.timestamps import wire_time

__all__ = [
    "DeadLetterDetail",
    "DeadLetterFilter",
    "ExportFormat",
    "Redrive",
    "dead_letter_dict",
    "export_dead_letters",
    "find_dead_letters",
    "list_dead_letters",
    "purge_dead_letters",
    "redrive_dead_letters",
    "show_dead_letter",
]

ExportFormat = Literal["ndjson", "json"]


def _time(seconds: float | None) -> str | None:
    return None if seconds is None else wire_time(seconds)


def dead_letter_dict(record: DeliveryRecord) -> dict[str, Any]:
    """The dead letter as prefctl prints it (docs/cli.md), keys in this order."""
    return {
        "event_id": record.event_id,
        "event_type": record.event_type,
        "subscription_id": record.subscription_id,
        "reason": record.dead_letter_reason,
        "attempts": record.attempts,
        "last_status": record.last_status,
        "last_error": record.last_error,
        "first_attempt_at": _time(record.first_attempt_at),
        "last_attempt_at": _time(record.last_attempt_at),
    }


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters an operation takes; every given field must hold.

    ``since``/``until`` (Unix seconds, inclusive) bound when the delivery was dead-lettered.
    """

    reason: str | None = None
    last_status: int | None = None
    subscription_id: int | None = None
    event_ids: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None

    def query(self) -> DeliveryQuery:
        return DeliveryQuery(
            states=("dead_lettered",),
            subscription_id=self.subscription_id,
            event_ids=self.event_ids,
            reason=self.reason,
            last_status=self.last_status,
            since=self.since,
            until=self.until,
        )


def list_dead_letters(
    conn: Store, selection: DeadLetterFilter, *, limit: int | None = None
) -> list[DeliveryRecord]:
    """Dead letters matching ``selection``, oldest delivery first (all of them without limit)."""
    if limit is not None and limit < 1:
        raise UsageError("--limit must be 1 or more")
    records = list(iter_deliveries(conn, selection.query(), limit=limit))
    if not records:
        _require_subscription(conn, selection.subscription_id)
    return records


def find_dead_letters(conn: Store, name: str) -> list[DeliveryRecord]:
    """The dead letters named by ``name``: a delivery id (digits) or an EventId.

    An EventId names one dead letter per subscription it was dead-lettered for.
    """
    if name.isdigit():
        record = get_delivery(conn, int(name))
        found = [record] if record is not None and record.state == "dead_lettered" else []
    else:
        found = list_dead_letters(conn, DeadLetterFilter(event_ids=(name,)))
    if not found:
        raise NotFoundError(
            f"no dead letter {name}", hint="'prefctl deadletters list' shows the dead letters"
        )
    return found


@dataclass(frozen=True)
class DeadLetterDetail:
    """One dead letter with its attempt timeline and the event as it was sent."""

    record: DeliveryRecord
    attempts: list[AttemptRecord]
    event: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        """The dead letter's keys, then ``delivery_id``, ``timeline`` and ``event``."""
        return {
            **dead_letter_dict(self.record),
            "delivery_id": self.record.delivery_id,
            "timeline": [attempt.to_dict() for attempt in self.attempts],
            "event": self.event,
        }


def show_dead_letter(conn: Store, name: str) -> list[DeadLetterDetail]:
    """Every dead letter named by ``name`` (usually one) with its timeline and event."""
    return [
        DeadLetterDetail(record, list_attempts(conn, record.delivery_id), sent_event(conn, record))
        for record in find_dead_letters(conn, name)
    ]


def sent_event(conn: Store, record: DeliveryRecord) -> dict[str, Any] | None:
    """The notification of ``record``'s event as its subscription got it (docs/webhooks.md)."""
    event = get_event(conn, record.service_client_id, record.event_id)
    if event is None:
        return None
    queued = replace(event, subscription_id=record.subscription_id, event_time=record.event_time)
    return queued.to_wire()


@dataclass(frozen=True)
class Redrive:
    """What a redrive did: the dead letters queued again (as they were before), and those left
    alone because their subscription was deleted (``prefctl replay --to`` can re-deliver them)."""

    requeued: list[DeliveryRecord]
    of_deleted_subscriptions: list[DeliveryRecord]


def redrive_dead_letters(conn: Store, selection: DeadLetterFilter, *, now: float) -> Redrive:
    """Queue the selected dead letters again (see the module docstring), in one transaction;
    those of a deleted subscription stay where they are."""
    with transaction(conn):
        records = list_dead_letters(conn, selection)
        deleted = subscriptions.deleted_among(conn, (record.subscription_id for record in records))
        requeued = [r for r in records if r.subscription_id not in deleted]
        requeue(conn, [record.delivery_id for record in requeued], now=now)
    return Redrive(requeued, [r for r in records if r.subscription_id in deleted])


def export_dead_letters(
    conn: Store,
    selection: DeadLetterFilter,
    write: Callable[[bytes], Any],
    *,
    fmt: ExportFormat = "ndjson",
) -> int:
    """Write the selected dead letters, each with ``"event"``, to ``write``; returns how many.

    NDJSON is one record per line; JSON is one array. Records are read and written a page at a
    time, so the size of the queue does not matter, all from one snapshot of the store: a
    redrive or purge meanwhile neither drops records from the export nor repeats any.
    """
    if fmt not in ("ndjson", "json"):
        raise UsageError(f"unknown export format {fmt!r}", hint="ndjson or json")
    count = 0
    with snapshot(conn):
        _require_subscription(conn, selection.subscription_id)
        if fmt == "json":
            write(b"[")
        for line in _export_lines(conn, selection):
            if fmt == "json":
                write((b"\n  " if count == 0 else b",\n  ") + line)
            else:
                write(line + b"\n")
            count += 1
    if fmt == "json":
        write(b"\n]\n" if count else b"]\n")
    return count


def _require_subscription(conn: Store, subscription_id: int | None) -> None:
    """NotFoundError unless ``subscription_id`` (when given) is a subscription of the store, in
    any account, or has dead letters there."""
    if subscription_id is None:
        return
    for account in accounts.list_accounts(conn):
        if subscriptions.get_subscription(conn, account.service_client_id, subscription_id):
            return
    query = DeliveryQuery(states=("dead_lettered",), subscription_id=subscription_id)
    if next(iter_deliveries(conn, query, limit=1), None) is None:
        raise NotFoundError(
            f"subscription {subscription_id} not found",
            hint="'prefctl subscriptions list' shows the subscriptions",
        )


def _export_lines(conn: Store, selection: DeadLetterFilter) -> Iterator[bytes]:
    for record in iter_deliveries(conn, selection.query()):
        exported = {**dead_letter_dict(record), "event": sent_event(conn, record)}
        yield orjson.dumps(exported)


def purge_dead_letters(
    conn: Store,
    selection: DeadLetterFilter,
    *,
    counted: Collection[int] | None = None,
) -> int:
    """Delete the selected dead letters and their attempt logs; returns how many.

    ``counted`` (delivery ids) keeps it to the dead letters a user was shown before agreeing:
    one dead-lettered while the question waited is not deleted unseen.
    """
    with transaction(conn):
        ids = [
            record.delivery_id
            for record in list_dead_letters(conn, selection)
            if counted is None or record.delivery_id in counted
        ]
        return delete_deliveries(conn, ids)
