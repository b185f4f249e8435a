"""Events: what profile changes produced, kept 15 days for ``GET /events`` and replay.

An event is stored once, whatever the number of subscriptions it goes to; each of those is a row
of the delivery queue (``deliveries.py``) carrying that subscription's EventTime. ``list_events``
pages in (OriginalEventTime, insertion) order with an opaque cursor; ``startAt``/``endAt`` are
both inclusive. ``purge_events`` deletes events older than the retention and, with them, their
deliveries and attempt logs (a subscription paused with catch-up for longer than that catches up
on the last 15 days only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from prefctl.store._paging import decode_cursor, encode_cursor, take_page
from prefctl.store.connection import stored_json
from prefctl.store.db import atomic
from prefctl.store.timestamps import wire_time

if TYPE_CHECKING:
    from prefctl.store import Row, Store

__all__ = [
    "RETENTION_DAYS",
    "EventPage",
    "EventQuery",
    "NewEvent",
    "StoredEvent",
    "drop_history_indexes",
    "get_event",
    "insert_events",
    "list_events",
    "purge_events",
    "stored_rowid",
]

RETENTION_DAYS = 15
_CURSOR_KIND = "events"
# The indexes of ``events`` that only reading the history uses (``list_events`` by time, profile
# or type): writing an event pays for each.
_HISTORY_INDEXES = ("events_time", "events_profile", "events_type")


# Not frozen: one per event written (the simulator writes 100k), and a frozen dataclass's
# __init__ (object.__setattr__ per field) cost ~5x a plain one. Treat it as immutable.
@dataclass(slots=True)
class NewEvent:
    """An event to store; ``original_event_time`` is Unix seconds."""

    event_id: str
    event_type: str
    entity: str
    profile_id: int | None
    original_event_time: float
    data: dict[str, Any]
    previous_data: dict[str, Any] | None = None
    filter_values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A stored event; with ``subscription_id``/``event_time`` when listed for a subscription."""

    rowid: int
    event_id: str
    service_client_id: str
    event_type: str
    entity: str
    profile_id: int | None
    original_event_time: float
    data: dict[str, Any]
    previous_data: dict[str, Any] | None
    filter_values: tuple[str, ...] = field(default=())
    subscription_id: int | None = None
    event_time: float | None = None

    def to_wire(self) -> dict[str, Any]:
        """The event in the notification's shape (docs/webhooks.md); SubscriptionId and EventTime
        only when it was listed for a subscription, PreviousData only when it has some."""
        wire: dict[str, Any] = {
            "EventId": self.event_id,
            "EventType": self.event_type,
            "Entity": self.entity,
        }
        if self.subscription_id is not None:
            wire["SubscriptionId"] = self.subscription_id
        wire["ClientId"] = self.service_client_id
        wire["ProfileId"] = self.profile_id
        if self.event_time is not None:
            wire["EventTime"] = wire_time(self.event_time)
        wire["OriginalEventTime"] = wire_time(self.original_event_time)
        wire["Data"] = self.data
        if self.previous_data is not None:
            wire["PreviousData"] = self.previous_data
        return wire


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Filters of ``GET /events``; times are Unix seconds, both bounds inclusive."""

    profile_id: int | None = None
    subscription_id: int | None = None
    event_type: str | None = None
    start_at: float | None = None
    end_at: float | None = None


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[StoredEvent]
    next_cursor: str | None


_INSERT_SQL = (
    "INSERT INTO events (id, event_id, service_client_id, event_type, entity, profile_id,"
    " original_event_time, data, previous_data, filter_values)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def insert_events(conn: Store, account: str, events: Iterable[NewEvent]) -> list[int]:
    """Store events; returns their row ids (what deliveries point at), in order.

    The ids are the ones SQLite would choose (one above the largest), assigned here under the
    same write lock so that they need no reading back: looking them up by EventId cost more than
    writing the events' three history indexes (bench/api.py). PostgreSQL has no such lock (other
    connections write at once): there one statement inserts them all from arrays, the table's
    identity choosing the ids, and returns each id with its EventId."""
    events = list(events)
    if not events:
        return []
    rows = [
        (
            event.event_id,
            event.event_type,
            event.entity,
            event.profile_id,
            event.original_event_time,
            orjson.dumps(event.data).decode(),
            None if event.previous_data is None else orjson.dumps(event.previous_data).decode(),
            orjson.dumps(list(event.filter_values)).decode(),
        )
        for event in events
    ]
    if conn.dialect == "postgresql":
        # One statement and one round trip for any number of events: a row per event, or
        # taking ids from the sequence first, cost the writer a round trip each (bench/api.py).
        columns = [list(column) for column in zip(*rows, strict=True)]
        ids = dict(conn.execute(_INSERT_SQL_POSTGRES, (account, *columns), tuples=True).fetchall())
        return [ids[event.event_id] for event in events]
    with atomic(conn):
        first = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM events").fetchone()[0])
        conn.executemany(
            _INSERT_SQL,
            [(rowid, row[0], account, *row[1:]) for rowid, row in enumerate(rows, first)],
        )
    return list(range(first, first + len(rows)))


_INSERT_SQL_POSTGRES = (
    "INSERT INTO events (event_id, service_client_id, event_type, entity, profile_id,"
    " original_event_time, data, previous_data, filter_values)"
    " SELECT e, ?, t, n, p, o, d, pd, f FROM unnest(?::text[], ?::text[], ?::text[], ?::bigint[],"
    " ?::double precision[], ?::text[], ?::text[], ?::text[]) AS x(e, t, n, p, o, d, pd, f)"
    " RETURNING event_id, id"
)


_COLUMNS = (
    "e.id, e.event_id, e.service_client_id, e.event_type, e.entity, e.profile_id,"
    " e.original_event_time, e.data, e.previous_data, e.filter_values"
)


def get_event(conn: Store, account: str, event_id: str) -> StoredEvent | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM events e WHERE e.event_id = ? AND e.service_client_id = ?",  # noqa: S608
        (event_id, account),
    ).fetchone()
    return _event(row) if row else None


def list_events(
    conn: Store,
    account: str,
    query: EventQuery,
    *,
    limit: int = 100,
    cursor: str | None = None,
) -> EventPage:
    """One page of the account's events matching ``query``, oldest first.

    Raises ``UsageError`` for an invalid cursor.
    """
    where: list[str] = ["e.service_client_id = ?"]
    args: list[Any] = [account]
    columns = _COLUMNS
    source = "events e"
    if query.subscription_id is not None:
        columns += ", d.subscription_id, d.event_time"
        source += " JOIN deliveries d ON d.event_rowid = e.id AND d.subscription_id = ?"
        args.insert(0, query.subscription_id)
    if query.profile_id is not None:
        where.append("e.profile_id = ?")
        args.append(query.profile_id)
    if query.event_type is not None:
        where.append("e.event_type = ?")
        args.append(query.event_type)
    if query.start_at is not None:
        where.append("e.original_event_time >= ?")
        args.append(query.start_at)
    if query.end_at is not None:
        where.append("e.original_event_time <= ?")
        args.append(query.end_at)
    if cursor:
        after_time, after_id = decode_cursor(_CURSOR_KIND, cursor, 2)
        where.append("(e.original_event_time, e.id) > (?, ?)")
        args += [after_time, after_id]
    sql = (
        f"SELECT {columns} FROM {source} WHERE {' AND '.join(where)}"  # noqa: S608
        " ORDER BY e.original_event_time, e.id LIMIT ?"
    )
    rows, more = take_page(
        conn.execute(sql, (*args, limit + 1)), limit, lambda row: len(row[7]) + len(row[8] or "")
    )
    events = [_event(row) for row in rows]
    next_cursor = None
    if more:
        last = events[-1]
        next_cursor = encode_cursor(_CURSOR_KIND, (last.original_event_time, last.rowid))
    return EventPage(events, next_cursor)


def purge_events(conn: Store, now: float, *, retention_days: int = RETENTION_DAYS) -> int:
    """Delete events older than ``retention_days`` with their deliveries; returns how many."""
    cutoff = now - retention_days * 86_400
    accounts = [row[0] for row in conn.execute("SELECT service_client_id FROM accounts")]
    # Per account, so that the (account, time) index serves it: no index on time alone to keep
    # up on every write.
    return sum(
        conn.execute(
            "DELETE FROM events WHERE service_client_id = ? AND original_event_time < ?",
            (account, cutoff),
        ).rowcount
        for account in accounts
    )


def stored_rowid(conn: Store, account: str, event: NewEvent) -> int | None:
    """The row id of ``event`` in ``account``: the stored one's, or the one it gets stored with
    now; None when its EventId is stored for another account (EventIds are unique across
    accounts). Run it in the caller's transaction."""
    stored = conn.execute(
        "SELECT id, service_client_id FROM events WHERE event_id = ?", (event.event_id,)
    ).fetchone()
    if stored is not None:
        return int(stored[0]) if stored[1] == account else None
    return insert_events(conn, account, [event])[0]


def drop_history_indexes(conn: Store) -> None:
    """Drop the indexes that only reading the event history uses, for a store whose events are
    never listed (the simulator's): every event written costs less. ``list_events`` still
    answers, by a scan."""
    for index in _HISTORY_INDEXES:
        conn.execute(f"DROP INDEX {index}")


def _event(row: Row) -> StoredEvent:
    values = tuple(row)
    return StoredEvent(
        rowid=values[0],
        event_id=values[1],
        service_client_id=values[2],
        event_type=values[3],
        entity=values[4],
        profile_id=values[5],
        original_event_time=values[6],
        data=stored_json(values[7]),
        previous_data=None if values[8] is None else stored_json(values[8]),
        filter_values=tuple(stored_json(values[9])),
        subscription_id=values[10] if len(values) > 10 else None,
        event_time=values[11] if len(values) > 10 else None,
    )
