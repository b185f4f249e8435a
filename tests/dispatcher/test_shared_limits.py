"""An account's limits are the account's, not one process's: several real ``prefctl dispatcher run
--store …`` processes on one store (a SQLite file or a PostgreSQL database: ``store_location``), a
real endpoint on 127.0.0.1 that counts the requests it holds at once, and a real kill -9 by PID."""

from __future__ import annotations

import mailbox
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl.dispatcher.alerts.mail import MBOX_FILE
from prefctl.dispatcher.leases import SWEEP_SECONDS
from prefctl.store import Store, ceilings
from prefctl.store import alerts as alert_store
from prefctl.store.accounts import delete_account
from prefctl.store.db import connect, is_postgres_location, transaction
from tests.dispatcher.engine_helpers import (
    ACCOUNT,
    T0,
    Rig,
    new_store,
    queue_events,
    set_settings,
    states,
    subscribe,
)
from tests.dispatcher.holding_endpoint import HoldingEndpoint
from tests.helpers import wait_until
from tests.store.service_helpers import OTHER_ACCOUNT, add_subscription, subscription_body

PREFCTL = str(Path(sys.executable).parent / "prefctl")


class Dispatchers:
    """``prefctl dispatcher run`` processes started by a test; each is stopped by its PID."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, store: str, *options: str) -> subprocess.Popen[bytes]:
        command = [PREFCTL, "-o", "json", "dispatcher", "run", "--store", store, *options]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.processes.append(process)
        return process

    def stop_all(self) -> list[int]:
        """SIGTERM to each one still running; returns the exit codes of those."""
        codes = []
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                codes.append(process.wait(30))
        return codes


@pytest.fixture
def dispatchers() -> Iterator[Dispatchers]:
    started = Dispatchers()
    yield started
    for process in started.processes:
        if process.poll() is None:
            process.kill()
        process.wait()


def _count(conn: Store, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])


def _final(conn: Store) -> int:
    return _count(
        conn, "SELECT count(*) FROM deliveries WHERE state IN ('delivered', 'dead_lettered')"
    )


def _slot(conn: Store, process: subprocess.Popen[bytes]) -> tuple[int, float] | None:
    """What a dispatcher process holds of the account's ceiling, and until when."""
    row = conn.execute(
        "SELECT in_flight, lease_until FROM dispatcher_slots WHERE owner LIKE ?",
        (f"{socket.gethostname()}:{process.pid}:%",),
    ).fetchone()
    return None if row is None else (int(row[0]), float(row[1]))


def _alerts_mbox(store: str) -> Path:
    """Where a dispatcher on ``store`` writes alerts without SMTP: beside a SQLite file, in the
    data dir (PREFCTL_DATA_DIR, which the processes inherit) for a PostgreSQL store."""
    if is_postgres_location(store):
        return Path(os.environ["PREFCTL_DATA_DIR"]) / MBOX_FILE
    return Path(store).parent / MBOX_FILE


@pytest.mark.slow
def test_three_dispatchers_never_have_more_in_flight_than_the_accounts_max_concurrent_requests(
    store_location: str, dispatchers: Dispatchers
) -> None:
    store = store_location
    conn = new_store(store)
    set_settings(conn, MaxConcurrentRequests=50)
    with HoldingEndpoint(hold_seconds=1.0) as endpoint:
        queue_events(conn, subscribe(conn, endpoint.url), 300, at=time.time())
        for _ in range(3):
            dispatchers.start(store)

        wait_until(lambda: _final(conn) == 300, 90, interval=0.1, what="300 events not delivered")
        assert dispatchers.stop_all() == [0, 0, 0]

    assert states(conn) == {"delivered": 300}
    # Every request was answered after a second: what the endpoint held at once is what was in
    # flight, and it reached the setting without ever passing it.
    assert endpoint.peak == 50
    assert endpoint.answered >= 300
    # Nothing of a stopped dispatcher keeps counting.
    assert _count(conn, "SELECT count(*) FROM dispatcher_slots") == 0
    conn.close()


@pytest.mark.slow
def test_killed_dispatchers_share_of_the_ceiling_comes_back_within_seconds_on_its_machine(
    store_location: str, dispatchers: Dispatchers
) -> None:
    store = store_location
    conn = new_store(store)
    set_settings(conn, MaxConcurrentRequests=50)
    # The claims' and the ceiling's leases: about 46 s, far past the sweep; the rule's 30 s
    # response timeout is 15 s, so the first dispatcher's 50 requests are still in flight when a
    # loaded machine is slow to start the second (at 10x, 3 s were once not enough).
    scale = "2"
    with HoldingEndpoint() as endpoint:
        queue_events(conn, subscribe(conn, endpoint.url), 200, at=time.time())
        first = dispatchers.start(store, "--time-scale", scale)
        endpoint.wait_holding(50)
        second = dispatchers.start(store, "--time-scale", scale)
        wait_until(lambda: _slot(conn, second), 30, what="the second dispatcher did not start")
        slot = _slot(conn, first)
        assert slot is not None
        held, lease_until = slot
        assert held == 50

        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        endpoint.release()  # the dead dispatcher's requests end; nobody sent any more
        endpoint.wait_holding(0)
        # The second dispatcher finds the first's process gone from this machine (it looks every
        # SWEEP_SECONDS) and takes the whole ceiling, long before the dead one's lease ends.
        endpoint.wait_holding(50, timeout=SWEEP_SECONDS + 20)
        assert time.time() < lease_until
        assert _slot(conn, first) is None
        assert endpoint.peak == 50

        endpoint.hold_seconds = 0.0  # from now on every request is answered at once
        endpoint.release()
        wait_until(lambda: _final(conn) == 200, 60, interval=0.1, what="200 events not delivered")
        assert dispatchers.stop_all() == [0]
    assert states(conn) == {"delivered": 200}
    assert endpoint.peak == 50
    conn.close()


@pytest.mark.slow
def test_share_of_a_dispatcher_on_another_machine_counts_until_its_lease_ends(
    store_location: str, dispatchers: Dispatchers
) -> None:
    store = store_location
    conn = new_store(store)
    set_settings(conn, MaxConcurrentRequests=50)
    elsewhere = "other-host:12:0badc0de"  # it may be alive: only its lease says it is not
    with transaction(conn):
        ceilings.hold(conn, ACCOUNT, elsewhere, in_flight=50, lease_until=time.time() + 3600)
    with HoldingEndpoint() as endpoint:
        queue_events(conn, subscribe(conn, endpoint.url), 100, at=time.time())
        process = dispatchers.start(store)
        # It ran the account's cycle and found no room: the other machine holds the ceiling.
        wait_until(lambda: _slot(conn, process), 30, what="the dispatcher did not start")
        assert endpoint.answered == endpoint.holding == 0
        lease_until = time.time() + 1.0
        with transaction(conn):  # the other machine's last report: its lease ends in a second
            ceilings.hold(conn, ACCOUNT, elsewhere, in_flight=50, lease_until=lease_until)
        endpoint.wait_holding(50)
        assert endpoint.first_request_at is not None
        assert endpoint.first_request_at >= lease_until
        assert endpoint.peak == 50
        endpoint.hold_seconds = 0.0
        endpoint.release()
        wait_until(lambda: _final(conn) == 100, 60, interval=0.1, what="100 events not delivered")
        assert dispatchers.stop_all() == [0]
    assert states(conn) == {"delivered": 100}
    conn.close()


@pytest.mark.slow
def test_two_dispatchers_seeing_dead_letters_send_the_alert_once(
    store_location: str, dispatchers: Dispatchers
) -> None:
    store = store_location
    conn = new_store(store)
    set_settings(conn, MaxConcurrentRequests=50)
    set_settings(conn, AlertThresholdMax=1000)  # no "alerting paused" alert at once
    with HoldingEndpoint(hold_seconds=0.0, status=400) as endpoint:
        body = subscription_body(endpoint.url, name="orders")
        body["Alerts"] = {"Enabled": True, "Recipients": ["ops@example.com"]}
        queue_events(conn, add_subscription(conn, body), 200, at=time.time())
        for _ in range(2):
            dispatchers.start(store)
        wait_until(lambda: _final(conn) == 200, 60, interval=0.1, what="200 events not final")
        wait_until(
            lambda: alert_store.list_alerts(conn) and not alert_store.pending_alerts(conn),
            30,
            what="the alert was not sent",
        )
        assert dispatchers.stop_all() == [0, 0]

    assert states(conn) == {"dead_lettered": 200}
    # The first dead letter alerts at once; the others wait for AlertFrequencyMax (30 minutes).
    [alert] = alert_store.list_alerts(conn)
    assert (alert.kind, alert.state) == ("opened", "sent")
    assert [m["Message-ID"] for m in mailbox.mbox(_alerts_mbox(store))] == [alert.message_id]
    conn.close()


def test_engines_on_one_store_take_the_accounts_cycle_in_turn_duration_apart(
    store_location: str,
) -> None:
    store = store_location
    conn = new_store(store)
    set_settings(conn, Duration=10)
    set_settings(conn, MaxConcurrentRequests=50)
    queue_events(conn, subscribe(conn, "https://hooks.example/events"), 200)
    first, second = Rig(conn), Rig(connect(store))
    try:
        assert first.cycle().claimed == 50
        assert first.advance(1).claimed == 0  # its answers are in; the next cycle is at 10 s
        assert second.advance(5).claimed == 0  # the account's cycle ran 5 s ago
        assert second.advance(5).claimed == 50  # 10 s: its turn, the whole ceiling is free
        assert first.advance(9).claimed == 0  # 10 s: the account's cycle has run
        # 20 s: the second's 50 were answered, but it has not recorded them: they still count.
        assert first.advance(10).claimed == 0
        assert second.advance(10).claimed == 50  # it records them and takes the turn
        assert states(conn) == {"delivered": 100, "in_flight": 50, "queued": 50}
    finally:
        first.close()
        second.close()
    conn.close()


def test_dispatcher_starting_gives_back_at_once_the_share_of_one_gone_from_this_machine(
    store_location: str,
) -> None:
    conn = new_store(store_location)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here, elsewhere = f"{socket.gethostname()}:{dead.pid}:0badc0de", "other-host:12:0badc0de"
    with transaction(conn):
        for owner in (here, elsewhere):
            ceilings.hold(conn, ACCOUNT, owner, in_flight=50, lease_until=T0 + 3600)
    rig = Rig(conn)
    try:
        assert rig.cycle().claimed == 0  # nothing queued; the engine started
        owners = ceilings.slot_owners(conn)
        assert here not in owners
        # Another machine's dispatcher may be alive: its share waits for its lease to end.
        assert elsewhere in owners
    finally:
        rig.close()
    conn.close()


def test_removed_account_keeps_no_shared_limits_and_a_late_report_writes_none(
    store_location: str,
) -> None:
    conn = new_store(store_location)
    try:
        with transaction(conn):
            assert ceilings.take_turn(conn, OTHER_ACCOUNT, seen=None, next_at=T0)
            ceilings.hold(conn, OTHER_ACCOUNT, "a:1:0badc0de", in_flight=5, lease_until=T0 + 60)
        with transaction(conn):
            assert delete_account(conn, OTHER_ACCOUNT)
        assert ceilings.next_cycle_at(conn, OTHER_ACCOUNT) is None
        assert ceilings.slot_owners(conn) == []
        # A dispatcher whose cycle began before the removal reports for it afterwards.
        with transaction(conn):
            assert not ceilings.take_turn(conn, OTHER_ACCOUNT, seen=None, next_at=T0 + 1)
            ceilings.hold(conn, OTHER_ACCOUNT, "a:1:0badc0de", in_flight=0, lease_until=T0 + 61)
        assert ceilings.next_cycle_at(conn, OTHER_ACCOUNT) is None
        assert ceilings.slot_owners(conn) == []
    finally:
        conn.close()
