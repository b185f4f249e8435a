"""Replay: re-deliver stored, dead-lettered or captured events through the dispatcher.

``replay(config)`` is what ``prefctl replay`` forwards to. The source (``ReplaySource``) is a file
of captured events, the dead letters, or stored events; the target (``ReplayTarget``) is:

- a subscription (``subscription_id``): each event is queued for it in the store;
- nothing: each event starts over on the subscription(s) it was queued for (a dead letter on its
  own subscription);
- a URL (``url``): a one-off delivery outside the store's subscriptions (``replay_direct.py``).

A replayed delivery starts over: attempts 0, a new EventTime (when it was queued again, DESIGN
§7.3), due at once; the EventId is the original's, so receivers can deduplicate. How it is
delivered depends on who runs the dispatcher on the store (``ReplayConfig.dispatcher``):

- ``emulator``: an emulator serves the store; its dispatcher delivers, and replay polls the store;
- ``in_process``: the engine runs in this process on the store until the replayed deliveries are
  final (it also delivers anything else that is due there, as ``dispatcher run`` would);
- ``auto`` (default): ``emulator`` when ``prefctl emulator start`` serves the store, else
  ``in_process``. When the emulator stops while replay waits, replay goes on ``in_process``.

Replay waits until every replayed delivery is delivered or dead-lettered, or ``timeout`` passes;
``wait=False`` only queues them. ``on_progress`` sees the counts as they change.

    >>> summary = replay(ReplayConfig(store_path, ReplaySource(dead_lettered=DeadLetterFilter()),
    ...                               ReplayTarget()))
    >>> summary.succeeded, summary.delivered, summary.dead_lettered
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from prefctl.clock import Clock, SystemClock
from prefctl.dispatcher.operations import emulator_serving, open_existing_store
from prefctl.dispatcher.replay_queue import (
    ReplaySource,
    Selection,
    queue_for_subscription,
    requeue_own,
    select,
)
from prefctl.errors import UsageError
from prefctl.store.deliveries import FINAL_STATES
from prefctl.store.delivery_history import DeliveryRecord, delivery_states, get_deliveries
from prefctl.store.timestamps import epoch
from prefctl.webhooks.signature import SigningCredentials

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "ReplayConfig",
    "ReplayOutcome",
    "ReplayProgress",
    "ReplaySource",
    "ReplaySummary",
    "ReplayTarget",
    "replay",
]

DEFAULT_TIMEOUT_SECONDS = 300.0
POLL_SECONDS = 0.1
EMULATOR_CHECK_SECONDS = 2.0
Dispatcher = Literal["auto", "emulator", "in_process"]


@dataclass(frozen=True)
class ReplayTarget:
    """Where replayed events go: ``url``, ``subscription_id``, or neither (their own)."""

    url: str | None = None
    subscription_id: int | None = None

    def check(self) -> None:
        if self.url is not None and self.subscription_id is not None:
            raise UsageError("choose one target: --to URL or --subscription ID")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise UsageError(f"--to must be an http(s) URL, not '{self.url}'")

    def to_dict(self) -> dict[str, Any]:
        if self.url is not None:
            return {"url": self.url}
        if self.subscription_id is not None:
            return {"subscription_id": self.subscription_id}
        return {"own_subscriptions": True}


@dataclass(frozen=True)
class ReplayProgress:
    """Counts of the replayed deliveries so far."""

    total: int
    delivered: int = 0
    dead_lettered: int = 0

    @property
    def finished(self) -> int:
        return self.delivered + self.dead_lettered


@dataclass(frozen=True)
class ReplayOutcome:
    """Where one replayed delivery ended (``state`` is still pending after a timeout)."""

    event_id: str
    event_type: str
    subscription_id: int | None
    delivery_id: int | None
    state: str
    attempts: int
    reason: str | None
    last_status: int | None
    last_error: str | None

    @classmethod
    def of(cls, record: DeliveryRecord) -> ReplayOutcome:
        return cls(
            event_id=record.event_id,
            event_type=record.event_type,
            subscription_id=record.subscription_id,
            delivery_id=record.delivery_id,
            state=record.state,
            attempts=record.attempts,
            reason=record.dead_letter_reason,
            last_status=record.last_status,
            last_error=record.last_error,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "subscription_id": self.subscription_id,
            "delivery_id": self.delivery_id,
            "state": self.state,
            "attempts": self.attempts,
            "reason": self.reason,
            "last_status": self.last_status,
            "last_error": self.last_error,
        }


@dataclass(frozen=True)
class ReplaySummary:
    """How a replay went; ``succeeded`` when every replayed event was delivered (or, without
    waiting, queued)."""

    source: str
    target: ReplayTarget
    dispatcher: str
    waited: bool
    skipped: int
    duplicates: int
    elapsed_seconds: float
    outcomes: list[ReplayOutcome]
    # Selected deliveries left because their subscription was deleted (no --to: nowhere to go).
    of_deleted_subscriptions: int = 0

    def count(self, state: str) -> int:
        return sum(1 for outcome in self.outcomes if outcome.state == state)

    @property
    def delivered(self) -> int:
        return self.count("delivered")

    @property
    def dead_lettered(self) -> int:
        return self.count("dead_lettered")

    @property
    def pending(self) -> int:
        return len(self.outcomes) - self.delivered - self.dead_lettered

    @property
    def succeeded(self) -> bool:
        if not self.waited:
            return True
        return self.delivered == len(self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        """The summary object of ``prefctl replay -o json``."""
        return {
            "source": self.source,
            "target": self.target.to_dict(),
            "dispatcher": self.dispatcher,
            "waited": self.waited,
            "total": len(self.outcomes),
            "delivered": self.delivered,
            "dead_lettered": self.dead_lettered,
            "pending": self.pending,
            "skipped": self.skipped,
            "duplicates": self.duplicates,
            "of_deleted_subscriptions": self.of_deleted_subscriptions,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "succeeded": self.succeeded,
            "outcomes": [outcome.to_dict() for outcome in self.outcomes],
        }


@dataclass(frozen=True)
class ReplayConfig:
    """One replay. ``store_path`` is the store the events come from (and, for a subscription or
    their own, go to); a file replayed ``--to URL`` needs none. ``credentials`` signs a ``--to``
    replay when the store holds no account for the events (the profile's webhook credentials).
    ``time_scale`` divides the delivery-rule durations of an in-process engine."""

    store_path: Path | None
    source: ReplaySource
    target: ReplayTarget = field(default_factory=ReplayTarget)
    dispatcher: Dispatcher = "auto"
    wait: bool = True
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    max_attempts: int | None = None
    time_scale: float = 1.0
    clock: Clock = field(default_factory=SystemClock)
    rng: random.Random = field(default_factory=random.Random)
    credentials: Callable[[], SigningCredentials] | None = None
    on_progress: Callable[[ReplayProgress], None] | None = None

    def check(self) -> None:
        self.source.check()
        self.target.check()
        if not self.timeout > 0:
            raise UsageError("--timeout must be more than 0 seconds")
        if self.max_attempts is not None and self.target.url is None:
            raise UsageError(
                "--max-attempts applies to --to URL; a subscription follows its account's settings"
            )
        if self.target.url is not None and not self.wait:
            raise UsageError("--no-wait needs a subscription: a --to URL replay runs in-process")
        if self.store_path is None and self.source.file is None:
            raise UsageError("replaying stored events needs a store")


def replay(config: ReplayConfig) -> ReplaySummary:
    """Run one replay to the end (see the module docstring); blocking."""
    config.check()
    return asyncio.run(_replay(config))


async def _replay(config: ReplayConfig) -> ReplaySummary:
    started = config.clock.monotonic()
    if config.target.url is not None:
        from prefctl.dispatcher.replay_direct import replay_to_url

        return await replay_to_url(config, started)
    assert config.store_path is not None  # checked: only a --to URL replay goes without a store
    store_path = config.store_path
    dispatcher = config.dispatcher
    if dispatcher == "auto":
        dispatcher = "emulator" if emulator_serving(store_path) else "in_process"
    with open_existing_store(store_path) as conn:
        selection = select(conn, config.source)
        now = epoch(config.clock.now())
        left = 0
        if config.target.subscription_id is not None:
            ids = queue_for_subscription(
                conn, selection.items, config.target.subscription_id, now=now
            )
        else:
            requeued = requeue_own(
                conn, selection, now=now, from_subscription=config.source.from_subscription
            )
            ids, left = requeued.ids, requeued.of_deleted_subscriptions
        ids = list(dict.fromkeys(ids))  # two dead letters of one event → one delivery
        if config.wait and ids and dispatcher == "emulator":
            serving = _Serving(store_path, config.clock)
            watch = serving.still if config.dispatcher == "auto" else None
            await wait_final(conn, ids, config, started, keep_waiting=watch)
            if serving.stopped:  # the emulator stopped meanwhile: deliver the rest here
                dispatcher = "in_process"
        if config.wait and ids and dispatcher == "in_process":
            from prefctl.dispatcher.replay_direct import engine_running

            async with engine_running(store_path, config):
                await wait_final(conn, ids, config, started)
        by_id = {record.delivery_id: record for record in get_deliveries(conn, ids)}
        records = [by_id[i] for i in ids if i in by_id]
    return _summary(config, dispatcher, selection, records, started, left)


class _Serving:
    """Whether the emulator that delivers a replay still serves its store, asked every
    ``EMULATOR_CHECK_SECONDS``: a replay whose emulator stops (``emulator stop``, a crash) goes on
    with the engine in-process instead of waiting out its timeout for deliveries nobody makes."""

    def __init__(self, store_path: Path, clock: Clock) -> None:
        self.store_path = store_path
        self.clock = clock
        self.checked = clock.monotonic()
        self.stopped = False

    async def still(self) -> bool:
        if self.clock.monotonic() - self.checked >= EMULATOR_CHECK_SECONDS:
            self.checked = self.clock.monotonic()
            self.stopped = not await asyncio.to_thread(emulator_serving, self.store_path)
        return not self.stopped


async def wait_final(
    conn: sqlite3.Connection,
    delivery_ids: Sequence[int],
    config: ReplayConfig,
    started: float,
    *,
    keep_waiting: Callable[[], Awaitable[bool]] | None = None,
) -> list[DeliveryRecord]:
    """Poll the store until every delivery is final or the timeout passes (or ``keep_waiting``
    says no more); returns the records in the order of ``delivery_ids`` (a delivery deleted
    meanwhile is left out).

    Each poll reads only the states of the pending deliveries, in one query, and full records
    only of those that became final: the in-process engine shares this event loop, so a poll
    that read every pending record one by one (tens of thousands of queries every quarter
    second) slowed the very deliveries it waited for.
    """
    ids = list(dict.fromkeys(delivery_ids))
    latest = {record.delivery_id: record for record in get_deliveries(conn, ids)}
    pending = [i for i in ids if i in latest and latest[i].state not in FINAL_STATES]
    last: ReplayProgress | None = None
    while True:
        states = [record.state for record in latest.values()]
        progress = ReplayProgress(
            total=len(latest),
            delivered=states.count("delivered"),
            dead_lettered=states.count("dead_lettered"),
        )
        if progress != last and config.on_progress is not None:
            config.on_progress(progress)
        last = progress
        timed_out = config.clock.monotonic() - started >= config.timeout
        if not pending or timed_out or (keep_waiting is not None and not await keep_waiting()):
            for record in get_deliveries(conn, pending):  # as they stand now
                latest[record.delivery_id] = record
            return [latest[i] for i in ids if i in latest]
        await config.clock.sleep(POLL_SECONDS)
        now_states = delivery_states(conn, pending)
        for gone in (i for i in pending if i not in now_states):
            del latest[gone]
        final = [i for i in pending if now_states.get(i) in FINAL_STATES]
        for record in get_deliveries(conn, final):
            latest[record.delivery_id] = record
        pending = [i for i in pending if i in now_states and now_states[i] not in FINAL_STATES]


def _summary(
    config: ReplayConfig,
    dispatcher: str,
    selection: Selection,
    records: Sequence[DeliveryRecord],
    started: float,
    of_deleted_subscriptions: int = 0,
) -> ReplaySummary:
    return ReplaySummary(
        source=config.source.kind,
        target=config.target,
        dispatcher=dispatcher,
        waited=config.wait,
        skipped=selection.skipped,
        duplicates=selection.duplicates,
        elapsed_seconds=config.clock.monotonic() - started,
        outcomes=[ReplayOutcome.of(record) for record in records],
        of_deleted_subscriptions=of_deleted_subscriptions,
    )
