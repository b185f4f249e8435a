"""The model endpoint: what a subscription's Url answers to an attempt at a virtual time.

``EndpointBehaviour.reply(minute, rng)`` draws one answer from the scenario's endpoint model at
``minute`` (minutes after the start of the run), as a ``dispatcher.transport.Reply``:

1. An outage covering the minute answers its status (an HTTP status, ``timeout`` or
   ``connection_error``) to every attempt.
2. Otherwise the status comes from the ``status_mix`` of the override window covering the minute,
   else from the endpoint's ``status_mix``.
3. The latency comes from the override window's ``latency_ms``, else a slow period's, else the
   endpoint's. A connection error is refused at once; ``timeout`` never answers.

The model only says what the endpoint does and when; the engine decides what it means (an answer
after 30 s is a timeout, a 200 within the late-success window still counts), exactly as with
real HTTP. ``ModelEndpoints`` is the ``answer`` function of the dispatcher's
``FunctionTransport``: it finds the endpoint by the request's Url and reads the virtual time of
the attempt from the engine's clock.

Draws come from the one ``random.Random`` the caller passes, in the order attempts are made, so a
run is reproducible from its seed.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from datetime import datetime
from itertools import accumulate

from prefctl.clock import Clock
from prefctl.dispatcher.transport import Reply, Request
from prefctl.sim.scenario import EndpointModel, Latency, StatusKey, Window

__all__ = ["CONNECTION_REFUSED", "EndpointBehaviour", "ModelEndpoints", "sample_latency_ms"]

# The standard normal quantile of 0.99: p99 = p50 × e^(σ·z99) for a lognormal.
_Z99 = 2.3263478740408408
_REFUSED_SECONDS = 0.001
CONNECTION_REFUSED = "connection refused (simulated)"


def sample_latency_ms(latency: Latency, rng: random.Random) -> float:
    if latency.distribution == "fixed":
        return latency.low_ms
    if latency.distribution == "uniform":
        return rng.uniform(latency.low_ms, latency.high_ms)
    mu = math.log(latency.low_ms)
    sigma = (math.log(latency.high_ms) - mu) / _Z99
    return rng.lognormvariate(mu, sigma)


class _Mix:
    """A status mix ready for drawing: cumulative weights and a bisect."""

    def __init__(self, mix: tuple[tuple[StatusKey, float], ...]) -> None:
        self.keys = [key for key, _ in mix]
        self.cumulative = list(accumulate(weight for _, weight in mix))
        self.single = self.keys[0] if len(self.keys) == 1 else None

    def draw(self, rng: random.Random) -> StatusKey:
        if self.single is not None:
            return self.single
        point = rng.random() * self.cumulative[-1]
        return self.keys[min(bisect_right(self.cumulative, point), len(self.keys) - 1)]


class EndpointBehaviour:
    """One endpoint model, prepared for drawing answers quickly."""

    def __init__(self, model: EndpointModel) -> None:
        self.model = model
        self._mix = _Mix(model.status_mix)
        self._outages = [(w, _Mix(w.status_mix or ((503, 1.0),))) for w in model.outages]
        self._windows = [
            (w, None if w.status_mix is None else _Mix(w.status_mix)) for w in model.windows
        ]

    def reply(self, minute: float, rng: random.Random) -> Reply:
        """Draw the answer to an attempt made ``minute`` minutes into the run."""
        status: StatusKey | None = None
        for outage, mix in self._outages:
            if outage.covers(minute):
                status = mix.draw(rng)
                break
        window = _covering(self._windows, minute)
        if status is None:
            mix = window[1] if window is not None and window[1] is not None else self._mix
            status = mix.draw(rng)
        if status == "connection_error":
            return Reply(status=None, error=CONNECTION_REFUSED, elapsed=_REFUSED_SECONDS)
        if status == "timeout":
            return Reply(status=None, error=None, elapsed=math.inf)
        assert isinstance(status, int)
        latency = self._latency(minute, None if window is None else window[0])
        return Reply(status=status, elapsed=sample_latency_ms(latency, rng) / 1000.0)

    def _latency(self, minute: float, window: Window | None) -> Latency:
        if window is not None and window.latency is not None:
            return window.latency
        for slow in self.model.slow_periods:
            if slow.covers(minute) and slow.latency is not None:
                return slow.latency
        return self.model.latency


def _covering(
    windows: list[tuple[Window, _Mix | None]], minute: float
) -> tuple[Window, _Mix | None] | None:
    for entry in windows:
        if entry[0].covers(minute):
            return entry
    return None


class ModelEndpoints:
    """The answer function of a ``FunctionTransport``: each Url's ``EndpointBehaviour``, asked
    at the virtual time of the attempt (``clock``'s now, in minutes after ``start``)."""

    def __init__(
        self,
        behaviours: dict[str, EndpointBehaviour],
        clock: Clock,
        start: datetime,
        rng: random.Random,
    ) -> None:
        self.behaviours = behaviours
        self.clock = clock
        self.start = start
        self.rng = rng

    def __call__(self, request: Request) -> Reply:
        minute = (self.clock.now() - self.start).total_seconds() / 60.0
        behaviour = self.behaviours.get(request.url)
        if behaviour is None:  # not one of the scenario's Urls: nothing listens there
            return Reply(status=None, error=CONNECTION_REFUSED, elapsed=_REFUSED_SECONDS)
        return behaviour.reply(minute, self.rng)
