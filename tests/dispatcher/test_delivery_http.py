"""The dispatcher over real HTTP: libcurl against the real receiver (``prefctl receive``) on
loopback, with the real clock and ``time_scale`` to make the rule durations short."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from prefctl import certs
from prefctl.dispatcher import tls
from prefctl.dispatcher.run import DispatcherConfig, running
from prefctl.dispatcher.run import run as run_dispatcher
from prefctl.receiver.faults import FaultPlan, FaultStep, plan_from_options
from prefctl.receiver.serve import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.webhooks.signature import parse_header
from tests.dispatcher.engine_helpers import (
    CREDENTIALS,
    attempts_of,
    new_store,
    record_of,
    set_settings,
    subscribe,
)
from tests.dispatcher.engine_helpers import queue_events as queue_at
from tests.helpers import free_port


@pytest.fixture
def store(store_location: str) -> str:
    """A store on each backend (a SQLite file's path, a PostgreSQL URL)."""
    new_store(store_location).close()
    return store_location


@pytest.fixture
def receiver() -> Iterator[RunningReceiver]:
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS)) as running_receiver:
        yield running_receiver


def queue_events(*args: Any, **kw: Any) -> list[int]:
    """Events queued now (the real clock's now: the TTL counts from it)."""
    return queue_at(*args, at=time.time(), **kw)


def _receiver(**options: Any) -> RunningReceiver:
    return start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS, **options))


def _connect(path: str) -> Any:
    from prefctl.store.db import connect

    return connect(path)


def _deliver_until(
    store: str, done: Callable[[], bool], *, time_scale: float, timeout: float = 15.0
) -> None:
    """Run the dispatcher on ``store`` until ``done()`` holds (checked every 20 ms)."""

    async def main() -> None:
        config = DispatcherConfig(store_path=store, time_scale=time_scale, plugins=False)
        async with running(config):
            deadline = time.monotonic() + timeout
            while not done():
                if time.monotonic() > deadline:
                    raise AssertionError(f"not done within {timeout} s")
                await asyncio.sleep(0.02)

    asyncio.run(main())


def _deliver_per_host(
    store: str, done: Callable[[], bool], *, per_host: int, time_scale: float
) -> None:
    """Like ``_deliver_until``, with at most ``per_host`` connections to a host."""
    from prefctl.dispatcher.curl import CurlTransport

    async def main() -> None:
        transport = CurlTransport(per_host=per_host)
        config = DispatcherConfig(
            store_path=store, time_scale=time_scale, plugins=False, transport=transport
        )
        try:
            async with running(config):
                deadline = time.monotonic() + 15
                while not done():
                    assert time.monotonic() < deadline, "not done within 15 s"
                    await asyncio.sleep(0.02)
        finally:
            await transport.aclose()

    asyncio.run(main())


def _final(path: str, deliveries: list[int]) -> Callable[[], bool]:
    def check() -> bool:
        with _connect(path) as conn:
            return all(
                record_of(conn, d).state in ("delivered", "dead_lettered") for d in deliveries
            )

    return check


def test_delivery_every_attempt_carries_a_fresh_signature_the_receiver_verifies(
    store: str,
) -> None:
    with _receiver(faults=plan_from_options(fail_first=2)) as receiver:
        conn = _connect(store)
        deliveries = queue_events(conn, subscribe(conn, receiver.webhook_url), 2)
        _deliver_until(store, _final(store, deliveries), time_scale=100)
        verdicts = receiver.wait_for(4, timeout=5)
    assert [v.signature for v in verdicts] == ["valid"] * 4
    assert sorted(v.status or 0 for v in verdicts) == [200, 200, 500, 500]
    assert {record_of(conn, d).state for d in deliveries} == {"delivered"}
    retried = [d for d in deliveries if record_of(conn, d).attempts == 2]
    assert len(retried) == 2
    first, second = attempts_of(conn, retried[0])
    assert second.started_at > first.finished_at
    conn.close()


def test_delivery_413_dead_letters_at_once(store: str) -> None:
    with _receiver(faults=plan_from_options(respond=413)) as receiver:
        conn = _connect(store)
        [delivery] = queue_events(conn, subscribe(conn, receiver.webhook_url), 1)
        totals = run_dispatcher(DispatcherConfig(store_path=store, once=True, plugins=False))
        record = record_of(conn, delivery)
    assert (record.state, record.dead_letter_reason, record.last_status) == (
        "dead_lettered",
        "PayloadTooLarge",
        413,
    )
    assert totals.dead_lettered == {"PayloadTooLarge": 1}
    conn.close()


class _Redirect(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(307)
        self.send_header("Location", self.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


def test_delivery_redirect_is_not_followed(store: str, receiver: RunningReceiver) -> None:
    _Redirect.target = receiver.webhook_url
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conn = _connect(store)
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        [delivery] = queue_events(conn, subscribe(conn, url), 1)
        run_dispatcher(DispatcherConfig(store_path=store, once=True, plugins=False))
    finally:
        server.shutdown()
        server.server_close()
    record = record_of(conn, delivery)
    assert (record.state, record.last_status) == ("queued", 307)
    assert record.last_error == f"redirect to {receiver.webhook_url} not followed"
    assert receiver.verdicts.empty()  # nothing reached the redirect's target
    conn.close()


def test_delivery_late_200_after_the_timeout_cancels_the_retry(store: str) -> None:
    # time_scale 20: the 30 s timeout is 1.5 s and the first retry comes at ≥ 1.95 s; the
    # receiver answers 200 after 1.7 s, in between.
    slow = FaultPlan(steps=(FaultStep(count=1, delay=1.7),))
    with _receiver(faults=slow) as receiver:
        conn = _connect(store)
        [delivery] = queue_events(conn, subscribe(conn, receiver.webhook_url), 1)

        def late_delivered() -> bool:
            return any(a.outcome == "late_delivered" for a in attempts_of(conn, delivery))

        _deliver_until(store, late_delivered, time_scale=20)
        record = record_of(conn, delivery)
        outcomes = [a.outcome for a in attempts_of(conn, delivery)]
    # Counted once the receiver has stopped: its verdicts reach ``verdicts`` in batches, a
    # moment after each answer (``receiver.pump``); stopping delivers the last batch.
    assert receiver.verdicts.qsize() == 1
    assert (record.state, record.attempts) == ("delivered", 1)
    assert outcomes == ["timed_out", "late_delivered"]
    conn.close()


def test_delivery_bad_receivers_do_not_stall_a_good_one(store: str) -> None:
    hanging = _receiver(faults=FaultPlan(delay=30.0))
    resetting = _receiver(faults=FaultPlan(after=FaultStep(close=True)))
    slow = _receiver(faults=FaultPlan(delay=1.0))
    good = _receiver()
    conn = _connect(store)
    set_settings(conn, MaxConcurrentRequests=1000)
    bad: dict[str, list[int]] = {}
    for n, (name, server) in enumerate(
        (("hanging", hanging), ("resetting", resetting), ("slow", slow))
    ):
        subscription = subscribe(conn, server.webhook_url, name=name)
        bad[name] = queue_events(conn, subscription, 200, prefix=f"{n}" * 8)
    good_ones = queue_events(
        conn, subscribe(conn, good.webhook_url, name="good"), 50, prefix="9" * 8
    )
    seen: dict[str, set[Any]] = {}
    good_done = _final(store, good_ones)

    def done() -> bool:
        # The resetting receiver's failures may be recorded a cycle after the good 200s (a
        # wake-up between cycles records the answers already in): wait for both.
        if not good_done():
            return False
        seen["hanging"] = {record_of(conn, d).state for d in bad["hanging"]}
        seen["resetting"] = {record_of(conn, d).last_error for d in bad["resetting"]}
        return None not in seen["resetting"]

    started = time.monotonic()
    try:
        _deliver_until(store, done, time_scale=1)
        took = time.monotonic() - started
    finally:
        for server in (hanging, resetting, slow, good):
            server._receiver.request_stop()
    # The good receiver's events went in the first cycle and were answered at once, while the
    # hanging receiver held its connections, the resetting one failed and the slow one took a
    # second per event.
    assert took < 5.0
    assert {record_of(conn, d).state for d in good_ones} == {"delivered"}
    assert seen["hanging"] == {"in_flight"}
    assert None not in seen["resetting"]
    conn.close()


def test_delivery_connection_refused_is_a_failed_attempt(store: str) -> None:
    conn = _connect(store)
    [delivery] = queue_events(conn, subscribe(conn, f"http://127.0.0.1:{free_port()}/in"), 1)
    run_dispatcher(DispatcherConfig(store_path=store, once=True, plugins=False))
    record = record_of(conn, delivery)
    assert (record.state, record.attempts, record.last_status) == ("queued", 1, None)
    assert "onnect" in (record.last_error or "")
    conn.close()


def test_delivery_mtls_presents_the_installed_client_certificate(
    store: str, tmp_path: Path
) -> None:
    pki = tmp_path / "pki"
    ca = certs.init_ca(pki)
    server = certs.issue_server(pki, "127.0.0.1")
    client = certs.issue_client(pki, "dispatcher")
    options = {"tls_cert": server.certificate, "tls_key": server.private_key}
    with _receiver(**options, client_ca=ca.certificate) as receiver:
        conn = _connect(store)
        first, second = queue_events(conn, subscribe(conn, receiver.webhook_url), 2)
        # Trusting the CA is not enough: the receiver wants a client certificate.
        tls.install(conn, "DEMO_CORP", cert=None, key=None, ca=ca.certificate, now=time.time())
        run_dispatcher(DispatcherConfig(store_path=store, once=True, plugins=False))
        assert record_of(conn, first).state == "queued"
        tls.install(
            conn,
            "DEMO_CORP",
            cert=client.certificate,
            key=client.private_key,
            ca=None,
            now=time.time(),
        )
        conn.execute("UPDATE deliveries SET next_attempt_at = 0 WHERE state = 'queued'")
        run_dispatcher(DispatcherConfig(store_path=store, once=True, plugins=False))
        verdicts = receiver.wait_for(2, timeout=5)
    assert {record_of(conn, d).state for d in (first, second)} == {"delivered"}
    assert {v.signature for v in verdicts} == {"valid"}
    conn.close()


def test_delivery_unknown_ca_fails_tls_verification(store: str, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    certs.init_ca(pki)
    server = certs.issue_server(pki, "127.0.0.1")
    with _receiver(tls_cert=server.certificate, tls_key=server.private_key) as receiver:
        conn = _connect(store)
        [delivery] = queue_events(conn, subscribe(conn, receiver.webhook_url), 1)
        run_dispatcher(DispatcherConfig(store_path=store, once=True, plugins=False))
        assert receiver.verdicts.empty()
    record = record_of(conn, delivery)
    assert record.state == "queued"
    assert "certificate" in (record.last_error or "").lower()
    conn.close()


def test_delivery_headers_and_body_are_the_notification(store: str, tmp_path: Path) -> None:
    with _receiver(record=tmp_path / "rec.ndjson") as receiver:
        conn = _connect(store)
        subscription = subscribe(conn, receiver.webhook_url)
        queue_events(conn, subscription, 1)
        run_dispatcher(DispatcherConfig(store_path=store, once=True, plugins=False))
        [verdict] = receiver.wait_for(1, timeout=5)
    headers = {k.decode().lower(): v.decode() for k, v in verdict.headers or []}
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"].startswith("prefctl-dispatcher/")
    assert parse_header(headers["service-webhook"]).timestamp.endswith("Z")
    assert (verdict.event_type, verdict.subscription_id) == ("profile.created", subscription)
    conn.close()


def test_delivery_time_waiting_for_a_connection_is_not_charged_to_the_endpoint(
    store: str,
) -> None:
    # time_scale 30: the response timeout is 1 s. The receiver answers every request after
    # 0.6 s, and only 2 connections per host are allowed: the 3rd and 4th requests wait 0.6 s
    # for a connection, then answer 0.6 s later, 1.2 s after they were handed over. The
    # endpoint answered each within the timeout: all four are delivered at the first attempt.
    with _receiver(faults=FaultPlan(delay=0.6)) as receiver:
        conn = _connect(store)
        deliveries = queue_events(conn, subscribe(conn, receiver.webhook_url), 4)
        done = _final(store, deliveries)

        _deliver_per_host(store, done, per_host=2, time_scale=30)
    assert receiver.verdicts.qsize() == 4  # no duplicates (counted once the receiver stopped)
    for delivery in deliveries:
        record = record_of(conn, delivery)
        [attempt] = attempts_of(conn, delivery)
        assert (record.state, record.attempts, attempt.outcome) == ("delivered", 1, "delivered")
        assert attempt.latency_ms is not None
        assert 550 <= attempt.latency_ms < 1000  # the endpoint's time, not the queue's
    conn.close()


def test_delivery_never_sent_for_want_of_a_connection_spends_no_attempt(store: str) -> None:
    # time_scale 30: the response timeout is 1 s. One connection per host and a receiver that
    # answers after 0.6 s: the third request cannot have the connection before the first two
    # answered, 1.2 s at the earliest, so it is still waiting when its timeout ends and was
    # never sent. That is no attempt and no failure of the endpoint: it is queued again and
    # delivered, at its first attempt, and the receiver sees it once. (0.6 s, not more: the
    # two requests sent must be answered within the 1 s, and a loaded machine adds to 0.6 s.)
    with _receiver(faults=FaultPlan(delay=0.6)) as receiver:
        conn = _connect(store)
        deliveries = queue_events(conn, subscribe(conn, receiver.webhook_url), 3)
        done = _final(store, deliveries)

        _deliver_per_host(store, done, per_host=1, time_scale=30)
    # Counted once the receiver has stopped: the verdict of the last answer reaches ``verdicts``
    # a batch interval after the answer (``receiver.pump``), when the dispatcher may have
    # recorded it and stopped already; stopping the receiver delivers the last batch.
    assert receiver.verdicts.qsize() == 3
    records = [record_of(conn, delivery) for delivery in deliveries]
    assert [(r.state, r.attempts) for r in records] == [("delivered", 1)] * 3
    third = [(a.outcome, a.error) for a in attempts_of(conn, deliveries[2])]
    assert third[0] == (
        "skipped",
        "not sent: no free connection to the host within the response timeout",
    )
    assert third[-1] == ("delivered", None)
    assert "timed_out" not in {a.outcome for d in deliveries for a in attempts_of(conn, d)}
    conn.close()
