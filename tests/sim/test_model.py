"""The model endpoint: outages win, windows override, latency follows its distribution."""

from __future__ import annotations

import math
import random
import statistics
from datetime import UTC, datetime

from prefctl.clock import FakeClock
from prefctl.dispatcher.transport import Request
from prefctl.sim.model import EndpointBehaviour, ModelEndpoints
from prefctl.sim.scenario import parse_scenario

BASE = """
[load]
events_per_minute = 1
duration_minutes = 120
[endpoint]
status_mix = { 200 = 1 }
latency_ms = { distribution = "lognormal", p50 = 100, p99 = 1000 }
[[endpoint.outages]]
start_minute = 10
end_minute = 20
status = 503
[[endpoint.outages]]
start_minute = 30
end_minute = 40
status = "timeout"
[[endpoint.outages]]
start_minute = 50
end_minute = 60
status = "connection_error"
[[endpoint.windows]]
start_minute = 15
end_minute = 70
status_mix = { 429 = 1 }
[[endpoint.slow_periods]]
start_minute = 80
end_minute = 90
latency_ms = 5000
"""


def _behaviour() -> EndpointBehaviour:
    return EndpointBehaviour(parse_scenario(BASE).subscriptions[0].endpoint)


def test_model_outages_win_over_windows() -> None:
    model, rng = _behaviour(), random.Random(1)

    assert model.reply(12, rng).status == 503
    assert model.reply(17, rng).status == 503  # outage and window overlap: the outage answers
    assert model.reply(25, rng).status == 429  # the window alone


def test_model_timeout_never_answers_and_connection_error_is_immediate() -> None:
    model, rng = _behaviour(), random.Random(1)

    silent = model.reply(35, rng)
    refused = model.reply(55, rng)

    assert silent.status is None
    assert math.isinf(silent.elapsed)
    assert refused.status is None
    assert refused.error is not None
    assert refused.elapsed < 0.01


def test_model_lognormal_latency_has_the_asked_median_and_p99() -> None:
    model, rng = _behaviour(), random.Random(7)

    samples = sorted(model.reply(100, rng).elapsed * 1000 for _ in range(20_000))

    assert 90 < statistics.median(samples) < 110
    assert 850 < samples[int(0.99 * len(samples))] < 1150


def test_model_slow_period_sets_the_latency() -> None:
    model, rng = _behaviour(), random.Random(1)

    assert model.reply(85, rng).elapsed == 5.0
    assert model.reply(95, rng).elapsed < 5.0


def test_model_status_mix_draws_in_proportion() -> None:
    text = BASE.replace("status_mix = { 200 = 1 }", "status_mix = { 200 = 3, 500 = 1 }")
    model = EndpointBehaviour(parse_scenario(text).subscriptions[0].endpoint)
    rng = random.Random(3)

    statuses = [model.reply(100, rng).status for _ in range(8_000)]

    assert 0.22 < statuses.count(500) / len(statuses) < 0.28


def test_model_endpoints_answer_at_the_virtual_time_of_the_attempt() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    clock = FakeClock(start)
    url = "https://a.sim.invalid/webhooks"
    endpoints = ModelEndpoints({url: _behaviour()}, clock, start, random.Random(1))

    def ask(target: str = url) -> int | None:
        return endpoints(Request(1, target, b"{}", None, 30.0, 180.0)).status

    assert ask() == 200
    clock.advance(12 * 60)
    assert ask() == 503
    assert ask("https://unknown.sim.invalid/") is None
