"""Probation, leases and restarts: an unhealthy endpoint waits without spending attempts, and a
crash loses nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from prefctl.dispatcher.transport import Reply, Request
from prefctl.store import Store
from prefctl.store.db import transaction
from tests.dispatcher.engine_helpers import (
    Rig,
    attempts_of,
    new_store,
    queue_events,
    record_of,
    set_settings,
    states,
    subscribe,
)

SICK = "https://sick.example/in"
WELL = "https://well.example/in"


@pytest.fixture
def conn(store_location: str) -> Iterator[Store]:
    """A store on each backend (SQLite, PostgreSQL)."""
    conn = new_store(store_location)
    yield conn
    conn.close()


class Endpoint:
    """A model endpoint: SICK answers 503 until ``healed``; WELL always 200."""

    def __init__(self) -> None:
        self.healed = False

    def __call__(self, request: Request) -> Reply:
        if request.url == SICK and not self.healed:
            return Reply(503)
        return Reply(200)


def _sick_rig(conn: Store, endpoint: Endpoint) -> tuple[Rig, list[int]]:
    """Ten failures to SICK put it on probation; returns the rig and SICK's deliveries."""
    sick = queue_events(conn, subscribe(conn, SICK), 10)
    rig = Rig(conn, endpoint)
    rig.cycle()
    rig.advance(1)
    assert states(conn)["queued"] == 10
    return rig, sick


def test_probation_puts_off_due_deliveries_without_spending_attempts(
    conn: Store,
) -> None:
    endpoint = Endpoint()
    rig, sick = _sick_rig(conn, endpoint)
    probe_slot = rig.clock.now().timestamp() - 1 + 60  # 1 min after the 10th failure
    rig.advance(14)  # the retries come due, but the probe slot is not open yet
    rig.advance(1)
    skipped = [attempts_of(conn, d)[-1] for d in sick]
    assert {a.outcome for a in skipped} == {"skipped"}
    for delivery in sick:
        record = record_of(conn, delivery)
        assert (record.state, record.attempts) == ("queued", 1)
        assert record.next_attempt_at == pytest.approx(probe_slot, abs=1e-3)
    assert len(rig.transport.sent) == 10
    rig.close()


def test_probation_sends_one_probe_per_slot_and_a_200_ends_it(conn: Store) -> None:
    endpoint = Endpoint()
    rig, sick = _sick_rig(conn, endpoint)
    rig.advance(14)
    rig.advance(1)  # all ten put off to the slot at ~+60 s
    for _ in range(45):
        rig.advance(1)
    assert len(rig.transport.sent) == 11  # the probe at the slot
    assert sum(record_of(conn, d).attempts for d in sick) == 11
    # The probe failed: the next slot is 2 min later; still one probe per slot.
    for _ in range(130):
        rig.advance(1)
    assert len(rig.transport.sent) == 12
    endpoint.healed = True
    for _ in range(250):
        rig.advance(1)
    # The next probe got a 200: probation ended and the others went out at once.
    assert states(conn) == {"delivered": 10}
    assert len(rig.transport.sent) == 22
    rig.close()


def test_probation_of_one_endpoint_leaves_others_alone(conn: Store) -> None:
    endpoint = Endpoint()
    rig, _ = _sick_rig(conn, endpoint)
    well = queue_events(conn, subscribe(conn, WELL, name="well"), 5, prefix="22222222")
    rig.advance(15)
    rig.advance(1)
    assert {record_of(conn, d).state for d in well} == {"delivered"}
    rig.close()


def test_probation_is_remembered_across_a_restart(conn: Store) -> None:
    endpoint = Endpoint()
    rig, sick = _sick_rig(conn, endpoint)
    rig.close()
    later = Rig(conn, endpoint)
    later.clock.set(rig.clock.now())
    later.advance(14)
    later.advance(1)
    assert {attempts_of(conn, d)[-1].outcome for d in sick} == {"skipped"}
    assert later.transport.sent == []
    later.close()


def test_close_gives_back_the_leases_of_unanswered_requests(conn: Store) -> None:
    [delivery] = queue_events(conn, subscribe(conn, SICK), 1)
    rig = Rig(conn, lambda _r: Reply(200, elapsed=10.0))
    rig.cycle()
    assert record_of(conn, delivery).state == "in_flight"
    rig.close()
    record = record_of(conn, delivery)
    assert (record.state, record.attempts) == ("queued", 0)  # no attempt spent


def test_start_takes_back_leases_of_a_dead_process(conn: Store) -> None:
    deliveries = queue_events(conn, subscribe(conn, SICK), 3)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    owners = [
        f"{socket.gethostname()}:{dead.pid}:deadbeef:7",  # a process that is gone
        f"{socket.gethostname()}:{os.getpid()}:0badf00d:1",  # this pid, an engine no more
        f"elsewhere:{os.getpid()}:cafecafe:1",  # another host: wait for the lease
    ]
    with transaction(conn):
        for delivery, owner in zip(deliveries, owners, strict=True):
            conn.execute(
                "UPDATE deliveries SET state = 'in_flight', lease_owner = ?, lease_until = ?"
                " WHERE id = ?",
                (owner, 4_000_000_000.0, delivery),
            )
    set_settings(conn, MaxConcurrentRequests=50)
    rig = Rig(conn)
    rig.cycle()
    rig.advance(1)
    assert [record_of(conn, d).state for d in deliveries] == ["delivered", "delivered", "in_flight"]
    rig.close()
