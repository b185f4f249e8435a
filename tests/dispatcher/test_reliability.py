"""Crash safety (issue 5, Reliability): kill -9 the emulator in the middle of delivering 1,000
events, start it again, and nothing is lost."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl.clock import SystemClock
from prefctl.config import paths
from prefctl.emulator import admin
from prefctl.receiver.faults import FaultPlan
from prefctl.receiver.serve import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.store.db import connect
from prefctl.webhooks.signature import SigningCredentials
from tests.dispatcher.engine_helpers import queue_events, set_settings, subscribe
from tests.helpers import wait_until

EVENTS = 1000
PREFCTL = str(Path(sys.executable).parent / "prefctl")


def _start_emulator(data_dir: Path) -> subprocess.Popen[str]:
    """``prefctl emulator start`` as a real process; returns once it printed its ready line."""
    command = [PREFCTL, "-o", "json", "emulator", "start", "--port", "0"]
    command += ["--data-dir", str(data_dir), "--time-scale", "10"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PREFCTL_DATA_DIR": str(data_dir)},
    )
    assert process.stdout is not None
    ready = json.loads(process.stdout.readline())
    assert ready["type"] == "ready"
    return process


@pytest.fixture
def emulator_processes() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.mark.slow
def test_kill_9_in_the_middle_of_delivering_loses_no_event(
    tmp_path: Path, emulator_processes: list[subprocess.Popen[str]]
) -> None:
    data_dir = tmp_path / "data"
    with admin.open_admin_store(data_dir) as conn:
        account = admin.bootstrap(conn, SystemClock()).account
    credentials = SigningCredentials(
        account.service_client_id, account.signature_user_id, account.hashkey
    )
    # One answer in five is a 503: retries happen, and with two attempts at most some events
    # end dead-lettered (MaxDeliveryAttemptsExceeded) rather than delivered.
    faults = FaultPlan(fail_rate=0.2, fail_status=503)
    config = ReceiverConfig(port=0, credentials=credentials, faults=faults, rng=random.Random(5))
    receiver: RunningReceiver = start_in_thread(config)
    store = paths.store_path(data_dir)
    conn = connect(store)
    try:
        set_settings(conn, account.service_client_id, MaxConcurrentRequests=50)
        set_settings(conn, account.service_client_id, MaxDeliveryAttempts=2)
        subscription = subscribe(conn, receiver.webhook_url, account=account.service_client_id)
        queue_events(conn, subscription, EVENTS, at=time.time(), account=account.service_client_id)

        first = _start_emulator(data_dir)
        emulator_processes.append(first)
        wait_until(lambda: receiver.verdicts.qsize() >= 300, 20, what="300 requests did not arrive")
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        leased = conn.execute(
            "SELECT count(*) FROM deliveries WHERE state = 'in_flight'"
        ).fetchone()[0]
        # Leases of the dead process: the restart must take them back at once (they would
        # otherwise expire only after about 33 s, past this test's wait).
        assert leased > 0, "the kill came when nothing was in flight"

        second = _start_emulator(data_dir)
        emulator_processes.append(second)

        def all_final() -> bool:
            row = conn.execute(
                "SELECT count(*) FROM deliveries WHERE state NOT IN ('delivered', 'dead_lettered')"
            ).fetchone()
            return bool(row[0] == 0)

        wait_until(all_final, 25, what="not every event was delivered or dead-lettered")
        second.send_signal(signal.SIGTERM)
        assert second.wait(15) == 0
    finally:
        receiver.stop()
    delivered_ok = set()
    while not receiver.verdicts.empty():
        verdict = receiver.verdicts.get()
        assert verdict.signature == "valid"
        if verdict.status == 200:
            delivered_ok.add(verdict.event_id)
    rows = conn.execute(
        "SELECT e.event_id, d.state, d.dead_letter_reason FROM deliveries d"
        " JOIN events e ON e.id = d.event_rowid"
    ).fetchall()
    assert len(rows) == EVENTS
    dead = [row for row in rows if row[1] == "dead_lettered"]
    assert dead, "with two attempts and 20 % failures some events should be dead-lettered"
    assert {row[2] for row in dead} == {"MaxDeliveryAttemptsExceeded"}
    # Every delivered event reached the receiver with a 200 (duplicates allowed, no loss).
    assert {row[0] for row in rows if row[1] == "delivered"} <= delivered_ok
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
