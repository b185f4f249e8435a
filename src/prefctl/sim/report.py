"""The report of a simulation, read from the store the engine wrote.

``build_report`` turns the final store into one plain dict (``prefctl simulate -o json``), with
snake_case keys, times as RFC 3339 plus minutes from the start of the run, and every number
rounded to the millisecond, so the same seed gives byte-identical JSON:

- ``deliveries``: total, delivered, dead-lettered, retried (needed more than one attempt),
  ``delivered_first_time``, and the 200s that delivered nothing: ``duplicates`` (for a delivery
  already delivered) and ``delivered_after_dead_letter`` (for one already dead-lettered);
- ``attempts``: counted, skipped (not sent: probation), by outcome, and the histogram of attempts
  per final delivery, split by how the delivery ended;
- ``dead_letters``: by reason;
- ``latency_seconds``: OriginalEventTime → delivered, p50 / p90 / p99 / max / mean;
- ``alerts``: every alert email with its time, subscription, kind and subject;
- ``probation``: each period an endpoint spent on probation;
- ``subscriptions``: the same counts per subscription;
- ``timeline``: outcomes over time in buckets (``bucket_minutes`` wide).

Every 200 received is an attempt of outcome ``delivered`` or ``late_delivered``; the first for a
delivery delivers it, and a 200 for a delivery already final changes nothing (docs/dispatcher.md: a late
success after its retry went out may duplicate; a late success after the retry limit, the TTL or
a 400/413 dead-lettered the delivery comes too late). So, always:
``by_outcome.delivered + by_outcome.late_delivered
= deliveries.delivered + deliveries.duplicates + deliveries.delivered_after_dead_letter``.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefctl.dispatcher.policy import DeadLetterReason
from prefctl.sim.scenario import Scenario
from prefctl.store import Store
from prefctl.store.alerts import list_alerts
from prefctl.store.delivery_results import AttemptOutcome
from prefctl.store.delivery_stats import count_events, delivery_counts, timeline_counts
from prefctl.store.timestamps import wire_time

__all__ = ["OUTCOME_KEYS", "ProbationPeriod", "bucket_minutes", "build_report"]

# The columns of the timeline, in the order the chart stacks them.
OUTCOME_KEYS = ("delivered", "failed", "timed_out", "skipped", "dead_lettered")
# The attempt outcomes that are a 200 received (on time, or late within the late-success window).
_OK = ("delivered", "late_delivered")
# Keys that are always in the report, 0 when nothing happened (scripts read them).
_ATTEMPT_OUTCOMES = typing.get_args(AttemptOutcome)
_NOT_SENT = ("skipped", "late_delivered")
# The reasons a delivery policy gives; a simulation never changes a Url, so never fails one.
_REASONS = tuple(r.value for r in DeadLetterReason if r is not DeadLetterReason.VALIDATION_FAILED)
_NICE_MINUTES = (1, 2, 5, 10, 15, 20, 30, 60, 120, 180, 240, 360, 720, 1440)
_MAX_BUCKETS = 48


@dataclass(frozen=True, slots=True)
class ProbationPeriod:
    """A stretch of time one subscription's Url spent on probation (``ended_at`` None: still on
    when the run ended)."""

    subscription_id: int
    url: str
    started_at: float
    ended_at: float | None


def bucket_minutes(total_minutes: float) -> int:
    """A round bucket width giving at most 48 buckets over the run."""
    for minutes in _NICE_MINUTES:
        if total_minutes / minutes <= _MAX_BUCKETS:
            return minutes
    return math.ceil(total_minutes / _MAX_BUCKETS / 1440) * 1440


def build_report(
    conn: Store,
    scenario: Scenario,
    *,
    start: float,
    end: float,
    subscriptions: Mapping[int, str],
    probation: Sequence[ProbationPeriod],
    cycles: int,
) -> dict[str, Any]:
    """The report of the run that went from ``start`` to ``end`` (Unix seconds, virtual)."""
    totals = _counts(conn, None)
    if len(subscriptions) == 1:  # the one subscription's figures are the totals: not read twice
        per_subscription = dict.fromkeys(subscriptions, totals)
    else:
        per_subscription = {sid: _counts(conn, sid) for sid in subscriptions}
    width = bucket_minutes(max((end - start) / 60.0, 1.0))
    return {
        "scenario": {
            "name": scenario.name,
            "description": scenario.description,
            "seed": scenario.seed,
            "settings": dict(scenario.settings),
            "events_per_minute": scenario.load.events_per_minute,
            "duration_minutes": scenario.load.duration_minutes,
        },
        "run": {
            "start": wire_time(start),
            "end": wire_time(end),
            "minutes": _round((end - start) / 60.0),
            "cycles": cycles,
        },
        "events": count_events(conn),
        **totals,
        "alerts": _alerts(conn, start),
        "probation": [_probation(p, subscriptions, start) for p in probation],
        "subscriptions": [
            {"id": sid, "name": name, **per_subscription[sid]}
            for sid, name in subscriptions.items()
        ],
        "timeline": {"bucket_minutes": width, "buckets": _timeline(conn, start, end, width)},
    }


def _counts(conn: Store, subscription_id: int | None) -> dict[str, Any]:
    counts = delivery_counts(conn, subscription_id)
    states, reasons, latencies = counts.states, counts.dead_letter_reasons, counts.latencies
    histogram: dict[int, dict[str, int]] = {}
    for (attempts, state), count in counts.final_by_attempts.items():
        histogram.setdefault(attempts, {"delivered": 0, "dead_lettered": 0})[state] = count
    # Attempts by outcome, and the 200s by how their delivery ended (for the duplicates).
    outcomes: dict[str, int] = {}
    ok_by_state: dict[str, int] = {}
    for (outcome, state), count in counts.attempts_by_outcome_and_state.items():
        outcomes[outcome] = outcomes.get(outcome, 0) + count
        if outcome in _OK:
            ok_by_state[state] = ok_by_state.get(state, 0) + count
    delivered, dead = states.get("delivered", 0), states.get("dead_lettered", 0)
    first_time = histogram.get(1, {}).get("delivered", 0)
    return {
        "deliveries": {
            "total": sum(states.values()),
            "delivered": delivered,
            "delivered_first_time": first_time,
            "retried": sum(
                c["delivered"] + c["dead_lettered"] for n, c in histogram.items() if n > 1
            ),
            "dead_lettered": dead,
            "pending": sum(v for k, v in states.items() if k not in ("delivered", "dead_lettered")),
            # A delivered delivery got one 200 that delivered it; any other 200 for it came when
            # it was already delivered. A dead-lettered one got its 200s after it was final.
            "duplicates": ok_by_state.get("delivered", 0) - delivered,
            "delivered_after_dead_letter": ok_by_state.get("dead_lettered", 0),
        },
        "attempts": {
            # A late answer is not a request of its own: its attempt was counted as timed out.
            "counted": sum(v for k, v in outcomes.items() if k not in _NOT_SENT),
            "skipped": outcomes.get("skipped", 0),
            "by_outcome": {k: outcomes.get(k, 0) for k in sorted({*_ATTEMPT_OUTCOMES, *outcomes})},
            "histogram": [
                {"attempts": n, **histogram[n], "total": sum(histogram[n].values())}
                for n in sorted(histogram)
            ],
        },
        "dead_letters": {
            "total": dead,
            "by_reason": {k: reasons.get(k, 0) for k in sorted({*_REASONS, *reasons})},
        },
        "latency_seconds": _percentiles(latencies),
    }


def _percentiles(values: list[float]) -> dict[str, float | None]:
    """Nearest-rank percentiles of sorted ``values``."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}

    def rank(p: float) -> float:
        return _round(values[max(math.ceil(p / 100 * len(values)) - 1, 0)])

    return {
        "p50": rank(50),
        "p90": rank(90),
        "p99": rank(99),
        "max": _round(values[-1]),
        "mean": _round(math.fsum(values) / len(values)),
    }


def _alerts(conn: Store, start: float) -> list[dict[str, Any]]:
    return [
        {
            "at": wire_time(alert.created_at),
            "minute": _round((alert.created_at - start) / 60.0),
            "subscription_id": alert.subscription_id,
            "subscription": alert.subscription_name,
            "kind": alert.kind,
            "dead_letters": alert.dead_letters,
            "subject": alert.subject,
        }
        for alert in list_alerts(conn)
    ]


def _probation(
    period: ProbationPeriod, subscriptions: Mapping[int, str], start: float
) -> dict[str, Any]:
    ended = period.ended_at
    return {
        "subscription_id": period.subscription_id,
        "subscription": subscriptions.get(period.subscription_id),
        "url": period.url,
        "start": wire_time(period.started_at),
        "start_minute": _round((period.started_at - start) / 60.0),
        "end": None if ended is None else wire_time(ended),
        "end_minute": None if ended is None else _round((ended - start) / 60.0),
        "minutes": None if ended is None else _round((ended - period.started_at) / 60.0),
    }


def _timeline(conn: Store, start: float, end: float, width: int) -> list[dict[str, Any]]:
    seconds = width * 60.0
    count = max(math.ceil((end - start) / seconds), 1)
    rows = [
        {"start_minute": i * width, "events": 0, **dict.fromkeys(OUTCOME_KEYS, 0)}
        for i in range(count)
    ]

    # Events by their time; attempts that did not deliver, by when they were sent; deliveries
    # by when they became final (delivered by their first 200, so a duplicate 200 is not counted
    # again). The column sums are deliveries.delivered and deliveries.dead_lettered.
    for row in timeline_counts(conn, start, seconds):
        rows[min(row.bucket, count - 1)][row.kind] += row.count
    return rows


def _round(value: float) -> float:
    return round(value, 3)
