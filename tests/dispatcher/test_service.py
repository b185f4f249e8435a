"""The dispatcher inside the emulator: it delivers while the emulator serves, with its time scale,
and gives back what it holds when the emulator stops."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.receiver.faults import plan_from_options
from prefctl.receiver.serve import ReceiverConfig
from prefctl.receiver.serve import start_in_thread as start_receiver
from prefctl.store.db import connect
from prefctl.store.delivery_history import get_delivery
from prefctl.webhooks.signature import SigningCredentials
from tests.dispatcher.engine_helpers import queue_events, subscribe
from tests.emulator.subscriptions.endpoints import stub_endpoint
from tests.helpers import free_port, wait_until


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def _emulator(data_dir: Path, **options: object) -> RunningEmulator:
    config = EmulatorConfig(port=free_port(), data_dir=data_dir, **options)  # type: ignore[arg-type]
    return start_in_thread(config)


def _credentials(emulator: RunningEmulator) -> SigningCredentials:
    account = emulator.account
    return SigningCredentials(account.service_client_id, account.signature_user_id, account.hashkey)


@pytest.fixture
def emulator(data_dir: Path) -> Iterator[RunningEmulator]:
    running = _emulator(data_dir, time_scale=100.0, seed=3)
    yield running
    if running.running:
        running.stop()


def test_service_delivers_the_queue_while_the_emulator_serves(emulator: RunningEmulator) -> None:
    account = emulator.account.service_client_id
    faults = plan_from_options(fail_first=1)
    with start_receiver(
        ReceiverConfig(port=0, credentials=_credentials(emulator), faults=faults)
    ) as receiver:
        conn = connect(emulator.store_path)
        subscription = subscribe(conn, receiver.webhook_url, account=account)
        deliveries = queue_events(conn, subscription, 3, at=time.time(), account=account)
        # One 500 and a retry 10 s later: 0.1 s under --time-scale 100.
        verdicts = receiver.wait_for(4, timeout=10)
        wait_until(
            lambda: all(get_delivery(conn, d).state == "delivered" for d in deliveries),  # type: ignore[union-attr]
            timeout=5,
        )
    assert [v.signature for v in verdicts] == ["valid"] * 4
    conn.close()


def test_service_stopping_the_emulator_gives_back_unanswered_deliveries(
    emulator: RunningEmulator,
) -> None:
    account = emulator.account.service_client_id
    conn = connect(emulator.store_path)
    try:
        with stub_endpoint(hang=True) as hanging:
            # Real time, no scale: the 30 s timeout would hold them in flight for the whole test.
            emulator.stop()
            slow = _emulator(emulator.data_dir, time_scale=1.0)
            subscription = subscribe(conn, hanging.url, account=account)
            [delivery] = queue_events(conn, subscription, 1, at=time.time(), account=account)
            wait_until(lambda: hanging.requests, timeout=10)  # sent, and held by the endpoint
            slow.stop()
        record = get_delivery(conn, delivery)
        assert record is not None
        assert (record.state, record.attempts) == ("queued", 0)
    finally:
        conn.close()


def test_service_can_be_left_out(data_dir: Path) -> None:
    running = _emulator(data_dir, settings={"dispatcher": False})
    try:
        account = running.account.service_client_id
        conn = connect(running.store_path)
        [delivery] = queue_events(
            conn, subscribe(conn, "http://127.0.0.1:9/in", account=account), 1, account=account
        )
        # Nothing to wait for: the test is that nothing happens. 0.3 s is many cycles of a
        # dispatcher, had one been started.
        time.sleep(0.3)
        assert get_delivery(conn, delivery).state == "queued"  # type: ignore[union-attr]
        conn.close()
    finally:
        running.stop()
