"""Counts over the delivery queue and its attempt log, and the moments a run waits for.

The simulator reads these after (and while) its engine runs: how many deliveries ended how, how
many attempts had which outcome, the latency of each delivered one, the outcomes of a run in
time buckets, and when the next delivery is due. Counts are plain numbers and dicts, keyed by
the queue's own words (``state``, ``outcome``, ``dead_letter_reason``).

    >>> delivery_counts(conn, subscription_id=None).states
    {'delivered': 120, 'dead_lettered': 3}
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prefctl.store._dialect import is_postgres, portable

if TYPE_CHECKING:
    from prefctl.store import Store

__all__ = [
    "DeliveryCounts",
    "TimelineRow",
    "count_events",
    "delivery_counts",
    "has_unfinished",
    "last_finished_at",
    "next_due_at",
    "timeline_counts",
]


@dataclass(frozen=True, slots=True)
class DeliveryCounts:
    """The queue's deliveries (all, or one subscription's) counted every way a report reads.

    ``states``: deliveries by state; ``final_by_attempts``: (attempts, final state) → count of
    deliveries delivered or dead-lettered; ``dead_letter_reasons``: reason → count;
    ``attempts_by_outcome_and_state``: (attempt outcome, its delivery's state) → count;
    ``latencies``: OriginalEventTime → finished, in seconds, of every delivered one, sorted.
    """

    states: dict[str, int]
    final_by_attempts: dict[tuple[int, str], int]
    dead_letter_reasons: dict[str, int]
    attempts_by_outcome_and_state: dict[tuple[str, str], int]
    latencies: list[float]


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """``count`` things of ``kind`` fell in time bucket ``bucket`` (0 from the run's start)."""

    bucket: int
    kind: str
    count: int


def count_events(conn: Store) -> int:
    """How many events the store holds (every account)."""
    return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def delivery_counts(conn: Store, subscription_id: int | None) -> DeliveryCounts:
    """The counts of every delivery, or of ``subscription_id``'s alone."""
    where = "" if subscription_id is None else f" AND d.subscription_id = {int(subscription_id)}"
    states = dict(
        conn.execute(
            f"SELECT state, count(*) FROM deliveries d WHERE 1 = 1{where} GROUP BY state"  # noqa: S608
        ).fetchall()
    )
    final = {
        (int(attempts), str(state)): int(count)
        for attempts, state, count in conn.execute(
            "SELECT attempts, state, count(*) FROM deliveries d"  # noqa: S608
            f" WHERE state IN ('delivered', 'dead_lettered'){where} GROUP BY attempts, state"
        )
    }
    reasons = dict(
        conn.execute(
            "SELECT dead_letter_reason, count(*) FROM deliveries d"  # noqa: S608
            f" WHERE state = 'dead_lettered'{where} GROUP BY dead_letter_reason"
            " ORDER BY dead_letter_reason"
        ).fetchall()
    )
    outcomes = {
        (str(outcome), str(state)): int(count)
        for outcome, state, count in conn.execute(
            "SELECT a.outcome, d.state, count(*) FROM delivery_attempts a"  # noqa: S608
            f" JOIN deliveries d ON d.id = a.delivery_id WHERE 1 = 1{where}"
            " GROUP BY a.outcome, d.state"
        )
    }
    latencies = [
        row[0]
        for row in conn.execute(
            "SELECT d.finished_at - e.original_event_time FROM deliveries d"  # noqa: S608
            f" JOIN events e ON e.id = d.event_rowid WHERE d.state = 'delivered'{where}"
            " ORDER BY 1"
        )
    ]
    return DeliveryCounts(states, final, reasons, outcomes, latencies)


_BUCKET = "CAST((AT - ?) / ? AS INTEGER)"
# Each statement of ``timeline_counts`` with the column its bucket counts by.
_TIMELINE = (
    (
        "original_event_time",
        "SELECT CAST((AT - ?) / ? AS INTEGER) AS b, 'events', count(*) FROM events GROUP BY b",
    ),
    (
        "started_at",
        "SELECT CAST((AT - ?) / ? AS INTEGER) AS b, outcome, count(*) FROM delivery_attempts"
        " WHERE outcome IN ('failed', 'timed_out', 'skipped') GROUP BY b, outcome",
    ),
    (
        "finished_at",
        "SELECT CAST((AT - ?) / ? AS INTEGER) AS b, state, count(*) FROM deliveries"
        " WHERE state IN ('delivered', 'dead_lettered') GROUP BY b, state",
    ),
)


def timeline_counts(conn: Store, start: float, seconds: float) -> Iterator[TimelineRow]:
    """What happened in each bucket of ``seconds`` from ``start``: events by their
    OriginalEventTime (kind ``events``); attempts that did not deliver, by when they were sent
    (kind: their outcome); deliveries by when they became final (kind: ``delivered`` or
    ``dead_lettered``; a delivered one by its first 200, so a duplicate 200 is not counted)."""
    # The bucket is the quotient truncated toward zero: SQLite's CAST truncates, PostgreSQL's
    # rounds, so there it truncates first.
    bucket = "CAST(trunc((AT - ?) / ?) AS INTEGER)" if is_postgres(conn) else _BUCKET
    statements = [sql.replace(_BUCKET, bucket.replace("AT", at)) for at, sql in _TIMELINE]
    for sql in statements:
        for bucket, kind, count in conn.execute(sql, (start, seconds)):
            yield TimelineRow(int(bucket), str(kind), int(count))


def next_due_at(conn: Store) -> float | None:
    """When the first queued delivery comes due (Unix seconds), None with none queued."""
    row = conn.execute(
        portable(
            conn,
            "SELECT min(next_attempt_at) FROM deliveries INDEXED BY deliveries_due"
            " WHERE state = 'queued'",
        )
    ).fetchone()
    return None if row[0] is None else float(row[0])


def has_unfinished(conn: Store) -> bool:
    """Whether a delivery is still queued or in flight."""
    row = conn.execute(
        portable(
            conn,
            "SELECT EXISTS (SELECT 1 FROM deliveries INDEXED BY deliveries_due"
            " WHERE state = 'queued')"
            " OR EXISTS (SELECT 1 FROM deliveries INDEXED BY deliveries_leases"
            " WHERE state = 'in_flight')",
        )
    ).fetchone()
    return bool(row[0])


def last_finished_at(conn: Store) -> float | None:
    """When the last delivery became final (Unix seconds), None with none final."""
    row = conn.execute("SELECT max(finished_at) FROM deliveries").fetchone()
    return None if row[0] is None else float(row[0])
