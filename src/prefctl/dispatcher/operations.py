"""Delivery operations over a store: which store, time filters, deliveries and their timelines.

``prefctl deliveries``, ``deadletters`` and ``replay`` act on a store directly, so they work
whether or not the emulator runs: by default the emulator's store in the data dir
(``config/paths.py``), or any store given with ``--store PATH|URL``: a SQLite file or a
PostgreSQL database (``resolve_store_location``).

    >>> with open_existing_store(resolve_store_location(None)) as conn:
    ...     for record in list_deliveries(conn, states=("queued",)):
    ...         print(record.to_dict())
    ...     timeline = show_delivery(conn, 7)      # the delivery and every attempt

Records print with snake_case keys (``DeliveryRecord.to_dict``); a delivery's timeline adds
``"timeline"``: one entry per attempt (attempt number, times, outcome, status, error, latency).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefctl.errors import NotFoundError, UsageError
from prefctl.store import Store
from prefctl.store.deliveries import DeliveryState
from prefctl.store.delivery_history import (
    AttemptRecord,
    DeliveryQuery,
    DeliveryRecord,
    get_delivery,
    list_attempts,
)
from prefctl.store.delivery_history import list_deliveries as _list_deliveries
from prefctl.store.timestamps import wire_time

__all__ = [
    "DEFAULT_LIMIT",
    "DELIVERY_STATES",
    "DeliveryTimeline",
    "describe_store",
    "iter_deliveries",
    "list_deliveries",
    "open_existing_store",
    "resolve_store",
    "resolve_store_location",
    "show_delivery",
]

DEFAULT_LIMIT = 100
DELIVERY_STATES: tuple[DeliveryState, ...] = (
    "held",
    "queued",
    "in_flight",
    "delivered",
    "dead_lettered",
)
_PAGE = 500


def resolve_store(store: Path | str | None, data_dir: Path | str | None = None) -> Path:
    """``--store PATH``, else the emulator's store in the data dir (flag > env > platform dir)."""
    if store is not None:
        return Path(store).expanduser().absolute()
    from prefctl.config.paths import resolve_data_dir, store_path

    return store_path(resolve_data_dir(data_dir))


def resolve_store_location(store: Path | str | None) -> Path | str:
    """``--store PATH|URL``: a PostgreSQL URL as it is, a path (or none) as ``resolve_store``."""
    from prefctl.store.db import is_postgres_location, sqlite_file

    if is_postgres_location(store):
        return str(store)
    return resolve_store(None if store is None else sqlite_file(store))


def describe_store(location: Path | str) -> str:
    """``location`` for a message: a path as it is, a URL without its password."""
    from prefctl.store.db import is_postgres_location

    if is_postgres_location(location):
        from prefctl.store.postgres import redacted

        return redacted(str(location))
    return str(location)


@contextmanager
def open_existing_store(location: Path | str) -> Iterator[Store]:
    """Open (and migrate) a store that exists: a SQLite file, or a PostgreSQL database (a
    ``postgresql://`` URL). A missing file, or a file or database that is not a prefctl store,
    is an error (``require_store``), never a new store."""
    from prefctl.store.db import is_postgres_location, open_store, require_store

    require_store(location)
    with open_store(str(location) if is_postgres_location(location) else Path(location)) as conn:
        yield conn


@dataclass(frozen=True)
class DeliveryTimeline:
    """A delivery and its attempts, oldest first.

    A redriven or replayed delivery starts its attempt numbers at 1 again; its earlier attempts
    stay in the log, so the timeline shows every run.
    """

    delivery: DeliveryRecord
    attempts: list[AttemptRecord]

    @property
    def next_due(self) -> str | None:
        """When the next attempt is due (RFC 3339), while the delivery is queued."""
        if self.delivery.state != "queued" or self.delivery.next_attempt_at is None:
            return None
        return wire_time(self.delivery.next_attempt_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.delivery.to_dict(),
            "timeline": [attempt.to_dict() for attempt in self.attempts],
        }


def iter_deliveries(
    conn: Store, query: DeliveryQuery, *, limit: int | None = None
) -> Iterator[DeliveryRecord]:
    """Every delivery matching ``query`` in id order (up to ``limit``), read a page at a time."""
    after_id, left = 0, limit
    while left is None or left > 0:
        page_size = _PAGE if left is None else min(_PAGE, left)
        page = _list_deliveries(conn, query, limit=page_size, after_id=after_id)
        yield from page
        if len(page) < page_size:
            return
        after_id = page[-1].delivery_id
        if left is not None:
            left -= len(page)


def list_deliveries(
    conn: Store,
    *,
    subscription_id: int | None = None,
    states: Sequence[DeliveryState] = (),
    event_ids: Sequence[str] = (),
    limit: int = DEFAULT_LIMIT,
    after_id: int = 0,
) -> list[DeliveryRecord]:
    """Deliveries in id order (oldest first) after ``after_id``, at most ``limit``."""
    if limit < 1:
        raise UsageError("--limit must be 1 or more")
    unknown = [state for state in states if state not in DELIVERY_STATES]
    if unknown:
        raise UsageError(
            f"unknown delivery state {unknown[0]!r}", hint=f"one of {', '.join(DELIVERY_STATES)}"
        )
    query = DeliveryQuery(
        states=tuple(states), subscription_id=subscription_id, event_ids=tuple(event_ids)
    )
    return _list_deliveries(conn, query, limit=limit, after_id=after_id)


def show_delivery(conn: Store, delivery_id: int) -> DeliveryTimeline:
    """The delivery with its attempt timeline; ``NotFoundError`` when there is none."""
    record = get_delivery(conn, delivery_id)
    if record is None:
        raise NotFoundError(
            f"delivery {delivery_id} not found", hint="'prefctl deliveries list' shows the ids"
        )
    return DeliveryTimeline(record, list_attempts(conn, delivery_id))
