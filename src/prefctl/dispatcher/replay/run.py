"""Replay: re-deliver stored, dead-lettered or captured events through the dispatcher.

``replay(config)`` is what ``prefctl replay`` forwards to. The source (``ReplaySource``) is a file
of captured events, the dead letters, or stored events; the target (``ReplayTarget``) is:

- a subscription (``subscription_id``): each event is queued for it in the store;
- nothing: each event starts over on the subscription(s) it was queued for (a dead letter on its
  own subscription);
- a URL (``url``): a one-off delivery outside the store's subscriptions (``direct.py``).

A replayed delivery starts over: attempts 0, a new EventTime (when it was queued again, docs/webhooks.md), due at once; the EventId is the original's, so receivers can deduplicate. How it is
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
from collections.abc import Callable, Sequence
from pathlib import Path

from prefctl.clock import Clock
from prefctl.dispatcher.operations import open_existing_store
from prefctl.dispatcher.replay.direct import replay_to_url
from prefctl.dispatcher.replay.model import (
    DEFAULT_TIMEOUT_SECONDS,
    ReplayConfig,
    ReplayOutcome,
    ReplayProgress,
    ReplaySummary,
    ReplayTarget,
)
from prefctl.dispatcher.replay.queue import (
    ReplaySource,
    Selection,
    queue_for_subscription,
    requeue_own,
    select,
)
from prefctl.dispatcher.replay.wait import engine_running, wait_final
from prefctl.store.delivery_history import DeliveryRecord, get_deliveries
from prefctl.store.timestamps import epoch

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

EMULATOR_CHECK_SECONDS = 2.0


def replay(config: ReplayConfig) -> ReplaySummary:
    """Run one replay to the end (see the module docstring); blocking."""
    config.check()
    return asyncio.run(_replay(config))


async def _replay(config: ReplayConfig) -> ReplaySummary:
    started = config.clock.monotonic()
    if config.target.url is not None:
        return await replay_to_url(config, started)
    assert config.store_path is not None  # checked: only a --to URL replay goes without a store
    store_path = config.store_path
    dispatcher = config.dispatcher
    if dispatcher == "auto":
        served = config.served is not None and config.served(store_path)
        dispatcher = "emulator" if served else "in_process"
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
            serving = _Serving(store_path, config.clock, config.served)
            watch = serving.still if config.dispatcher == "auto" else None
            await wait_final(conn, ids, config, started, keep_waiting=watch)
            if serving.stopped:  # the emulator stopped meanwhile: deliver the rest here
                dispatcher = "in_process"
        if config.wait and ids and dispatcher == "in_process":
            async with engine_running(store_path, config):
                await wait_final(conn, ids, config, started)
        by_id = {record.delivery_id: record for record in get_deliveries(conn, ids)}
        records = [by_id[i] for i in ids if i in by_id]
    return _summary(config, dispatcher, selection, records, started, left)


class _Serving:
    """Whether the emulator that delivers a replay still serves its store, asked every
    ``EMULATOR_CHECK_SECONDS``: a replay whose emulator stops (``emulator stop``, a crash) goes on
    with the engine in-process instead of waiting out its timeout for deliveries nobody makes."""

    def __init__(
        self, store_path: Path | str, clock: Clock, served: Callable[[Path | str], bool] | None
    ) -> None:
        self.store_path = store_path
        self.clock = clock
        self.served = served
        self.checked = clock.monotonic()
        self.stopped = False

    async def still(self) -> bool:
        if self.clock.monotonic() - self.checked >= EMULATOR_CHECK_SECONDS:
            self.checked = self.clock.monotonic()
            served = self.served
            self.stopped = served is None or not await asyncio.to_thread(served, self.store_path)
        return not self.stopped


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
