"""What an engine reports: ``EngineTotals`` since it started, and ``CycleReport`` per cycle.

``prefctl dispatcher run`` prints the totals as its summary (``as_dict``, snake_case keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prefctl.dispatcher.observer import Recorded

__all__ = ["CycleReport", "EngineTotals"]


@dataclass
class EngineTotals:
    """What an engine did since it started (attempt outcomes as recorded)."""

    cycles: int = 0
    claimed: int = 0
    sent: int = 0
    delivered: int = 0
    late_delivered: int = 0
    failed: int = 0
    timed_out: int = 0
    skipped: int = 0
    dead_lettered: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "cycles": self.cycles,
            "claimed": self.claimed,
            "sent": self.sent,
            "delivered": self.delivered,
            "late_delivered": self.late_delivered,
            "failed": self.failed,
            "timed_out": self.timed_out,
            "skipped": self.skipped,
            "dead_lettered": sum(self.dead_lettered.values()),
            "dead_letter_reasons": dict(sorted(self.dead_lettered.items())),
        }

    def count(self, recorded: Sequence[Recorded]) -> None:
        """Add a cycle's recorded results (dead letters only when the store applied them)."""
        for r in recorded:
            outcome = None if r.attempt is None else r.attempt.outcome
            if outcome == "delivered":
                self.delivered += 1
            elif outcome == "late_delivered":
                self.late_delivered += 1
            elif outcome == "failed":
                self.failed += 1
            elif outcome == "timed_out":
                self.timed_out += 1
            elif outcome == "skipped":
                self.skipped += 1
            if r.applied and r.state == "dead_lettered" and r.dead_letter_reason:
                reason = r.dead_letter_reason
                self.dead_lettered[reason] = self.dead_lettered.get(reason, 0) + 1


@dataclass(frozen=True)
class CycleReport:
    """One call of ``run_cycle``: ``accounts`` that ran a cycle, deliveries claimed and sent,
    results recorded."""

    at: float
    accounts: int
    claimed: int
    sent: int
    recorded: int
