"""MaxConcurrentRequests is a ceiling a user relies on (spec rule 8): the real dispatcher, libcurl
and a real endpoint on 127.0.0.1 that holds every request until the test lets it go, so what the
endpoint sees at once is counted exactly, with no sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl.dispatcher.curl import FD_RESERVE
from prefctl.dispatcher.engine import Engine
from prefctl.dispatcher.run import DispatcherConfig, running
from prefctl.store.db import connect
from tests.dispatcher.engine_helpers import new_store, queue_events, set_settings, states, subscribe
from tests.dispatcher.holding_endpoint import HoldingEndpoint


@contextlib.contextmanager
def _dispatching(store: Path, *, time_scale: float = 1.0) -> Iterator[Engine]:
    """The real dispatcher (libcurl, the system clock) delivering ``store`` on a thread of its
    own while the block runs."""
    ready = threading.Event()
    found: dict[str, object] = {}

    async def main() -> None:
        stop = asyncio.Event()
        config = DispatcherConfig(store_path=store, time_scale=time_scale, plugins=False)
        async with running(config) as engine:
            found.update(engine=engine, stop=stop, loop=asyncio.get_running_loop())
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="dispatcher")
    thread.start()
    try:
        assert ready.wait(30), "the dispatcher did not start"
        engine = found["engine"]
        assert isinstance(engine, Engine)
        yield engine
    finally:
        if ready.is_set():
            loop, stop = found["loop"], found["stop"]
            assert isinstance(loop, asyncio.AbstractEventLoop)
            assert isinstance(stop, asyncio.Event)
            loop.call_soon_threadsafe(stop.set)
        thread.join(30)


def _delivered(store: Path) -> int:
    conn = connect(store)
    try:
        return states(conn)["delivered"]
    finally:
        conn.close()


@contextlib.contextmanager
def _held(
    tmp_path: Path, *, max_concurrent: int, events: int, time_scale: float = 1.0
) -> Iterator[tuple[HoldingEndpoint, Engine, Path]]:
    """``events`` due now to one holding endpoint, MaxConcurrentRequests ``max_concurrent``,
    and the real dispatcher delivering them while the block runs."""
    store = tmp_path / "store.db"
    conn = new_store(store)
    set_settings(conn, MaxConcurrentRequests=max_concurrent)
    with HoldingEndpoint() as endpoint:
        queue_events(conn, subscribe(conn, endpoint.url), events, at=time.time())
        conn.close()
        with _dispatching(store, time_scale=time_scale) as engine:
            yield endpoint, engine, store


def test_dispatcher_never_has_more_than_max_concurrent_requests_at_the_endpoint(
    tmp_path: Path,
) -> None:
    # Cycles 0.5 s apart (time scale 2): 50 in flight, then none more until they are answered.
    with _held(tmp_path, max_concurrent=50, events=120, time_scale=2) as (endpoint, engine, store):
        answered = 0
        for batch in (50, 50, 20):
            held, done = batch, answered
            endpoint.wait_for(
                lambda: endpoint.holding == held and endpoint.answered == done,  # noqa: B023
                f"{batch} requests held",
            )
            # Two more cycles run while the endpoint holds them: neither sends another.
            cycles = engine.totals.cycles
            endpoint.wait_for(lambda: engine.totals.cycles >= cycles + 2, "two cycles")  # noqa: B023
            assert endpoint.holding == batch
            endpoint.release()
            answered += batch
        endpoint.wait_for(lambda: _delivered(store) == 120, "all 120 delivered")
    assert endpoint.peak == 50
    assert endpoint.answered == 120  # one attempt each: nothing timed out or was sent twice


def test_dispatcher_sends_max_concurrent_requests_at_once_to_one_slow_endpoint(
    tmp_path: Path,
) -> None:
    # No per-host cap below the account's setting: 150 due, 150 held at once (64 before).
    with _held(tmp_path, max_concurrent=150, events=150) as (endpoint, _engine, store):
        endpoint.wait_holding(150)
        endpoint.release()
        endpoint.wait_for(lambda: _delivered(store) == 150, "all 150 delivered")
    assert endpoint.peak == 150


_CAP_PROBE = """
import resource, sys
from prefctl.dispatcher.curl import connection_cap
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))
cap = connection_cap(int(sys.argv[3]))
print(cap, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _cap(soft: int, hard: int, wanted: int) -> tuple[int, int]:
    """``connection_cap(wanted)`` in a process started with the open-files limit soft/hard, and
    the soft limit after it."""
    done = subprocess.run(
        [sys.executable, "-c", _CAP_PROBE, str(soft), str(hard), str(wanted)],
        capture_output=True,
        text=True,
        check=True,
    )
    cap, after = done.stdout.split()
    return int(cap), int(after)


def test_connection_cap_raises_a_low_open_files_limit_to_fit_the_ceiling() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 5000 + FD_RESERVE:
        pytest.skip(f"the hard open-files limit here is {hard}")
    assert _cap(1024, 5000 + FD_RESERVE, 5000) == (5000, 5000 + FD_RESERVE)


def test_connection_cap_stays_below_an_open_files_limit_it_cannot_raise() -> None:
    assert _cap(1024, 1024, 5000) == (1024 - FD_RESERVE, 1024)
    assert _cap(1024, 1024, 500) == (500, 1024)
