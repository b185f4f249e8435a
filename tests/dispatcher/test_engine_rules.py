"""The engine applies every delivery rule (docs/dispatcher.md), on a FakeClock with a model endpoint."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime

import pytest

from prefctl.dispatcher.transport import Reply, Request
from prefctl.store import Store, subscriptions
from prefctl.store.db import connect, transaction
from prefctl.webhooks.signature import SigningCredentials, parse_header, verify
from tests.dispatcher.engine_helpers import (
    CREDENTIALS,
    T0,
    Rig,
    attempts_of,
    new_store,
    queue_events,
    record_of,
    set_settings,
    states,
    subscribe,
)

URL = "https://hooks.example/in"


@pytest.fixture
def conn(store_location: str) -> Iterator[Store]:
    """A store on each backend (SQLite, PostgreSQL)."""
    conn = new_store(store_location)
    yield conn
    conn.close()


def statuses(*codes: int) -> object:
    """A model endpoint answering the given statuses in turn, then 200."""
    replies = list(codes)

    def answer(_request: Request) -> Reply:
        return Reply(replies.pop(0) if replies else 200)

    return answer


def test_engine_answer_200_delivers_with_one_attempt(conn: Store) -> None:
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn)
    rig.cycle()
    rig.advance(1)
    record = record_of(conn, delivery)
    assert record.state == "delivered"
    assert record.attempts == 1
    assert [(a.outcome, a.status) for a in attempts_of(conn, delivery)] == [("delivered", 200)]
    rig.close()


def test_engine_failed_attempt_is_retried_after_backoff(conn: Store) -> None:
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, statuses(503, 500))  # type: ignore[arg-type]
    rig.cycle()
    rig.advance(1)
    first = record_of(conn, delivery)
    assert (first.state, first.attempts, first.last_status) == ("queued", 1, 503)
    assert 9.0 <= first.next_attempt_at - T0 <= 11.0  # 10 s × uniform(0.9, 1.1)
    rig.advance_to(first.next_attempt_at)
    rig.advance(1)
    second = record_of(conn, delivery)
    assert (second.state, second.attempts, second.last_status) == ("queued", 2, 500)
    finished = attempts_of(conn, delivery)[-1].finished_at
    assert 18.0 <= second.next_attempt_at - finished <= 22.0  # 20 s × jitter
    rig.close()


@pytest.mark.parametrize(("status", "reason"), [(400, "BadRequest"), (413, "PayloadTooLarge")])
def test_engine_400_and_413_dead_letter_at_once(conn: Store, status: int, reason: str) -> None:
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, statuses(status))  # type: ignore[arg-type]
    rig.cycle()
    rig.advance(1)
    record = record_of(conn, delivery)
    assert (record.state, record.dead_letter_reason, record.attempts) == (
        "dead_lettered",
        reason,
        1,
    )
    assert [letter.reason for letter in rig.recorder.dead_letters] == [reason]
    rig.close()


def test_engine_max_attempts_dead_letter_when_the_next_attempt_is_due(
    conn: Store,
) -> None:
    set_settings(conn, MaxDeliveryAttempts=2)
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, lambda _r: Reply(500))
    rig.cycle()
    for _ in range(60):
        rig.advance(1)
    record = record_of(conn, delivery)
    assert record.state == "dead_lettered"
    assert record.dead_letter_reason == "MaxDeliveryAttemptsExceeded"
    assert (record.attempts, record.last_status) == (2, 500)
    # Dead-lettered when the third attempt came due (10 s, then 20 s after the failures).
    assert record.finished_at - record.last_attempt_at >= 18.0
    assert len(rig.transport.sent) == 2
    [letter] = rig.recorder.dead_letters
    assert (letter.event_id, letter.attempts, letter.last_status) == (record.event_id, 2, 500)
    assert letter.first_attempt_at == T0
    rig.close()


def test_engine_ttl_dead_letters_at_the_next_due_time(conn: Store) -> None:
    set_settings(conn, EventTimeToLiveMinutes=1)
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, lambda _r: Reply(503))
    rig.cycle()
    for _ in range(200):
        rig.advance(1)
    record = record_of(conn, delivery)
    assert (record.state, record.dead_letter_reason) == ("dead_lettered", "TimeToLiveExceeded")
    # Attempts at 0, ~10, ~30 s; the next one came due after the 60 s TTL: dead-lettered then.
    assert record.finished_at - T0 >= 60.0
    assert record.attempts == len(rig.transport.sent) == 3
    rig.close()


def test_engine_redirect_is_a_failed_attempt(conn: Store) -> None:
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, lambda _r: Reply(302, error="redirect to https://elsewhere/ not followed"))
    rig.cycle()
    rig.advance(1)
    record = record_of(conn, delivery)
    assert (record.state, record.last_status) == ("queued", 302)
    assert record.last_error == "redirect to https://elsewhere/ not followed"
    rig.close()


def test_engine_connection_error_is_retried_with_its_message(conn: Store) -> None:
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, lambda _r: Reply(None, error="Connection refused", elapsed=0.01))
    rig.cycle()
    rig.advance(1)
    record = record_of(conn, delivery)
    assert (record.state, record.last_status, record.last_error) == (
        "queued",
        None,
        "Connection refused",
    )
    rig.close()


@pytest.mark.parametrize("state", ["Failed", "Updating", "AwaitingManualAction"])
def test_engine_limits_apply_to_deliveries_of_a_subscription_that_is_not_receiving(
    conn: Store, state: str
) -> None:
    # Two attempts fail, then the subscription stops receiving (a Url change whose handshake
    # failed, or still under way): its queued deliveries are not sent, but they do not stay
    # queued for ever either: the limits are checked when the next attempt comes due.
    set_settings(conn, EventTimeToLiveMinutes=2, MaxDeliveryAttempts=30)
    subscription = subscribe(conn, URL)
    [late] = queue_events(conn, subscription, 1)
    [fresh] = queue_events(conn, subscription, 1, at=T0 + 100, prefix="11111111")
    rig = Rig(conn, lambda _r: Reply(503))
    rig.cycle()
    rig.advance(10)
    rig.advance(1)
    sent = len(rig.transport.sent)
    assert record_of(conn, late).attempts == 2
    with transaction(conn):
        subscriptions.set_provisioning_state(conn, subscription, state, now=T0 + 12)  # type: ignore[arg-type]
    for _ in range(130):
        rig.advance(1)
    record = record_of(conn, late)
    assert (record.state, record.dead_letter_reason) == ("dead_lettered", "TimeToLiveExceeded")
    assert record.finished_at - T0 >= 120.0  # at the first due time past the 2-minute TTL
    assert record_of(conn, fresh).state == "queued"  # within its TTL: it waits for the Url
    assert len(rig.transport.sent) == sent  # nothing went to the subscription meanwhile
    rig.close()


def test_engine_no_answer_in_30_s_times_out_and_retries(conn: Store) -> None:
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, lambda _r: Reply(200, elapsed=math.inf))
    rig.cycle()
    rig.advance(29)
    assert record_of(conn, delivery).state == "in_flight"
    rig.advance(1)
    record = record_of(conn, delivery)
    assert (record.state, record.attempts) == ("queued", 1)
    [attempt] = attempts_of(conn, delivery)
    assert (attempt.outcome, attempt.finished_at - attempt.started_at) == ("timed_out", 30.0)
    assert 39.0 <= record.next_attempt_at - T0 <= 41.0
    rig.close()


def test_engine_late_200_within_3_minutes_cancels_the_retry(conn: Store) -> None:
    # Attempt 1 answers 200 after 35 s: past the timeout, before its retry (~40 s) is due.
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, lambda _r: Reply(200, elapsed=35.0))
    rig.cycle()
    for _ in range(120):
        rig.advance(1)
    record = record_of(conn, delivery)
    assert (record.state, record.attempts) == ("delivered", 1)
    assert [a.outcome for a in attempts_of(conn, delivery)] == ["timed_out", "late_delivered"]
    assert len(rig.transport.sent) == 1  # the retry never went out
    assert rig.engine.totals.late_delivered == 1
    rig.close()


def test_engine_answer_after_the_late_window_changes_nothing(conn: Store) -> None:
    set_settings(conn, MaxDeliveryAttempts=1)
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, lambda _r: Reply(200, elapsed=200.0))
    rig.cycle()
    for _ in range(240):
        rig.advance(1)
    record = record_of(conn, delivery)
    assert (record.state, record.dead_letter_reason) == (
        "dead_lettered",
        "MaxDeliveryAttemptsExceeded",
    )
    [attempt] = attempts_of(conn, delivery)
    assert attempt.outcome == "timed_out"
    # The dead letter (and its alert) says what failed: there is no HTTP status to show.
    assert (record.last_status, record.last_error) == (None, "no response within 30 s")
    assert attempt.error == "no response within 30 s"
    rig.close()


def test_engine_cycle_claims_only_what_keeps_max_concurrent_requests_in_flight(
    conn: Store,
) -> None:
    set_settings(conn, MaxConcurrentRequests=50)
    queue_events(conn, subscribe(conn, URL), 300)
    # Every other request answers in 0.5 s, the others in 2.5 s.
    elapsed: dict[int, float] = {}

    def answer(request: Request) -> Reply:
        elapsed[request.key] = 0.5 if request.key % 2 else 2.5
        return Reply(200, elapsed=elapsed[request.key])

    rig = Rig(conn, answer)
    sent = [rig.cycle().sent]
    held = [_in_flight(rig, elapsed)]
    for _ in range(8):
        sent.append(rig.advance(1).sent)
        held.append(_in_flight(rig, elapsed))
    # A cycle tops up to the ceiling, never past it: 50, then what the answers freed.
    assert held == [50] * 9
    assert sent[:4] == [50, 25, 13, 31]
    assert states(conn)["delivered"] == sum(sent) - 50
    rig.close()


def test_engine_request_in_the_late_window_still_counts_against_the_ceiling(
    conn: Store,
) -> None:
    # The first 50 requests answer 200 after 100 s: timed out at 30 s, delivered late; until then
    # the endpoint still holds them, so no other request goes out.
    set_settings(conn, MaxConcurrentRequests=50)
    queue_events(conn, subscribe(conn, URL), 100)
    rig = Rig(conn, lambda request: Reply(200, elapsed=100.0 if request.key <= 50 else 0.0))
    sent = [rig.cycle().sent]
    for _ in range(100):
        sent.append(rig.advance(1).sent)
    assert sent[0] == 50
    assert sum(sent[1:100]) == 0
    assert sent[100] == 50  # at T0 + 100 s the late answers settled them
    assert rig.engine.totals.late_delivered == 50
    rig.close()


def _in_flight(rig: Rig, elapsed: dict[int, float]) -> int:
    """Requests the model endpoint holds now: sent, and not answered yet."""
    now = rig.clock.now().timestamp()
    sent = zip(rig.transport.sent, _send_times(rig), strict=True)
    return sum(1 for request, at in sent if at + elapsed[request.key] > now)


def _cycle_starts(conn: Store, events: int, *, first_send: float = 0.0) -> list[float]:
    """Run ``events`` through the engine (MaxConcurrentRequests 50, Duration 5) until done,
    the clock moving ``first_send`` seconds while the first cycle hands its requests over (its
    work took that long); the seconds after T0 at which cycles sent, every event delivered."""
    set_settings(conn, MaxConcurrentRequests=50, Duration=5)
    queue_events(conn, subscribe(conn, URL), events)
    work = [first_send]

    def answer(_request: Request) -> Reply:
        if work:
            rig.clock.advance(work.pop())
        return Reply(200)

    rig = Rig(conn, answer)
    totals = rig.run(rig.engine.run(once=True))
    rig.loop.close()
    assert totals.delivered == states(conn)["delivered"] == events
    return [round(t - T0, 6) for t in sorted(set(_send_times(rig)))]


def test_engine_cycles_start_duration_apart(conn: Store) -> None:
    assert _cycle_starts(conn, 120) == [0.0, 5.0, 10.0]


def test_engine_cycle_that_overran_duration_is_followed_as_it_ends(
    conn: Store,
) -> None:
    # Duration counts from a cycle's start: the first cycle's work takes 7 s, so the second
    # starts as the first ends, at 7 s, and the third 5 s after the second started.
    assert _cycle_starts(conn, 150, first_send=7) == [0.0, 7.0, 12.0]


def _send_times(rig: Rig) -> list[float]:
    return [_epoch(parse_header(r.signature).timestamp) for r in rig.transport.sent]


def _epoch(text: str) -> float:
    from prefctl.webhooks.signature import parse_timestamp

    return parse_timestamp(text).timestamp()


def test_engine_settings_change_applies_at_the_next_cycle(conn: Store) -> None:
    set_settings(conn, MaxConcurrentRequests=50)
    queue_events(conn, subscribe(conn, URL), 200)
    rig = Rig(conn)
    assert rig.cycle().sent == 50
    set_settings(conn, MaxConcurrentRequests=120)
    assert rig.advance(1).sent == 120
    rig.close()


def test_engine_sees_changes_written_by_another_process_at_the_next_cycle(
    conn: Store, store_location: str
) -> None:
    # `prefctl settings set` and a Hashkey rotation come from other processes: other connections.
    queue_events(conn, subscribe(conn, URL), 200)
    set_settings(conn, MaxConcurrentRequests=50)
    rig = Rig(conn)
    assert rig.cycle().sent == 50
    other = connect(store_location)
    try:
        other.execute(
            "INSERT INTO webhook_settings (service_client_id, name, value)"
            " VALUES ('DEMO_CORP', 'MaxConcurrentRequests', 70)"
            " ON CONFLICT (service_client_id, name) DO UPDATE SET value = excluded.value"
        )
        other.execute(
            "UPDATE accounts SET hashkey = 'rotated' WHERE service_client_id = 'DEMO_CORP'"
        )
    finally:
        other.close()
    assert rig.advance(1).sent == 70
    rotated = SigningCredentials(CREDENTIALS.client_id, CREDENTIALS.signature_user_id, "rotated")
    last = rig.transport.sent[-1].signature
    verify(last, rotated, now=parse_header_time(last))
    rig.close()


def test_engine_signs_every_attempt_afresh(conn: Store) -> None:
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, statuses(500, 500))  # type: ignore[arg-type]
    rig.cycle()
    for _ in range(60):
        rig.advance(1)
    assert record_of(conn, delivery).state == "delivered"
    headers = [request.signature for request in rig.transport.sent]
    assert len(headers) == 3
    assert len(set(headers)) == 3
    for header in headers:
        moment = parse_header_time(header)
        verify(header, CREDENTIALS, now=moment)
    rig.close()


def test_a_model_that_reads_no_payloads_gets_none_and_the_same_outcomes(
    conn: Store,
) -> None:
    # The simulator's model answers without reading bodies or signatures: the engine skips
    # building them, and nothing else changes.
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, statuses(500, 200), payloads=False)  # type: ignore[arg-type]
    rig.cycle()
    for _ in range(30):
        rig.advance(1)
    assert record_of(conn, delivery).state == "delivered"
    assert [(r.body, r.signature) for r in rig.transport.sent] == [(b"", None), (b"", None)]
    assert [a.status for a in attempts_of(conn, delivery)] == [500, 200]
    rig.close()


def parse_header_time(header: str | None) -> datetime:
    from prefctl.webhooks.signature import parse_timestamp

    return parse_timestamp(parse_header(header).timestamp)


def test_engine_time_scale_divides_every_rule_duration(conn: Store) -> None:
    [delivery] = queue_events(conn, subscribe(conn, URL), 1)
    rig = Rig(conn, lambda _r: Reply(200, elapsed=math.inf), time_scale=60)
    rig.cycle()
    rig.advance(0.5)  # the 30 s timeout is 0.5 s
    record = record_of(conn, delivery)
    assert (record.state, record.attempts) == ("queued", 1)
    # The backoff (10 s) is 1/6 s; the request is abandoned after the late window (3 s).
    assert 0.5 + 0.9 * 10 / 60 <= record.next_attempt_at - T0 <= 0.5 + 1.1 * 10 / 60
    [request] = rig.transport.sent[:1]
    assert request.keep_open == pytest.approx(3.0)
    rig.close()


def test_engine_reports_successes_per_subscription(conn: Store) -> None:
    first, second = subscribe(conn, URL), subscribe(conn, "https://hooks.example/other", name="b")
    queue_events(conn, first, 2)
    queue_events(conn, second, 1, prefix="11111111")
    rig = Rig(conn, lambda r: Reply(200 if r.url == URL else 500))
    rig.cycle()
    rig.advance(1)
    [(_, results)] = rig.recorder.results
    assert results.delivered_subscriptions == {first}
    assert sorted(r.state for r in results.recorded) == ["delivered", "delivered", "queued"]
    assert rig.recorder.cycles
    rig.close()


def test_engine_run_once_stops_when_nothing_is_due(conn: Store) -> None:
    subscription = subscribe(conn, URL)
    queue_events(conn, subscription, 3)
    rig = Rig(conn, statuses(500))  # type: ignore[arg-type]
    totals = rig.run(rig.engine.run(once=True))
    # Two delivered, one failed and queued for a retry 10 s later, which once does not wait for.
    assert (totals.delivered, totals.failed) == (2, 1)
    assert states(conn) == {"delivered": 2, "queued": 1}
    assert rig.clock.now().timestamp() - T0 < 10
    rig.loop.close()
