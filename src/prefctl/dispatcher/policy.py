"""The delivery rules, as pure functions (docs/dispatcher.md; spec "Event delivery lifecycle").

Nothing here does I/O or reads a clock: the engine, the simulator and ``prefctl policy explain``
all call the same functions with the time and the random source they own.

- Success is HTTP 200 only.
- 400 and 413 dead-letter at once (``BadRequest`` / ``PayloadTooLarge``): they can never succeed.
- Any other status (3xx are not followed), a connection error, or no answer within the timeout is
  a failed attempt, retried after ``backoff_delay``:
  ``min(10 s × 2^(n−1), 30 min) × uniform(0.9, 1.1)`` before attempt n+1.
- Max attempts and time-to-live are checked when the next attempt comes due (``check_due``); the
  delivery is dead-lettered then (``MaxDeliveryAttemptsExceeded`` / ``TimeToLiveExceeded``).
  The TTL runs from the delivery's EventTime (when the event was queued for the subscription).
- Probation: after ``PROBATION_THRESHOLD`` consecutive failed attempts to one URL, only one probe
  delivery per interval goes out (1 min, doubling to 30 min); other due deliveries wait without
  spending an attempt. A 200 ends probation. A 400 or 413 is a verdict on one message from an
  endpoint that is up, not a failed attempt: it neither counts toward probation nor ends it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

BASE_DELAY_SECONDS = 10.0
MAX_DELAY_SECONDS = 30 * 60.0
JITTER = 0.1
RESPONSE_TIMEOUT_SECONDS = 30.0
LATE_SUCCESS_WINDOW_SECONDS = 3 * 60.0
PROBATION_THRESHOLD = 10
PROBE_INTERVAL_START_SECONDS = 60.0
PROBE_INTERVAL_MAX_SECONDS = 30 * 60.0


class Action(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"


class DeadLetterReason(StrEnum):
    MAX_ATTEMPTS = "MaxDeliveryAttemptsExceeded"
    TTL = "TimeToLiveExceeded"
    BAD_REQUEST = "BadRequest"
    PAYLOAD_TOO_LARGE = "PayloadTooLarge"
    # Not the delivery policy's: the subscription's new Url failed validation (handshake.py).
    VALIDATION_FAILED = "SubscriptionValidationFailed"


class FailureKind(StrEnum):
    """How an attempt went, when it was not an HTTP answer."""

    TIMEOUT = "timeout"
    CONNECTION = "connection_error"


@dataclass(frozen=True)
class Outcome:
    """What one attempt produced: an HTTP status, or a failure kind with its error text."""

    status: int | None = None
    failure: FailureKind | None = None
    error: str | None = None

    @classmethod
    def http(cls, status: int) -> Outcome:
        return cls(status=status)

    @classmethod
    def timeout(cls, error: str = "no response within 30 s") -> Outcome:
        return cls(failure=FailureKind.TIMEOUT, error=error)

    @classmethod
    def connection_error(cls, error: str) -> Outcome:
        return cls(failure=FailureKind.CONNECTION, error=error)

    @property
    def succeeded(self) -> bool:
        return self.status == 200

    def describe(self) -> str:
        if self.status is not None:
            return f"HTTP {self.status}"
        return self.error or str(self.failure)


@dataclass(frozen=True)
class Limits:
    """The account settings the policy reads (docs/policy.md)."""

    max_attempts: int = 30
    ttl_minutes: int = 240


@dataclass(frozen=True)
class Decision:
    action: Action
    next_attempt_at: datetime | None = None
    delay_seconds: float | None = None
    reason: DeadLetterReason | None = None


def backoff_delay(attempts_made: int, rng: random.Random) -> float:
    """Seconds to wait after the ``attempts_made``-th failed attempt before the next one."""
    if attempts_made < 1:
        raise ValueError("backoff follows at least one attempt")
    base: float = min(BASE_DELAY_SECONDS * 2.0 ** (attempts_made - 1), MAX_DELAY_SECONDS)
    return base * rng.uniform(1 - JITTER, 1 + JITTER)


def after_attempt(
    outcome: Outcome, attempts_made: int, now: datetime, rng: random.Random
) -> Decision:
    """What follows an attempt (``attempts_made`` counts it)."""
    if outcome.succeeded:
        return Decision(Action.DELIVERED)
    if outcome.status == 400:
        return Decision(Action.DEAD_LETTER, reason=DeadLetterReason.BAD_REQUEST)
    if outcome.status == 413:
        return Decision(Action.DEAD_LETTER, reason=DeadLetterReason.PAYLOAD_TOO_LARGE)
    delay = backoff_delay(attempts_made, rng)
    return Decision(
        Action.RETRY, next_attempt_at=now + timedelta(seconds=delay), delay_seconds=delay
    )


def check_due(
    attempts_made: int, event_time: datetime, now: datetime, limits: Limits
) -> DeadLetterReason | None:
    """At the moment an attempt comes due: the reason to dead-letter instead, or None to go on."""
    if attempts_made >= limits.max_attempts:
        return DeadLetterReason.MAX_ATTEMPTS
    if now - event_time >= timedelta(minutes=limits.ttl_minutes):
        return DeadLetterReason.TTL
    return None


@dataclass(frozen=True)
class EndpointHealth:
    """Probation bookkeeping for one URL."""

    consecutive_failures: int = 0
    on_probation: bool = False
    probe_interval_seconds: float = PROBE_INTERVAL_START_SECONDS
    next_probe_at: datetime | None = None

    def may_attempt(self, now: datetime) -> bool:
        """False while on probation and the probe slot is not yet due."""
        return not self.on_probation or self.next_probe_at is None or now >= self.next_probe_at

    def probe_started(self, now: datetime) -> EndpointHealth:
        """A probe went out: the next slot opens one interval later, the interval twice the last
        (so the slots are 1, 2, 4 … 30 minutes apart: the first one minute after probation
        began). A 200 to the probe ends probation before that slot matters."""
        if not self.on_probation:
            return self
        interval = min(self.probe_interval_seconds * 2, PROBE_INTERVAL_MAX_SECONDS)
        return replace(
            self, probe_interval_seconds=interval, next_probe_at=now + timedelta(seconds=interval)
        )

    def record(self, outcome: Outcome, now: datetime) -> EndpointHealth:
        """Account for an attempt's outcome (a 200 ends probation)."""
        if outcome.succeeded:
            return EndpointHealth()
        if outcome.status in (400, 413):
            return self
        failures = self.consecutive_failures + 1
        if self.on_probation:
            return replace(self, consecutive_failures=failures)
        if failures >= PROBATION_THRESHOLD:
            return EndpointHealth(
                consecutive_failures=failures,
                on_probation=True,
                probe_interval_seconds=PROBE_INTERVAL_START_SECONDS,
                next_probe_at=now + timedelta(seconds=PROBE_INTERVAL_START_SECONDS),
            )
        return replace(self, consecutive_failures=failures)


# What each kind of answer causes, for `prefctl policy explain` and the docs.
def describe_outcome(outcome: Outcome) -> tuple[str, str]:
    """(effect, explanation) of an outcome under the policy."""
    if outcome.succeeded:
        return "delivered", "the only success; the delivery is done (a late retry is cancelled)"
    if outcome.status == 400:
        return "dead-lettered at once", "BadRequest: a malformed event can never succeed"
    if outcome.status == 413:
        return "dead-lettered at once", "PayloadTooLarge: the event can never fit"
    if outcome.status is not None and 300 <= outcome.status < 400:
        return "retried", "redirects are not followed; a failed attempt"
    if outcome.failure is FailureKind.TIMEOUT:
        return "retried", (
            f"no answer in {RESPONSE_TIMEOUT_SECONDS:g} s; a 200 within "
            f"{LATE_SUCCESS_WINDOW_SECONDS / 60:g} min still cancels the retry"
        )
    if outcome.failure is FailureKind.CONNECTION:
        return "retried", "the endpoint could not be reached"
    return "retried", "a failed attempt, retried with backoff"
