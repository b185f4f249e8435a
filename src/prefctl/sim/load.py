"""The load of a scenario: when each event happens, of which type, and where it goes.

``generate_arrivals`` draws the arrival times (Poisson, or evenly spaced) at the rate of
``[load]`` and its windows, and an event type from ``event_mix`` for each. ``LoadWriter`` stores
them through the real store, in batches written ahead of the clock: every event
(``store.events.insert_events``) and one delivery per subscription that selects its type
(``store.deliveries.add_deliveries``), queued at the event's own time. A delivery due in the future
is invisible to the dispatcher until then, so each event reaches the queue exactly when it happens
(EventTime = OriginalEventTime, as in the emulator, which writes both in one transaction).
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise

from prefctl.sim.scenario import LoadModel
from prefctl.store import Store
from prefctl.store.db import transaction
from prefctl.store.deliveries import NewDelivery, add_deliveries
from prefctl.store.events import NewEvent, insert_events
from prefctl.webhooks.catalog import entity_of
from prefctl.webhooks.envelope import new_event_id

__all__ = ["Arrival", "LoadWriter", "generate_arrivals"]

# Profiles the simulated changes happen to (ProfileIds from 1001, as in the emulator).
_PROFILES = 10_000
_FIRST_PROFILE_ID = 1001


@dataclass(frozen=True, slots=True)
class Arrival:
    """One event: ``at`` is seconds after the start of the run."""

    at: float
    event_type: str


def generate_arrivals(load: LoadModel, rng: random.Random) -> list[Arrival]:
    """Every event of the load, in time order."""
    types = [event_type for event_type, _ in load.event_mix]
    cumulative = list(accumulate(weight for _, weight in load.event_mix))
    total, last = cumulative[-1], len(types) - 1
    arrivals: list[Arrival] = []
    for begin, end, per_minute in _segments(load):
        if per_minute <= 0:
            continue
        rate = per_minute / 60.0  # events per second
        poisson = load.arrival == "poisson"
        # Poisson arrivals are memoryless, so each segment starts afresh at its beginning. Even
        # ones sit in the middle of each 1/rate slot: rate × length of them, none on an edge.
        at = begin if poisson else begin - 0.5 / rate
        while True:
            at += rng.expovariate(rate) if poisson else 1.0 / rate
            if at >= end:
                break
            index = bisect_right(cumulative, rng.random() * total)
            arrivals.append(Arrival(at, types[min(index, last)]))
    return arrivals


def _segments(load: LoadModel) -> list[tuple[float, float, float]]:
    """(start, end, events per minute) of each stretch of constant rate, in seconds."""
    edges = {0.0, load.duration_minutes}
    for window in load.windows:
        edges.update((window.start_minute, window.end_minute))
    ordered = sorted(edge for edge in edges if edge <= load.duration_minutes)
    return [(begin * 60.0, end * 60.0, load.rate_at(begin)) for begin, end in pairwise(ordered)]


class LoadWriter:
    """Writes the events of a run, in time order, a stretch ahead of the clock.

    ``write_until(t)`` stores every event that happens before ``t`` (Unix seconds), and its
    deliveries to the subscription ids ``targets[event_type]``, each queued at its event's time,
    in one transaction. The simulator keeps the writing ahead of the engine, so each delivery is
    in the queue before it comes due, while the queue holds minutes of future deliveries rather
    than a whole day (claims are faster on a short queue).
    """

    def __init__(
        self,
        conn: Store,
        account: str,
        arrivals: Sequence[Arrival],
        targets: dict[str, list[int]],
        *,
        start: float,
        rng: random.Random,
    ) -> None:
        self.conn = conn
        self.account = account
        self.arrivals = arrivals
        self.targets = targets
        self.start = start
        self.rng = rng
        self.written = 0  # arrivals written so far
        self.deliveries = 0

    @property
    def next_at(self) -> float | None:
        """When the first event not yet written happens (Unix seconds), or None."""
        if self.written >= len(self.arrivals):
            return None
        return self.start + self.arrivals[self.written].at

    def write_until(self, until: float) -> None:
        end = bisect_left(self.arrivals, until - self.start, lo=self.written, key=_at)
        if end <= self.written:
            return
        batch = self.arrivals[self.written : end]
        events = [_event(arrival, self.start, self.rng) for arrival in batch]
        with transaction(self.conn):
            rowids = insert_events(self.conn, self.account, events)
            new = [
                NewDelivery(rowid, sid)
                for arrival, rowid in zip(batch, rowids, strict=True)
                for sid in self.targets.get(arrival.event_type, ())
            ]
            # now=None: each delivery is queued at its own event's time.
            self.deliveries += add_deliveries(self.conn, new, now=None)
        self.written = end


def _at(arrival: Arrival) -> float:
    return arrival.at


def _event(arrival: Arrival, start: float, rng: random.Random) -> NewEvent:
    profile_id = _FIRST_PROFILE_ID + rng.randrange(_PROFILES)
    return NewEvent(
        event_id=new_event_id(rng),
        event_type=arrival.event_type,
        entity=entity_of(arrival.event_type),
        profile_id=profile_id,
        original_event_time=start + arrival.at,
        data={"ProfileId": profile_id, "Simulated": True},
    )
