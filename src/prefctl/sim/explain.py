"""``prefctl policy explain``: the attempt timeline and the outcome table, computed by the policy.

Nothing here restates a rule. The timeline calls ``policy.backoff_delay`` for every delay and
``policy.check_due`` at every due time, exactly as the engine does, for one delivery whose attempts
all fail at once (a 500 answered in no time); the outcome table calls ``policy.after_attempt``,
``policy.describe_outcome`` and ``EndpointHealth.record`` for each kind of answer.

Jitter: with a seed, the delays are the draws of ``random.Random(seed)`` in order (what one
delivery drawing from that source would get). Without one, the nominal delay (jitter factor 1) is
shown. Either way the earliest and latest times come from the same calls with the jitter at its
lower and upper bound, so the table also shows where the cut-off can move.

Alerts: ``alert_timeline`` feeds the real ``dispatcher.alerts.monitor.AlertMonitor`` (on the simulator's
in-memory store, emails kept in memory) one dead letter a minute from the cut-off on, as an
endpoint that fails every event of a steady load of one a minute would produce, and lists the
alerts it writes: when, of which kind, reporting how many.

    >>> explanation = explain(Limits(max_attempts=30, ttl_minutes=240), seed=None)
    >>> explanation.cut_off.reason
    'TimeToLiveExceeded'
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prefctl.clock import format_duration
from prefctl.dispatcher.policy import (
    Action,
    EndpointHealth,
    Limits,
    Outcome,
    after_attempt,
    check_due,
    describe_outcome,
)

__all__ = [
    "ALERT_SETTINGS",
    "AlertRow",
    "CutOff",
    "Explanation",
    "OutcomeRow",
    "TimelineRow",
    "alert_timeline",
    "explain",
    "format_duration",
    "format_minutes",
    "outcome_table",
]

# A fixed origin: the timeline is relative to the delivery's EventTime, never to the wall clock.
_ORIGIN = datetime(2026, 1, 1, tzinfo=UTC)


class _Pinned(random.Random):
    """A random source whose ``uniform(a, b)`` always answers the same point of [a, b]: 0 the
    lower bound, 0.5 the middle (jitter factor 1), 1 the upper bound."""

    def __init__(self, point: float) -> None:
        super().__init__(0)
        self.point = point

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.point


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One attempt: the delay before it and when it goes, in seconds after EventTime."""

    attempt: int
    delay_seconds: float
    at_seconds: float
    earliest_at_seconds: float
    latest_at_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "delay_seconds": round(self.delay_seconds, 3),
            "at_seconds": round(self.at_seconds, 3),
            "earliest_at_seconds": round(self.earliest_at_seconds, 3),
            "latest_at_seconds": round(self.latest_at_seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class CutOff:
    """Where the timeline ends: the next attempt came due and ``check_due`` said no."""

    after_attempts: int
    at_seconds: float
    reason: str
    # The attempt count at the cut-off when the jitter sits at its bounds.
    attempts_range: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "after_attempts": self.after_attempts,
            "at_seconds": round(self.at_seconds, 3),
            "reason": self.reason,
            "attempts_min": self.attempts_range[0],
            "attempts_max": self.attempts_range[1],
        }


@dataclass(frozen=True, slots=True)
class OutcomeRow:
    """What one kind of answer causes after a first attempt."""

    outcome: str
    action: str
    effect: str
    reason: str | None
    retry_after_seconds: float | None
    counts_toward_probation: bool
    explanation: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "action": self.action,
            "effect": self.effect,
            "reason": self.reason,
            "retry_after_seconds": (
                None if self.retry_after_seconds is None else round(self.retry_after_seconds, 3)
            ),
            "counts_toward_probation": self.counts_toward_probation,
            "explanation": self.explanation,
        }


@dataclass(frozen=True, slots=True)
class AlertRow:
    """One alert email: when (seconds after the first EventTime), its kind and what it reports."""

    sequence: int
    kind: str
    at_seconds: float
    dead_letters: int
    incident_dead_letters: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "kind": self.kind,
            "at_seconds": round(self.at_seconds, 3),
            "dead_letters": self.dead_letters,
            "incident_dead_letters": self.incident_dead_letters,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """The whole answer of ``policy explain``."""

    limits: Limits
    seed: int | None
    timeline: list[TimelineRow]
    cut_off: CutOff
    outcomes: list[OutcomeRow]
    alert_settings: Mapping[str, int]
    alerts: list[AlertRow]

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_attempts": self.limits.max_attempts,
            "ttl_minutes": self.limits.ttl_minutes,
            "seed": self.seed,
            "jitter": "nominal" if self.seed is None else "seeded",
            "timeline": [row.to_dict() for row in self.timeline],
            "cut_off": self.cut_off.to_dict(),
            "outcomes": [row.to_dict() for row in self.outcomes],
            "alert_settings": dict(self.alert_settings),
            "alerts": [row.to_dict() for row in self.alerts],
        }


# The account settings ``alert_timeline`` reads, with their defaults.
ALERT_SETTINGS = (
    "AlertFrequencyMin",
    "AlertFrequencyMax",
    "AlertThresholdMin",
    "AlertThresholdMax",
)
# Bounds of the alert timeline: a day of dead letters, or this many alerts.
_ALERT_HORIZON_MINUTES = 24 * 60
_MAX_ALERTS = 12


def explain(
    limits: Limits, seed: int | None, alert_settings: Mapping[str, int] | None = None
) -> Explanation:
    """The timeline of one always-failing delivery under ``limits``, the outcome table, and the
    alerts of a steady load failing that way under ``alert_settings`` (defaults for the rest)."""
    rng = _Pinned(0.5) if seed is None else random.Random(seed)
    times, reason = _schedule(limits, rng)
    attempts = len(times) - 1
    earliest = _due_times(attempts, _Pinned(0.0))
    latest = _due_times(attempts, _Pinned(1.0))
    rows = [
        TimelineRow(n + 1, at - (times[n - 1] if n else 0.0), at, earliest[n], latest[n])
        for n, at in enumerate(times[:-1])
    ]
    # Short delays reach the TTL later, with more attempts: the count range runs high → low.
    fewest = len(_schedule(limits, _Pinned(1.0))[0]) - 1
    most = len(_schedule(limits, _Pinned(0.0))[0]) - 1
    cut_off = CutOff(attempts, times[-1], reason, (fewest, most))
    settings = _alert_settings(alert_settings or {})
    alerts = alert_timeline(settings, first_dead_letter_seconds=cut_off.at_seconds)
    return Explanation(limits, seed, rows, cut_off, outcome_table(), settings, alerts)


def _alert_settings(given: Mapping[str, int]) -> dict[str, int]:
    from prefctl.models.setting_ranges import SETTING_RANGES

    return {name: given.get(name, SETTING_RANGES[name].default) for name in ALERT_SETTINGS}


def alert_timeline(
    alert_settings: Mapping[str, int], *, first_dead_letter_seconds: float
) -> list[AlertRow]:
    """The alerts of one subscription whose events dead-letter one a minute from
    ``first_dead_letter_seconds`` on, as the real alert monitor writes them (at most a day of dead
    letters, at most 12 alerts; it stops early once alerting pauses)."""
    from prefctl.dispatcher.alerts.monitor import AlertMonitor, DeadLetterNotice
    from prefctl.sim.observers import CapturedMail
    from prefctl.sim.scenario import parse_scenario
    from prefctl.sim.setup import build_store
    from prefctl.store import alert_incidents
    from prefctl.store import alerts as alert_store
    from prefctl.store.timestamps import epoch

    settings = "\n".join(f"{name} = {value}" for name, value in alert_settings.items())
    scenario = parse_scenario(
        f"[settings]\n{settings}\n[load]\nevents_per_minute = 1\nduration_minutes = 1\n",
        source="policy-explain.toml",
    )
    service = build_store(scenario)  # its load is never written: the dead letters are made here
    conn = service.conn
    try:
        [subscription_id] = service.subscriptions
        monitor = AlertMonitor(conn, CapturedMail())
        origin = epoch(_ORIGIN)
        for minute in range(_ALERT_HORIZON_MINUTES):
            at = origin + first_dead_letter_seconds + minute * 60.0
            # As in a dispatcher cycle: the dead letter first (which also sends what is due).
            notice = DeadLetterNotice(f"event-{minute}", subscription_id, "dead-lettered")
            monitor.dead_lettered(at, [notice])
            incident = alert_incidents.current_incident(conn, subscription_id)
            if len(alert_store.list_alerts(conn)) >= _MAX_ALERTS or (
                incident is not None and incident.state == "paused"
            ):
                break
        return [
            AlertRow(
                alert.sequence,
                alert.kind,
                alert.created_at - origin,
                alert.dead_letters,
                alert.incident_dead_letters,
            )
            for alert in alert_store.list_alerts(conn)
        ]
    finally:
        conn.close()


# Every answer in the timeline is a failure that is retried.
_FAILURE = Outcome.http(500)


def _schedule(limits: Limits, rng: random.Random) -> tuple[list[float], str]:
    """Due times (seconds after EventTime) of every attempt, then of the refused one, and why it
    was refused: the engine's loop with every answer a failure."""
    due = _ORIGIN
    times: list[float] = []
    attempts_made = 0
    while True:
        reason = check_due(attempts_made, _ORIGIN, due, limits)
        times.append((due - _ORIGIN).total_seconds())
        if reason is not None:
            return times, str(reason)
        attempts_made += 1
        due = _next_due(attempts_made, due, rng)


def _due_times(attempts: int, rng: random.Random) -> list[float]:
    """Due times of the first ``attempts`` attempts, whatever the limits."""
    due, times = _ORIGIN, []
    for attempts_made in range(attempts):
        times.append((due - _ORIGIN).total_seconds())
        due = _next_due(attempts_made + 1, due, rng)
    return times


def _next_due(attempts_made: int, now: datetime, rng: random.Random) -> datetime:
    decision = after_attempt(_FAILURE, attempts_made, now, rng)
    assert decision.next_attempt_at is not None  # a 500 is always retried
    return decision.next_attempt_at


# The answers of `policy explain`'s table, in the order of the issue.
_OUTCOMES: tuple[tuple[str, Outcome], ...] = (
    ("200", Outcome.http(200)),
    ("3xx", Outcome.http(302)),
    ("400", Outcome.http(400)),
    ("401", Outcome.http(401)),
    ("403", Outcome.http(403)),
    ("404", Outcome.http(404)),
    ("408", Outcome.http(408)),
    ("413", Outcome.http(413)),
    ("429", Outcome.http(429)),
    ("500", Outcome.http(500)),
    ("503", Outcome.http(503)),
    ("timeout", Outcome.timeout()),
    ("connection refused", Outcome.connection_error("connection refused")),
)


def outcome_table() -> list[OutcomeRow]:
    """What each answer to a first attempt causes, asked of the policy (nominal jitter)."""
    rows = []
    for label, outcome in _OUTCOMES:
        decision = after_attempt(outcome, 1, _ORIGIN, _Pinned(0.5))
        effect, explanation = describe_outcome(outcome)
        health = EndpointHealth().record(outcome, _ORIGIN)
        retry_after = (
            decision.delay_seconds
            if decision.action is Action.RETRY and decision.next_attempt_at is not None
            else None
        )
        rows.append(
            OutcomeRow(
                outcome=label,
                action=str(decision.action),
                effect=effect,
                reason=None if decision.reason is None else str(decision.reason),
                retry_after_seconds=retry_after,
                counts_toward_probation=health.consecutive_failures > 0,
                explanation=explanation,
            )
        )
    return rows


def format_minutes(minutes: float) -> str:
    """``2h 5m`` style, to the minute (virtual times of a simulation): ``format_duration``'s."""
    whole = round(minutes)
    return format_duration(whole * 60) if whole else "0m"
