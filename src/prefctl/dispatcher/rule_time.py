"""Delivery-rule time under ``--time-scale`` (docs/architecture.md).

The emulator's ``--time-scale X`` divides every delivery-rule duration by X: backoff, TTL, the 30 s
response timeout, the late-success window, probation, Duration. The rules themselves
(``dispatcher/policy.py``) know nothing of it: the engine hands them *rule time*, a clock that runs
X times faster than the real one from a fixed origin, and turns the times they return back into
real ones. Wire timestamps and the store keep real time, so signatures verify.

    >>> rules = RuleTime(origin=1_767_225_600.0, scale=60)
    >>> rules.real(rules.rule(1_767_225_601.0) + timedelta(minutes=1))   # a minute of rules
    1767225602.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from prefctl.errors import UsageError

__all__ = ["MAX_TIME_SCALE", "MIN_TIME_SCALE", "RuleTime", "check_time_scale"]

# --time-scale bounds. Above 10,000 the 30 s response timeout is under 3 ms, less than a loaded
# machine's scheduling delay: every attempt would time out. Below 0.001 a 1 s cycle lasts over
# a quarter of an hour: nothing would seem to happen. Either way the run would be silently useless.
MIN_TIME_SCALE = 0.001
MAX_TIME_SCALE = 10_000.0


def check_time_scale(value: float, *, hint: str | None = None) -> None:
    """UsageError (exit 2) unless ``value`` is a usable ``--time-scale``."""
    if not (math.isfinite(value) and MIN_TIME_SCALE <= value <= MAX_TIME_SCALE):
        raise UsageError(
            f"--time-scale must be a number from {MIN_TIME_SCALE:g} to {MAX_TIME_SCALE:g},"
            f" not {value:g}",
            hint=hint or "e.g. --time-scale 60 runs an hour of delivery rules in a minute",
        )


@dataclass(frozen=True)
class RuleTime:
    """Real Unix seconds ↔ rule-time datetimes, with rule time ``scale`` times faster."""

    origin: float
    scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError("the time scale must be greater than 0")

    def rule(self, real: float) -> datetime:
        """The rule-time moment of a real time."""
        return datetime.fromtimestamp(self.origin + (real - self.origin) * self.scale, UTC)

    def real(self, rule: datetime) -> float:
        """The real time (Unix seconds) of a rule-time moment."""
        return self.origin + (rule.timestamp() - self.origin) / self.scale

    def seconds(self, rule_seconds: float) -> float:
        """A rule duration in real seconds."""
        return rule_seconds / self.scale
