"""Faults on purpose: make the receiver fail so that retries, dead letters and alerts can be seen.

A ``FaultPlan`` is an ordered list of ``FaultStep``s, each applied to the next ``count`` events,
then what happens once the steps run out (``after``: answer normally, repeat the steps, or one
step for ever). The ``prefctl receive`` flags build simple plans; ``--fault-plan FILE`` reads one
from TOML (format in docs/receiver.md)::

    steps = [
      { count = 3, status = 503 },    # the next 3 events get 503
      { count = 1, delay = 35 },      # the next one is answered after 35 s (past the 30 s budget)
      { count = 2, status = 200 },    # 2 events get 200 without being forwarded
      { close = true },               # one connection is reset, with no answer at all
    ]
    after = "normal"                  # or "repeat", or a step: { status = 500 }

Faults apply to authentic events only: handshakes, rejected signatures and malformed bodies are
answered as usual and do not advance the plan. ``FaultState`` walks a plan event by event with an
injected ``random.Random`` (for ``--fail-rate``), so a seeded run repeats itself.
"""

from __future__ import annotations

import dataclasses
import random
import tomllib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefctl.errors import UsageError
from prefctl.private_files import os_reason

__all__ = ["FaultAction", "FaultPlan", "FaultState", "FaultStep", "load_plan", "plan_from_options"]

_STEP_KEYS = ("count", "status", "delay", "close")
MAX_DELAY_SECONDS = 3600.0


@dataclass(frozen=True)
class FaultStep:
    """Answer the next ``count`` events with ``status`` after ``delay`` s, or reset (``close``).

    A step with neither ``status`` nor ``close`` answers normally (after its delay).
    """

    count: int = 1
    status: int | None = None
    delay: float = 0.0
    close: bool = False
    name: str = "step"


@dataclass(frozen=True)
class FaultPlan:
    """The steps, what follows them, and the faults that apply to every event."""

    steps: tuple[FaultStep, ...] = ()
    after: FaultStep | None = None  # None: answer normally once the steps ran out
    repeat: bool = False  # start over when the steps run out (``after`` is then unused)
    fail_rate: float = 0.0  # share of otherwise normal events answered ``fail_status``
    fail_status: int = 500
    delay: float = 0.0  # added to every event's answer

    def describe(self) -> str:
        """A short summary for the ready line."""
        parts = [_describe(step) for step in self.steps]
        if self.repeat:
            parts.append("repeat")
        elif self.after is not None:
            parts.append(f"then {_describe(self.after, counted=False)}")
        if self.fail_rate:
            parts.append(f"fail-rate {self.fail_rate:g} → {self.fail_status}")
        if self.delay:
            parts.append(f"delay {self.delay:g}s")
        return ", ".join(parts) or "none"


def _describe(step: FaultStep, *, counted: bool = True) -> str:
    what = "reset" if step.close else str(step.status) if step.status is not None else "normal"
    if step.delay:
        what += f" after {step.delay:g}s"
    return f"{step.count}×{what}" if counted else what


@dataclass(frozen=True, slots=True)
class FaultAction:
    """What to do with one event: ``status`` None means answer normally (after ``delay``)."""

    status: int | None
    delay: float
    close: bool
    label: str


class FaultState:
    """Walks a plan event by event. Used from the event loop only (no locking).

    ``inject(step)`` adds a step at run time, ahead of what is left of the plan: the control the
    pytest plugin's ``fail_next`` uses (through ``RunningReceiver.inject_fault``).
    """

    def __init__(self, plan: FaultPlan, rng: random.Random) -> None:
        self.plan = plan
        self._rng = rng
        self._index = 0
        self._used = 0
        self._injected: deque[FaultStep] = deque()
        self._injected_used = 0

    def inject(self, step: FaultStep) -> None:
        """Apply ``step`` to the next ``step.count`` events, before the rest of the plan."""
        self._injected.append(step)

    def describe(self) -> str:
        """What is left of the plan, as ``FaultPlan.describe`` words it (``none`` when nothing)."""
        plan = self.plan
        steps = list(plan.steps[self._index :])
        if steps and self._used:
            steps[0] = dataclasses.replace(steps[0], count=steps[0].count - self._used)
        left = dataclasses.replace(plan, steps=tuple(steps))
        if plan.repeat:
            left = dataclasses.replace(left, steps=plan.steps)
        return left.describe()

    def next(self) -> FaultAction | None:
        """The fault for the next event, or None when it is to be answered normally."""
        plan = self.plan
        step: FaultStep | None = None
        label = ""
        if self._injected:
            step = self._injected[0]
            self._injected_used += 1
            label = f"{step.name} {self._injected_used}/{step.count}"
            if self._injected_used >= step.count:
                self._injected.popleft()
                self._injected_used = 0
        elif self._index < len(plan.steps):
            step = plan.steps[self._index]
            self._used += 1
            label = f"{step.name} {self._used}/{step.count}"
            if self._used >= step.count:
                self._index, self._used = self._index + 1, 0
                if plan.repeat and self._index == len(plan.steps):
                    self._index = 0
        elif plan.after is not None:
            step = plan.after
            label = step.name
        status, delay, close = (
            (step.status, step.delay, step.close) if step is not None else (None, 0.0, False)
        )
        if status is None and not close and plan.fail_rate and self._rng.random() < plan.fail_rate:
            status, label = plan.fail_status, "fail-rate"
        delay += plan.delay
        if status is None and not close and not delay:
            return None
        if delay and not label:
            label = "delay"
        return FaultAction(status=status, delay=delay, close=close, label=label)


def _status(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 200 <= value <= 599:
        raise UsageError(f"{where}: status must be an HTTP status from 200 to 599, not {value!r}")
    return value


def _delay(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{where}: delay must be a number of seconds, not {value!r}")
    if not 0 <= value <= MAX_DELAY_SECONDS:
        raise UsageError(f"{where}: delay must be between 0 and {MAX_DELAY_SECONDS:g} s")
    return float(value)


def _step(table: Any, where: str, *, name: str, counted: bool = True) -> FaultStep:
    if not isinstance(table, dict):
        raise UsageError(f"{where}: a step must be a table like {{ count = 3, status = 503 }}")
    unknown = [key for key in table if key not in _STEP_KEYS or (key == "count" and not counted)]
    if unknown:
        known = ", ".join(k for k in _STEP_KEYS if counted or k != "count")
        raise UsageError(f"{where}: unknown key '{unknown[0]}' (known: {known})")
    count = table.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise UsageError(f"{where}: count must be a whole number of events ≥ 1, not {count!r}")
    close = table.get("close", False)
    if not isinstance(close, bool):
        raise UsageError(f"{where}: close must be true or false")
    status = _status(table["status"], where) if "status" in table else None
    if close and status is not None:
        raise UsageError(f"{where}: close resets the connection, it cannot also answer a status")
    delay = _delay(table["delay"], where) if "delay" in table else 0.0
    return FaultStep(count=count, status=status, delay=delay, close=close, name=name)


def load_plan(path: Path) -> FaultPlan:
    """Read a ``--fault-plan`` TOML file; a bad step is a one-line UsageError naming it."""
    where = f"fault plan {path}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {where}: {os_reason(exc)}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where} is not valid TOML: {exc}") from None
    unknown = [key for key in data if key not in ("steps", "after")]
    if unknown:
        raise UsageError(f"{where}: unknown key '{unknown[0]}' (known: steps, after)")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise UsageError(f"{where}: needs a non-empty list 'steps'", hint="see docs/receiver.md")
    steps = tuple(
        _step(table, f"{where}: step {n}", name=f"step {n}")
        for n, table in enumerate(raw_steps, start=1)
    )
    after = data.get("after", "normal")
    if after == "normal":
        return FaultPlan(steps=steps)
    if after == "repeat":
        return FaultPlan(steps=steps, repeat=True)
    if isinstance(after, dict):
        return FaultPlan(
            steps=steps, after=_step(after, f"{where}: after", name="after", counted=False)
        )
    raise UsageError(f'{where}: after must be "normal", "repeat" or a step table')


def plan_from_options(
    *,
    respond: int | None = None,
    fail_first: int = 0,
    fail_status: int = 500,
    fail_rate: float = 0.0,
    delay: float = 0.0,
    plan_file: Path | None = None,
) -> FaultPlan | None:
    """The plan the fault flags of ``prefctl receive`` ask for, or None for no faults at all."""
    fail_status = _status(fail_status, "--fail-status")
    if not 0.0 <= fail_rate <= 1.0:
        raise UsageError(f"--fail-rate must be between 0 and 1, not {fail_rate:g}")
    if fail_first < 0:
        raise UsageError("--fail-first must be 0 or more")
    delay = _delay(delay, "--delay")
    if plan_file is not None:
        if respond is not None or fail_first:
            raise UsageError(
                "--fault-plan cannot be combined with --respond or --fail-first",
                hint="write those behaviours as steps of the plan",
            )
        plan = load_plan(plan_file)
    else:
        steps = (FaultStep(count=fail_first, status=fail_status, name="fail-first"),)
        after = None
        if respond is not None:
            after = FaultStep(status=_status(respond, "--respond"), name="respond")
        plan = FaultPlan(steps=steps if fail_first else (), after=after)
    plan = dataclasses.replace(plan, fail_rate=fail_rate, fail_status=fail_status, delay=delay)
    if not plan.steps and plan.after is None and not fail_rate and not delay:
        return None
    return plan
