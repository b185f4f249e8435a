"""``dispatcher.replay``: the real engine against real receivers on loopback.

Dead letters are made the way the service makes them: the engine delivers to a receiver that
answers 413 (or fails), and records the dead letter itself.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from prefctl.dispatcher.deadletters import DeadLetterFilter
from prefctl.dispatcher.replay.queue import ReplaySource
from prefctl.dispatcher.replay.run import ReplayConfig, ReplayProgress, ReplayTarget, replay
from prefctl.dispatcher.run import DispatcherConfig, running
from prefctl.dispatcher.run import run as run_dispatcher
from prefctl.errors import UsageError
from prefctl.receiver.faults import FaultPlan, FaultStep, plan_from_options
from prefctl.receiver.serve import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.store.db import connect
from prefctl.store.delivery_history import DeliveryQuery, list_deliveries
from tests.dispatcher.engine_helpers import (
    CREDENTIALS,
    new_store,
    queue_events,
    record_of,
    set_settings,
    subscribe,
)
from tests.helpers import sorted_event_ids


def _receiver(**options: Any) -> RunningReceiver:
    return start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS, **options))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    new_store(path).close()
    return path


def _dead_letters_from(store: Path, url: str, count: int, **settings: int) -> list[int]:
    """``count`` events queued for a subscription to ``url`` and delivered once by the engine."""
    conn = connect(store)
    try:
        if settings:
            set_settings(conn, **settings)
        ids = queue_events(conn, subscribe(conn, url, name=url), count, at=time.time())
    finally:
        conn.close()
    run_dispatcher(DispatcherConfig(store_path=store, once=True, plugins=False))
    return ids


def _config(store: Path | None, source: ReplaySource, **kw: Any) -> ReplayConfig:
    kw.setdefault("time_scale", 50.0)
    kw.setdefault("timeout", 15.0)
    kw.setdefault("dispatcher", "in_process")
    return ReplayConfig(store_path=store, source=source, **kw)


def test_replay_dead_letters_after_the_receiver_recovers_delivers_them_with_their_event_ids(
    store: Path,
) -> None:
    two_413s = FaultPlan(steps=(FaultStep(count=2, status=413),))
    with _receiver(faults=two_413s) as receiver:
        ids = _dead_letters_from(store, receiver.webhook_url, 2)
        first = receiver.wait_for(2)
        seen: list[ReplayProgress] = []

        summary = replay(
            _config(
                store,
                ReplaySource(dead_lettered=DeadLetterFilter(reason="PayloadTooLarge")),
                on_progress=seen.append,
            )
        )
        again = receiver.wait_for(2)

    assert [v.status for v in first] == [413, 413]
    assert (summary.delivered, summary.dead_lettered, summary.pending) == (2, 0, 0)
    assert summary.succeeded
    assert summary.dispatcher == "in_process"
    assert sorted_event_ids(again) == sorted_event_ids(first)
    assert all(v.signature == "valid" and v.status == 200 for v in again)
    first_times = {v.event_id: v.event_time for v in first}
    for verdict in again:  # a new EventTime
        before, after = first_times[verdict.event_id], verdict.event_time
        assert before is not None
        assert after is not None
        assert after > before
    assert seen[-1] == ReplayProgress(total=2, delivered=2)
    conn = connect(store)
    assert [record_of(conn, i).attempts for i in ids] == [1, 1]  # counted afresh
    conn.close()


def test_replay_recording_to_another_subscription_keeps_event_ids(
    store: Path, tmp_path: Path
) -> None:
    recording = tmp_path / "capture.ndjson"
    with _receiver(record=recording) as first:
        _dead_letters_from(store, first.webhook_url, 3)  # all delivered, and recorded
        sent = first.wait_for(3)
    with _receiver() as second:  # the recording is complete once the first receiver stopped
        conn = connect(store)
        target = subscribe(conn, second.webhook_url, name="second")
        conn.close()
        summary = replay(
            _config(
                store,
                ReplaySource(file=recording),
                target=ReplayTarget(subscription_id=target),
            )
        )
        got = second.wait_for(3)

    assert summary.delivered == 3
    assert sorted_event_ids(got) == sorted_event_ids(sent)
    assert {v.subscription_id for v in got} == {target}
    assert {o.subscription_id for o in summary.outcomes} == {target}


def test_replay_stored_event_to_a_url_signs_as_the_store_account_and_leaves_the_store_alone(
    store: Path,
) -> None:
    with _receiver(faults=plan_from_options(respond=413)) as bad, _receiver() as good:
        ids = _dead_letters_from(store, bad.webhook_url, 1)
        conn = connect(store)
        event_id = record_of(conn, ids[0]).event_id
        before = list_deliveries(conn, DeliveryQuery())

        summary = replay(
            _config(
                store,
                ReplaySource(event_ids=(event_id,)),
                target=ReplayTarget(url=good.webhook_url),
            )
        )
        (verdict,) = good.wait_for(1)
        after = list_deliveries(conn, DeliveryQuery())
        conn.close()

    assert summary.succeeded
    assert summary.to_dict()["target"] == {"url": good.webhook_url}
    (outcome,) = summary.outcomes
    assert (outcome.event_id, outcome.state, outcome.subscription_id) == (
        event_id,
        "delivered",
        None,
    )
    assert (verdict.event_id, verdict.signature, verdict.status) == (event_id, "valid", 200)
    assert after == before


def test_replay_to_a_failing_url_dead_letters_after_max_attempts(store: Path) -> None:
    with _receiver(faults=plan_from_options(respond=503)) as failing, _receiver() as good:
        ids = _dead_letters_from(store, good.webhook_url, 1)
        conn = connect(store)
        event_id = record_of(conn, ids[0]).event_id
        conn.close()

        summary = replay(
            _config(
                store,
                ReplaySource(event_ids=(event_id,)),
                target=ReplayTarget(url=failing.webhook_url),
                max_attempts=2,
            )
        )

    (outcome,) = summary.outcomes
    assert not summary.succeeded
    assert (outcome.state, outcome.reason, outcome.attempts, outcome.last_status) == (
        "dead_lettered",
        "MaxDeliveryAttemptsExceeded",
        2,
        503,
    )


def test_replay_timeout_reports_what_is_still_pending(store: Path) -> None:
    with _receiver(faults=plan_from_options(respond=503)) as failing:
        (delivery,) = _dead_letters_from(store, failing.webhook_url, 1)
        conn = connect(store)
        record = record_of(conn, delivery)
        conn.close()
        assert (record.state, record.attempts) == ("queued", 1)  # the retry is 10 s away

        summary = replay(
            _config(
                store,
                ReplaySource(event_ids=(record.event_id,)),
                time_scale=1.0,
                timeout=0.5,
            )
        )

    assert (summary.pending, summary.succeeded) == (1, False)
    assert summary.to_dict()["outcomes"][0]["state"] == "queued"


def test_replay_waits_for_a_dispatcher_that_runs_elsewhere(store: Path) -> None:
    """``dispatcher="emulator"``: replay only queues and polls; another process delivers."""
    two_413s = FaultPlan(steps=(FaultStep(count=1, status=413),))
    with _receiver(faults=two_413s) as receiver:
        _dead_letters_from(store, receiver.webhook_url, 1)
        elsewhere = _DispatcherThread(store)
        try:
            summary = replay(
                _config(
                    store,
                    ReplaySource(dead_lettered=DeadLetterFilter()),
                    dispatcher="emulator",
                )
            )
        finally:
            elsewhere.stop()
    assert (summary.dispatcher, summary.delivered) == ("emulator", 1)


def test_replay_no_wait_only_queues(store: Path) -> None:
    with _receiver(faults=plan_from_options(respond=413)) as receiver:
        (delivery,) = _dead_letters_from(store, receiver.webhook_url, 1)
        summary = replay(_config(store, ReplaySource(dead_lettered=DeadLetterFilter()), wait=False))
    conn = connect(store)
    assert record_of(conn, delivery).state == "queued"
    conn.close()
    assert summary.succeeded
    assert not summary.waited
    assert summary.to_dict()["pending"] == 1


def test_replay_config_rejects_conflicting_options(store: Path) -> None:
    source = ReplaySource(dead_lettered=DeadLetterFilter())
    with pytest.raises(UsageError, match="choose one target"):
        replay(_config(store, source, target=ReplayTarget(url="http://x", subscription_id=1)))
    with pytest.raises(UsageError, match="--max-attempts applies to --to"):
        replay(_config(store, source, max_attempts=3))
    with pytest.raises(UsageError, match="http"):
        replay(_config(store, source, target=ReplayTarget(url="ftp://x")))


class _DispatcherThread:
    """The engine delivering ``store`` on a thread of its own, like an emulator would."""

    def __init__(self, store: Path) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(store),), daemon=True)
        self._thread.start()

    async def _main(self, store: Path) -> None:
        async with running(DispatcherConfig(store_path=store, time_scale=50, plugins=False)):
            await asyncio.to_thread(self._stop.wait)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
