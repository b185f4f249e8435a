"""What a replay re-delivers, and queueing it in a store (the part of ``replay`` that is SQL).

A replay source selects events:

- ``file``: events captured in a file (``captures.py``); they are added to the store when their
  EventId is not there yet, so that a delivery can point at them;
- ``dead_lettered``: the dead letters a ``DeadLetterFilter`` selects;
- ``events``: stored events by EventId, or stored since a time (optionally only those queued for
  one subscription).

Queueing is ``store.deliveries.enqueue`` for a target subscription (a new delivery, or a finished one
started over), or ``requeue`` of the events' own deliveries when there is no target. Either way the
delivery starts over: attempts 0, EventTime now, due now; the EventId never changes. A delivery
still pending is left as it is and simply waited for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from prefctl.dispatcher.captures import CapturedEvent, read_captured
from prefctl.dispatcher.deadletters import DeadLetterFilter, list_dead_letters
from prefctl.dispatcher.operations import iter_deliveries
from prefctl.errors import NotFoundError, UsageError
from prefctl.store import Store, accounts, subscriptions
from prefctl.store.deliveries import enqueue, requeue
from prefctl.store.delivery_history import DeliveryQuery, DeliveryRecord, get_delivery
from prefctl.store.events import EventQuery, StoredEvent, get_event, list_events, stored_rowid
from prefctl.store.subscriptions import SubscriptionRecord

__all__ = [
    "ReplayItem",
    "ReplaySource",
    "Requeued",
    "Selection",
    "find_subscription",
    "queue_for_subscription",
    "requeue_own",
    "select",
]

_CHUNK = 500


@dataclass(frozen=True)
class ReplaySource:
    """What to replay: a file, the dead letters, or stored events (``event_ids`` or ``since``).

    ``since``/``until`` bound the OriginalEventTime of stored events (Unix seconds, inclusive);
    ``from_subscription`` keeps the stored events queued for that subscription.
    """

    file: Path | None = None
    dead_lettered: DeadLetterFilter | None = None
    event_ids: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    from_subscription: int | None = None

    @property
    def kind(self) -> str:
        """``file``, ``dead_lettered`` or ``events``."""
        if self.file is not None:
            return "file"
        return "dead_lettered" if self.dead_lettered is not None else "events"

    def check(self) -> None:
        """UsageError unless exactly one source is given."""
        stored = bool(self.event_ids) or self.since is not None
        given = [self.file is not None, self.dead_lettered is not None, stored]
        if sum(given) != 1:
            raise UsageError(
                "choose one source: --file F, --dead-lettered, --event ID… or --since T"
            )
        if self.file is not None and (self.until is not None or self.from_subscription):
            raise UsageError("--until and --from-subscription select stored events, not --file")


@dataclass(frozen=True)
class ReplayItem:
    """One event to replay: its content, its row in the store, and the delivery it came from."""

    event: CapturedEvent
    rowid: int | None = None
    delivery_id: int | None = None


@dataclass(frozen=True)
class Selection:
    items: list[ReplayItem]
    skipped: int = 0
    duplicates: int = 0


def select(conn: Store | None, source: ReplaySource) -> Selection:
    """The events ``source`` names; ``conn`` may be None for a file only."""
    source.check()
    if source.file is not None:
        captured = read_captured(source.file)
        items = [ReplayItem(event) for event in captured.events]
        return Selection(items, captured.skipped, captured.duplicates)
    if conn is None:
        raise UsageError("replaying stored events needs a store")
    if source.dead_lettered is not None:
        items = []
        for record in list_dead_letters(conn, source.dead_lettered):
            event = get_event(conn, record.service_client_id, record.event_id)
            if event is not None:
                stored = _captured(event, record.subscription_id)
                items.append(ReplayItem(stored, event.rowid, record.delivery_id))
        return Selection(items)
    return Selection([ReplayItem(_captured(e), e.rowid) for e in _stored_events(conn, source)])


def _stored_events(conn: Store, source: ReplaySource) -> list[StoredEvent]:
    account_ids = [account.service_client_id for account in accounts.list_accounts(conn)]
    if source.event_ids:
        found: dict[str, StoredEvent] = {}
        for event_id in dict.fromkeys(source.event_ids):
            for account in account_ids:
                event = get_event(conn, account, event_id)
                if event is not None:
                    found[event_id] = event
                    break
        missing = [event_id for event_id in source.event_ids if event_id not in found]
        if missing:
            raise NotFoundError(
                f"no stored event {', '.join(missing)}",
                hint="events are kept 15 days; 'prefctl events list' shows them",
            )
        return list(found.values())
    query = EventQuery(
        subscription_id=source.from_subscription, start_at=source.since, end_at=source.until
    )
    events: list[StoredEvent] = []
    for account in account_ids:
        cursor: str | None = None
        while True:
            page = list_events(conn, account, query, limit=_CHUNK, cursor=cursor)
            events.extend(page.events)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    return events


def _captured(event: StoredEvent, subscription_id: int | None = None) -> CapturedEvent:
    return CapturedEvent(
        event_id=event.event_id,
        event_type=event.event_type,
        entity=event.entity,
        profile_id=event.profile_id,
        client_id=event.service_client_id,
        subscription_id=subscription_id or event.subscription_id,
        original_event_time=event.original_event_time,
        data=event.data,
        previous_data=event.previous_data,
    )


def find_subscription(conn: Store, subscription_id: int) -> SubscriptionRecord:
    """The subscription with this id in any account of the store; NotFoundError otherwise."""
    for account in accounts.list_accounts(conn):
        record = subscriptions.get_subscription(conn, account.service_client_id, subscription_id)
        if record is not None:
            return record
    if subscriptions.deleted_among(conn, [subscription_id]):
        raise _deleted(subscription_id)
    raise NotFoundError(f"subscription {subscription_id} not found")


def _deleted(subscription_id: int) -> NotFoundError:
    return NotFoundError(
        f"subscription {subscription_id} was deleted",
        hint="replay its events elsewhere with --to URL or --subscription ID",
    )


def _check_receiving(records: Sequence[SubscriptionRecord]) -> None:
    idle = [r for r in records if not r.receives_events]
    if idle:
        names = ", ".join(f"{r.id} ({r.state}, {r.provisioning_state})" for r in idle)
        raise UsageError(
            f"subscription {names} receives no events, so the replay would never finish",
            hint="resume it or finish its provisioning first, or replay with --to URL",
        )


def queue_for_subscription(
    conn: Store, items: Sequence[ReplayItem], subscription_id: int, *, now: float
) -> list[int]:
    """Queue every item for the subscription (one transaction); returns the delivery ids.

    Captured events not in the store yet are added to the subscription's account first.
    """
    from prefctl.store.db import transaction

    target = find_subscription(conn, subscription_id)
    _check_receiving([target])
    account = target.service_client_id
    with transaction(conn):
        rowids = []
        for item in items:
            rowid = item.rowid
            if rowid is None:
                rowid = _stored_rowid(conn, account, item.event)
            rowids.append(rowid)
        return [enqueue(conn, rowid, subscription_id, now=now) for rowid in rowids]


def _stored_rowid(conn: Store, account: str, event: CapturedEvent) -> int:
    rowid = stored_rowid(conn, account, event.new_event())
    if rowid is None:
        raise UsageError(
            f"event {event.event_id} is stored for another account than the target subscription's"
        )
    return rowid


class Requeued(NamedTuple):
    """What ``requeue_own`` queued, and how many selected deliveries it left because their
    subscription was deleted (they have nowhere to go: ``--to URL`` re-delivers them)."""

    ids: list[int]
    of_deleted_subscriptions: int = 0


def requeue_own(
    conn: Store,
    selection: Selection,
    *,
    now: float,
    from_subscription: int | None = None,
) -> Requeued:
    """Start the selected events over on the subscriptions they were queued for (dead letters:
    their own delivery). Pending deliveries are left as they are; so are deliveries of a deleted
    subscription, unless that is all there is (then NotFoundError says so)."""
    from prefctl.store.db import transaction

    if any(item.rowid is None for item in selection.items):
        raise UsageError("captured events need a target: pass --subscription ID or --to URL")
    with transaction(conn):
        own = [item.delivery_id for item in selection.items if item.delivery_id is not None]
        if own:
            records = [r for r in (get_delivery(conn, i) for i in own) if r is not None]
        else:
            event_ids = [item.event.event_id for item in selection.items]
            records = list(_deliveries_of(conn, event_ids, from_subscription))
        subscription_ids = sorted({record.subscription_id for record in records})
        deleted = subscriptions.deleted_among(conn, subscription_ids)
        if deleted and deleted.issuperset(subscription_ids):
            raise _deleted(subscription_ids[0])
        kept = [record for record in records if record.subscription_id not in deleted]
        _check_receiving([find_subscription(conn, s) for s in subscription_ids if s not in deleted])
        ids = [record.delivery_id for record in kept]
        requeue(conn, ids, now=now)
    return Requeued(ids, len(records) - len(kept))


def _deliveries_of(
    conn: Store, event_ids: Sequence[str], subscription_id: int | None
) -> Iterator[DeliveryRecord]:
    for start in range(0, len(event_ids), _CHUNK):
        chunk = tuple(event_ids[start : start + _CHUNK])
        query = DeliveryQuery(event_ids=chunk, subscription_id=subscription_id)
        yield from iter_deliveries(conn, query)
