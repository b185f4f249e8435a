from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefctl.dispatcher.policy import (
    PROBATION_THRESHOLD,
    Action,
    DeadLetterReason,
    EndpointHealth,
    Limits,
    Outcome,
    after_attempt,
    backoff_delay,
    check_due,
)

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_after_attempt_200_is_delivered() -> None:
    assert after_attempt(Outcome.http(200), 1, NOW, random.Random(1)).action is Action.DELIVERED


@pytest.mark.parametrize(
    ("status", "reason"),
    [(400, DeadLetterReason.BAD_REQUEST), (413, DeadLetterReason.PAYLOAD_TOO_LARGE)],
)
def test_after_attempt_400_and_413_dead_letter_at_once(
    status: int, reason: DeadLetterReason
) -> None:
    decision = after_attempt(Outcome.http(status), 1, NOW, random.Random(1))
    assert decision.action is Action.DEAD_LETTER
    assert decision.reason is reason


@pytest.mark.parametrize("status", [201, 202, 204, 301, 302, 401, 403, 404, 408, 429, 500, 503])
def test_after_attempt_other_statuses_are_retried(status: int) -> None:
    decision = after_attempt(Outcome.http(status), 1, NOW, random.Random(1))
    assert decision.action is Action.RETRY
    assert decision.next_attempt_at is not None
    assert 9.0 <= (decision.next_attempt_at - NOW).total_seconds() <= 11.0


def test_after_attempt_timeout_and_connection_error_are_retried() -> None:
    for outcome in (Outcome.timeout(), Outcome.connection_error("refused")):
        assert after_attempt(outcome, 3, NOW, random.Random(1)).action is Action.RETRY


@given(st.integers(min_value=1, max_value=40), st.integers(min_value=0, max_value=2**32))
def test_backoff_delay_doubles_from_10s_caps_at_30min_with_10pct_jitter(n: int, seed: int) -> None:
    delay = backoff_delay(n, random.Random(seed))
    base = min(10 * 2 ** (n - 1), 1800)
    assert base * 0.9 <= delay <= base * 1.1


def test_backoff_delay_is_reproducible_with_a_seed() -> None:
    assert backoff_delay(4, random.Random(7)) == backoff_delay(4, random.Random(7))


def test_check_due_dead_letters_after_max_attempts() -> None:
    limits = Limits(max_attempts=3, ttl_minutes=240)
    assert check_due(2, NOW, NOW, limits) is None
    assert check_due(3, NOW, NOW, limits) is DeadLetterReason.MAX_ATTEMPTS


def test_check_due_dead_letters_when_ttl_reached_at_due_time() -> None:
    limits = Limits(max_attempts=30, ttl_minutes=1)
    assert check_due(1, NOW, NOW + timedelta(seconds=59), limits) is None
    assert check_due(1, NOW, NOW + timedelta(seconds=60), limits) is DeadLetterReason.TTL


def test_endpoint_health_enters_probation_after_threshold_failures() -> None:
    health = EndpointHealth()
    for _ in range(PROBATION_THRESHOLD - 1):
        health = health.record(Outcome.http(500), NOW)
    assert not health.on_probation
    health = health.record(Outcome.timeout(), NOW)
    assert health.on_probation
    assert not health.may_attempt(NOW + timedelta(seconds=59))
    assert health.may_attempt(NOW + timedelta(seconds=60))


def test_endpoint_health_probe_interval_doubles_to_30_minutes_and_200_ends_it() -> None:
    health = EndpointHealth()
    for _ in range(PROBATION_THRESHOLD):
        health = health.record(Outcome.http(503), NOW)
    intervals = []
    for _ in range(8):
        health = health.probe_started(NOW).record(Outcome.http(503), NOW)
        intervals.append(health.probe_interval_seconds)
    assert intervals[:3] == [120, 240, 480]
    assert intervals[-1] == 1800
    healed = health.record(Outcome.http(200), NOW)
    assert not healed.on_probation
    assert healed.may_attempt(NOW)


def test_endpoint_health_probe_slots_are_1_2_4_minutes_apart() -> None:
    health = EndpointHealth()
    for _ in range(PROBATION_THRESHOLD):
        health = health.record(Outcome.http(503), NOW)
    slots = []
    for _ in range(6):
        assert health.next_probe_at is not None
        slot = health.next_probe_at
        slots.append((slot - NOW).total_seconds() / 60)
        # The probe goes out at its slot and fails; so does a delivery already in flight.
        health = health.probe_started(slot).record(Outcome.http(503), slot)
        health = health.record(Outcome.timeout(), slot)
    assert slots == [1, 3, 7, 15, 31, 61]  # gaps of 1, 2, 4, 8, 16, 30 minutes


@pytest.mark.parametrize("status", [400, 413])
def test_endpoint_health_400_and_413_do_not_count_toward_probation(status: int) -> None:
    health = EndpointHealth()
    for _ in range(PROBATION_THRESHOLD * 2):
        health = health.record(Outcome.http(status), NOW)
    assert not health.on_probation
    assert health.consecutive_failures == 0
