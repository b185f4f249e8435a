"""Waiting for replayed deliveries: the engine run in this process (``engine_running``) and the
poll of the store until they are final (``wait_final``), shared by both kinds of replay."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

from prefctl.dispatcher.replay.model import ReplayConfig, ReplayProgress
from prefctl.store import Store
from prefctl.store.deliveries import FINAL_STATES
from prefctl.store.delivery_history import DeliveryRecord, delivery_states, get_deliveries

__all__ = ["POLL_SECONDS", "engine_running", "wait_final"]

POLL_SECONDS = 0.1


@contextlib.asynccontextmanager
async def engine_running(
    store_path: Path | str, config: ReplayConfig, *, plugins: bool = True
) -> AsyncIterator[None]:
    """The engine delivering ``store_path`` while the block runs; stopped cleanly after it
    (answers recorded, leases of unanswered requests given back). ``plugins`` adds the
    observers a dispatcher runs with (alerts)."""
    from prefctl.dispatcher.run import DispatcherConfig, running

    dispatcher = DispatcherConfig(
        store_path=store_path,
        clock=config.clock,
        rng=config.rng,
        time_scale=config.time_scale,
        plugins=plugins,
    )
    async with running(dispatcher):
        yield


async def wait_final(
    conn: Store,
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
