"""Duplicate, attempt, out-of-order and latency flags."""

from __future__ import annotations

from datetime import timedelta

from prefctl.clock import utc_timestamp
from prefctl.receiver.tracker import Tracker
from prefctl.receiver.verdict import Kind, SignatureResult, Verdict
from tests.receiver.asgi import NOW


def event(
    event_id: str,
    *,
    profile_id: object = 1001,
    event_time=NOW,
    status: int = 200,
    signature: str = SignatureResult.VALID,
    received_after: float = 0.25,
) -> Verdict:
    return Verdict(
        time=NOW + timedelta(seconds=received_after),
        kind=Kind.EVENT,
        status=status,
        signature=signature,
        event_id=event_id,
        event_type="tag.added",
        profile_id=profile_id,
        event_time=utc_timestamp(event_time) if event_time is not None else None,
    )


def test_tracker_latency_is_arrival_minus_event_time() -> None:
    verdict = event("a")
    Tracker().observe(verdict)
    assert verdict.latency_ms == 250.0


def test_tracker_retry_after_failure_is_attempt_2_not_duplicate() -> None:
    tracker = Tracker()
    first, retry, again = event("a", status=500), event("a"), event("a")
    for verdict in (first, retry, again):
        tracker.observe(verdict)
    assert [v.attempt for v in (first, retry, again)] == [1, 2, 3]
    assert [v.duplicate for v in (first, retry, again)] == [False, False, True]


def test_tracker_older_event_time_for_same_profile_is_out_of_order() -> None:
    tracker = Tracker()
    newer = event("b", event_time=NOW)
    older = event("a", event_time=NOW - timedelta(seconds=1))
    other_profile = event("c", profile_id=2002, event_time=NOW - timedelta(seconds=5))
    for verdict in (newer, older, other_profile):
        tracker.observe(verdict)
    assert (newer.out_of_order, older.out_of_order, other_profile.out_of_order) == (
        False,
        True,
        False,
    )


def test_tracker_ignores_forged_requests() -> None:
    tracker = Tracker()
    forged = event("a", signature=SignatureResult.INVALID, status=401)
    tracker.observe(forged)
    real = event("a")
    tracker.observe(real)
    assert (forged.attempt, real.attempt, real.duplicate) == (0, 1, False)


def test_tracker_tolerates_missing_or_odd_fields() -> None:
    tracker = Tracker()
    odd = event("a", profile_id={"x": 1}, event_time=None)
    tracker.observe(odd)
    bad_time = event("b")
    bad_time.event_time = "yesterday"
    tracker.observe(bad_time)
    assert odd.latency_ms is None
    assert bad_time.latency_ms is None


def test_tracker_memory_is_bounded() -> None:
    tracker = Tracker(limit=3)
    for n in range(10):
        tracker.observe(event(f"e{n}", profile_id=n))
    first_again = event("e0", profile_id=0)
    tracker.observe(first_again)
    assert first_again.attempt == 1  # forgotten
    recent = event("e9", profile_id=9)
    tracker.observe(recent)
    assert recent.duplicate


def test_tracker_memory_is_bounded_in_bytes_before_the_count() -> None:
    tracker = Tracker(limit=1_000_000, memory_bytes=64 * 1024)
    for n in range(5_000):
        tracker.observe(event(f"{n:0200d}", profile_id=f"{n:0200d}"))
    assert tracker.memory_used <= 2 * 64 * 1024
    newest = event(f"{4_999:0200d}", profile_id=0)
    tracker.observe(newest)
    assert newest.duplicate  # the newest are still remembered


def test_tracker_id_longer_than_any_real_one_is_remembered_by_digest_and_reported() -> None:
    tracker = Tracker()
    long_id = "x" * 1_000_000
    first, again = event(long_id, profile_id="p" * 1_000_000), event(long_id)
    tracker.observe(first)
    tracker.observe(again)
    assert again.duplicate
    assert first.detail is not None
    assert "EventId of 1000000 characters" in first.detail
    assert tracker.memory_used < 1_000
