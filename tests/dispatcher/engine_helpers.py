"""Helpers for engine tests: a store with an account, subscriptions and queued events, and an
engine on a FakeClock with a model endpoint (``FunctionTransport``)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefctl.clock import FakeClock
from prefctl.dispatcher.engine import Engine
from prefctl.dispatcher.observer import CycleResults
from prefctl.dispatcher.transport import FunctionTransport, Reply, Request
from prefctl.store import Store, deliveries, events
from prefctl.store.db import transaction
from prefctl.store.deliveries import NewDelivery
from prefctl.store.delivery_history import get_delivery, list_attempts
from prefctl.store.events import NewEvent
from prefctl.store.settings import update_settings
from prefctl.webhooks.signature import SigningCredentials
from tests.store.service_helpers import (
    ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
CREDENTIALS = SigningCredentials(ACCOUNT, "events-signer", "test-hashkey")

__all__ = [
    "ACCOUNT",
    "CREDENTIALS",
    "T0",
    "Recorder",
    "Rig",
    "attempts_of",
    "new_store",
    "queue_events",
    "record_of",
    "set_settings",
    "states",
    "subscribe",
]


def new_store(path: Path | str) -> Store:
    """A migrated store at ``path`` (a SQLite file or a PostgreSQL URL) with accounts DEMO_CORP and OTHER_CORP (hashkey
    ``test-hashkey``, signature user ``events-signer``)."""
    return open_service_store(path)


def subscribe(conn: Store, url: str, *, name: str = "CRM sync", **kw: Any) -> int:
    """A Succeeded, Active subscription of DEMO_CORP to profile.created at ``url``."""
    return add_subscription(conn, subscription_body(url, name=name), **kw)


def queue_events(
    conn: Store,
    subscription_id: int,
    count: int,
    *,
    at: float = T0,
    account: str = ACCOUNT,
    prefix: str = "00000000",
) -> list[int]:
    """``count`` profile.created events queued for ``subscription_id`` at ``at``; returns the
    delivery ids in order."""
    new = [
        NewEvent(
            event_id=f"{prefix}-0000-4000-8000-{n:012d}",
            event_type="profile.created",
            entity="Profile",
            profile_id=1001 + n,
            original_event_time=at - 1,
            data={"ProfileId": 1001 + n, "Emails": [{"Address": f"p{n}@example.com"}]},
        )
        for n in range(count)
    ]
    with transaction(conn):
        rowids = events.insert_events(conn, account, new)
        deliveries.add_deliveries(conn, [NewDelivery(r, subscription_id) for r in rowids], now=at)
        placeholders = ",".join("?" * len(rowids))
        rows = conn.execute(
            f"SELECT id FROM deliveries WHERE subscription_id = ? AND event_rowid IN ({placeholders})"
            " ORDER BY id",
            (subscription_id, *rowids),
        ).fetchall()
    return [row[0] for row in rows]


def set_settings(conn: Store, account: str = ACCOUNT, /, **values: int) -> None:
    with transaction(conn):
        update_settings(conn, account, values)


def states(conn: Store) -> Counter[str]:
    return Counter(row[0] for row in conn.execute("SELECT state FROM deliveries"))


def record_of(conn: Store, delivery_id: int) -> Any:
    record = get_delivery(conn, delivery_id)
    assert record is not None
    return record


def attempts_of(conn: Store, delivery_id: int) -> list[Any]:
    return list_attempts(conn, delivery_id)


class Recorder:
    """An observer that keeps what it is told."""

    def __init__(self) -> None:
        self.results: list[tuple[datetime, CycleResults]] = []
        self.cycles: list[datetime] = []

    def on_results(self, now: datetime, results: CycleResults) -> None:
        self.results.append((now, results))

    def on_cycle(self, now: datetime) -> None:
        self.cycles.append(now)

    @property
    def dead_letters(self) -> list[Any]:
        return [letter for _, results in self.results for letter in results.dead_letters]


class Rig:
    """An engine on a FakeClock at T0 and a model endpoint ``answer(request) -> Reply`` (default:
    200 at once), over ``conn``. ``run(coro)`` runs on one event loop kept for the rig."""

    def __init__(
        self,
        conn: Store,
        answer: Callable[[Request], Reply] | None = None,
        *,
        time_scale: float = 1.0,
        seed: int = 1,
        payloads: bool = True,
    ) -> None:
        self.clock = FakeClock(datetime.fromtimestamp(T0, UTC))
        self.transport = FunctionTransport(
            answer or (lambda _request: Reply(200)), payloads=payloads
        )
        self.recorder = Recorder()
        self.engine = Engine(
            conn,
            transport=self.transport,
            clock=self.clock,
            rng=random.Random(seed),
            time_scale=time_scale,
            observers=[self.recorder],
        )
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def cycle(self) -> Any:
        return self.run(self.engine.run_cycle())

    def advance(self, seconds: float) -> Any:
        """Move the clock on and run a cycle."""
        self.clock.advance(seconds)
        return self.cycle()

    def advance_to(self, moment: float) -> Any:
        """Move the clock to ``moment`` (Unix seconds; a microsecond past it, against rounding)
        and run a cycle."""
        self.clock.advance(max(0.0, moment - self.clock.now().timestamp() + 1e-6))
        return self.cycle()

    def close(self) -> None:
        self.run(self.engine.close())
        self.loop.close()
