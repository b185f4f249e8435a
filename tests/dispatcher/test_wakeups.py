"""New deliveries wake an idle dispatcher on PostgreSQL (LISTEN/NOTIFY), instead of waiting for
its account's next turn; on SQLite the dispatcher polls every Duration as before."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from prefctl.dispatcher.run import DispatcherConfig, running
from prefctl.receiver.serve import ReceiverConfig, start_in_thread
from prefctl.store import Store
from prefctl.store.wakeups import listen_for_due
from tests.dispatcher.engine_helpers import (
    CREDENTIALS,
    new_store,
    queue_events,
    set_settings,
    subscribe,
)
from tests.helpers import wait_until

DURATION = 20  # seconds between an account's cycles: far longer than a woken delivery takes


def _listening(conn: Store) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN prefctl_%'"
    ).fetchone()
    return bool(row[0])


def test_idle_postgresql_dispatcher_is_woken_by_a_new_delivery(postgres_url: str) -> None:
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS)) as receiver:
        conn = new_store(postgres_url)
        subscription = subscribe(conn, receiver.webhook_url)
        set_settings(conn, Duration=DURATION)
        took: list[float] = []

        async def main() -> None:
            config = DispatcherConfig(store_path=postgres_url, plugins=False)
            async with running(config) as engine:
                # Its first cycle found nothing: the account waits DURATION for its next turn.
                while engine.totals.cycles < 1 or not _listening(conn):
                    await asyncio.sleep(0.02)
                started = time.monotonic()
                queue_events(conn, subscription, 1, at=time.time())
                await asyncio.to_thread(receiver.wait_for, 1, timeout=DURATION / 2)
                took.append(time.monotonic() - started)

        asyncio.run(main())
        conn.close()
    assert took[0] < DURATION / 2


def test_listener_wakes_once_on_connecting_and_on_each_notification(postgres_url: str) -> None:
    conn = new_store(postgres_url)
    woken: list[float] = []
    listener = listen_for_due(postgres_url, lambda: woken.append(time.monotonic()))
    assert listener is not None
    try:
        assert listener.wait_listening(10)
        wait_until(lambda: len(woken) == 1, what="no wake-up on connecting")
        with conn.transaction():  # one notification per transaction, however many rows
            queue_events(conn, subscribe(conn, "https://hooks.example/in"), 3)
        wait_until(lambda: len(woken) == 2, what="no wake-up for the new deliveries")
    finally:
        listener.close()
        conn.close()


def test_no_listener_for_a_sqlite_store(tmp_path: Path) -> None:
    assert listen_for_due(tmp_path / "store.db", lambda: None) is None
