"""What ``prefctl demo`` reports: its options, steps, checks and the final report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from prefctl.dispatcher.rule_time import check_time_scale

__all__ = [
    "DEFAULT_TIME_SCALE",
    "EXPECTED_OUTCOMES",
    "Check",
    "DemoOptions",
    "DemoReport",
    "DemoStep",
    "OnStep",
    "StepKind",
]

# Measured on a 2-core machine: 60 runs the outage's 70 s of backoff in about 1.2 s, and still
# leaves the receiver 0.5 s to answer (the 30 s response timeout, scaled) on a busy machine.
DEFAULT_TIME_SCALE = 60.0

# What must happen for the demo to succeed (exit 0), by check name.
EXPECTED_OUTCOMES: dict[str, str] = {
    "handshake": "the receiver answered the validation handshake",
    "verified": "the profile changes arrived at the receiver, signatures verified",
    "retried": "the deliveries answered 503 were retried with backoff, then delivered",
    "dead_lettered": "the 413 dead-lettered its event at once (PayloadTooLarge)",
    "alerted": "the dead letter caused an alert email",
    "nothing_lost": "every event ended delivered or dead-lettered",
}


class StepKind(StrEnum):
    """What a ``DemoStep`` reports."""

    PHASE = "phase"  # a new act of the demo: its title
    ACTION = "action"  # something the demo did: a REST request, a support-team operation
    ARRIVAL = "arrival"  # a request the receiver got: its line as ``prefctl receive`` shows it
    WAIT = "wait"  # a wait begins; it lasts until the next step
    INFO = "info"  # a detail worth reading
    OK = "ok"  # an expected outcome happened
    FAILED = "failed"  # an expected outcome did not happen


@dataclass(frozen=True)
class DemoStep:
    """One line of progress; ``data`` carries the record behind it (a verdict, a request)."""

    kind: StepKind
    text: str
    data: Mapping[str, Any] = field(default_factory=dict)


OnStep = Callable[[DemoStep], None]


@dataclass(frozen=True)
class DemoOptions:
    """How to run the demo. ``seed`` repeats the emulator's random choices (backoff jitter,
    handshake codes); ``keep`` keeps the temp dir; ``parent_dir`` is where it is made (None: the
    system's temp dir)."""

    time_scale: float = DEFAULT_TIME_SCALE
    seed: int | None = None
    keep: bool = False
    parent_dir: Path | None = None

    def validate(self) -> None:
        check_time_scale(
            self.time_scale,
            hint=f"the default, {DEFAULT_TIME_SCALE:g}, runs a minute of delivery rules in a second",
        )


@dataclass(frozen=True)
class Check:
    """One expected outcome (``EXPECTED_OUTCOMES``) and whether it happened."""

    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "expected": EXPECTED_OUTCOMES.get(self.name, ""),
            "ok": self.ok,
            "detail": self.detail,
        }


@dataclass
class DemoReport:
    """What the demo did and saw. ``workdir`` is set only when it was kept."""

    time_scale: float
    seed: int | None = None
    emulator_url: str = ""
    receiver_url: str = ""
    workdir: str | None = None
    subscription: dict[str, Any] = field(default_factory=dict)
    events_produced: int = 0  # by the profile changes, every type (GET /events)
    events_for_subscription: int = 0  # of those, queued for the demo's subscription
    delivered: int = 0
    retries: int = 0  # attempts after the first, over every delivery
    backoff_seconds: list[float] = field(default_factory=list)  # rule time between attempts
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    receiver: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    wall_seconds: float = 0.0

    def check(self, name: str, ok: bool, detail: str) -> Check:
        """Record whether the expected outcome ``name`` happened."""
        result = Check(name, ok, detail)
        self.checks.append(result)
        return result

    def settle(self, reason: str) -> None:
        """Record the expected outcomes the run never reached as not having happened."""
        done = {c.name for c in self.checks}
        for name in EXPECTED_OUTCOMES:
            if name not in done:
                self.check(name, False, f"not reached: {reason}")

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    @property
    def ok(self) -> bool:
        """True when every expected outcome was checked and happened."""
        done = {c.name for c in self.checks if c.ok}
        return not self.failed and done >= EXPECTED_OUTCOMES.keys()

    @property
    def dead_letter_reasons(self) -> dict[str, int]:
        return dict(sorted(Counter(d["reason"] for d in self.dead_letters).items()))

    def to_dict(self) -> dict[str, Any]:
        """The report as ``prefctl demo -o json`` prints it (snake_case keys)."""
        return {
            "ok": self.ok,
            "failed": [c.name for c in self.failed],
            "wall_seconds": self.wall_seconds,
            "time_scale": self.time_scale,
            "seed": self.seed,
            "emulator_url": self.emulator_url,
            "receiver_url": self.receiver_url,
            "workdir": self.workdir,
            "subscription": self.subscription,
            "events_produced": self.events_produced,
            "events_for_subscription": self.events_for_subscription,
            "delivered": self.delivered,
            "retries": self.retries,
            "backoff_seconds": self.backoff_seconds,
            "dead_lettered": len(self.dead_letters),
            "dead_letter_reasons": self.dead_letter_reasons,
            "dead_letters": self.dead_letters,
            "alerts": self.alerts,
            "receiver": self.receiver,
            "checks": [c.to_dict() for c in self.checks],
        }
