"""Run a scenario: the real dispatcher engine on a FakeClock, an in-memory store, a model endpoint.

``simulate(scenario)`` builds the store (``sim/setup.py``: real migrations, real store functions;
the load written a stretch ahead of the clock, each delivery due at its event's time), then drives
``dispatcher.engine.Engine`` cycle by cycle, moving a ``FakeClock`` between cycles, until every
delivery is delivered or dead-lettered and no alert incident is left open. The engine's transport
is the dispatcher's own ``FunctionTransport`` answered by ``sim.model.ModelEndpoints``; alerts go
through the real ``AlertMonitor`` with the emails kept in memory. Returns the report
(``sim/report.py``).

The clock moves exactly as the engine's own ``run`` loop would move it on a FakeClock (cycles
Duration apart, plus the moments an answer or a response timeout is due), with one saving: when the
engine has nothing in flight, the cycles before the next delivery comes due (or the next alert
rule acts) would claim nothing, so the clock jumps to the first cycle of the same grid at which
something is due. ``skip_idle_cycles=False`` runs every cycle instead; the report is the same but
for ``run.cycles`` (a test holds this).

Randomness: three streams seeded from the scenario's seed, for the load, the endpoint model and
the engine's backoff jitter, so the same scenario and seed give the same report.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from typing import Any

from prefctl.clock import FakeClock
from prefctl.dispatcher.engine import Engine
from prefctl.dispatcher.transport import FunctionTransport
from prefctl.sim.model import EndpointBehaviour, ModelEndpoints
from prefctl.sim.observers import AlertFeed, ProbationWatch
from prefctl.sim.report import build_report
from prefctl.sim.scenario import Scenario
from prefctl.sim.setup import ACCOUNT, SimulatedService, build_store
from prefctl.store import Store
from prefctl.store.delivery_stats import has_unfinished, last_finished_at, next_due_at
from prefctl.store.timestamps import epoch

__all__ = ["simulate"]

Progress = Callable[[float], None]
# How far ahead of the clock events are written: more than the longest Duration (300 s).
_LOOKAHEAD_SECONDS = 600.0


def simulate(
    scenario: Scenario,
    *,
    progress: Progress | None = None,
    skip_idle_cycles: bool = True,
) -> dict[str, Any]:
    """Run ``scenario`` to the end and return its report. ``progress`` is called with the
    virtual minutes elapsed as the run goes."""
    service = build_store(scenario)
    try:
        return asyncio.run(_run(scenario, service, progress, skip_idle_cycles))
    finally:
        service.conn.close()


async def _run(
    scenario: Scenario,
    service: SimulatedService,
    progress: Progress | None,
    skip_idle_cycles: bool,
) -> dict[str, Any]:
    conn, start = service.conn, service.start
    clock = FakeClock(scenario.start)
    behaviours = {
        url: EndpointBehaviour(model.endpoint)
        for (_, url), model in zip(
            service.subscriptions.values(), scenario.subscriptions, strict=True
        )
    }
    endpoints = ModelEndpoints(
        behaviours, clock, scenario.start, random.Random(f"{scenario.seed}:endpoint")
    )
    # The model answers from its distributions, reading neither body nor signature: not built.
    transport = FunctionTransport(endpoints, payloads=False)
    alerts = AlertFeed(conn, scenario.settings["AlertFrequencyMax"])
    probation = ProbationWatch(conn, {url: sid for sid, (_, url) in service.subscriptions.items()})
    engine = Engine(
        conn,
        transport=transport,
        clock=clock,
        rng=random.Random(f"{scenario.seed}:engine"),
        account=ACCOUNT,
        observers=(alerts, probation),
        static_config=True,  # the store is this run's own, in memory: nothing else changes it
    )
    duration = float(scenario.settings["Duration"])
    grid = start  # the time of the engine's last account cycle: its cycles are Duration apart
    last_final: float | None = None  # when the last delivery became final
    shown = -1
    await engine.start()
    try:
        while True:
            # Events are written a stretch ahead, so every delivery is queued before it is due.
            if (service.load.next_at or math.inf) < epoch(clock.now()) + _LOOKAHEAD_SECONDS:
                service.load.write_until(epoch(clock.now()) + 2 * _LOOKAHEAD_SECONDS)
            report = await engine.run_cycle()
            transport.sent.clear()  # the model keeps no history: a day is millions of requests
            now = report.at
            if report.accounts:
                grid = now
            if progress is not None and int((now - start) // 60) != shown:
                shown = int((now - start) // 60)
                progress(shown)
            idle = engine.idle
            written = service.load.next_at is None
            if last_final is None and idle and written and not has_unfinished(conn):
                finished = last_finished_at(conn)
                last_final = start if finished is None else finished
            if last_final is not None and not alerts.live:
                break
            if idle and skip_idle_cycles:
                wake = _idle_wake(conn, alerts, service.load.next_at, grid, duration)
            else:
                wake = engine.next_wake()
            _move_clock(clock, now, max(wake, now))
    finally:
        await engine.close()
    end = start if last_final is None else last_final
    names = {sid: name for sid, (name, _) in service.subscriptions.items()}
    return build_report(
        conn,
        scenario,
        start=start,
        end=end,
        subscriptions=names,
        probation=probation.periods,
        cycles=engine.totals.cycles,
    )


def _idle_wake(
    conn: Store,
    alerts: AlertFeed,
    next_event: float | None,
    grid: float,
    duration: float,
) -> float:
    """With nothing in flight, only a delivery coming due (of an event already written or
    still to come) or an alert rule can start work: the engine would meet it at the first cycle
    of its grid at or after that moment."""
    candidates = (next_due_at(conn), next_event, alerts.next_due())
    moments = [m for m in candidates if m is not None]
    if not moments:
        return grid + duration
    steps = max(math.ceil((min(moments) - grid) / duration - 1e-9), 1)
    return grid + steps * duration


def _move_clock(clock: FakeClock, now: float, wake: float) -> None:
    """Move the clock from ``now`` to ``wake`` or just after it. FakeClock rounds up to whole
    microseconds; the loop guards against the float rounding of datetime → epoch, so that the
    engine never finds nothing due and asks to wake at the same moment again."""
    clock.advance(wake - now)
    while epoch(clock.now()) < wake:
        clock.advance(0.000001)
