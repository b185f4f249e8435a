"""Small scenarios for the simulator's tests (seconds of wall time each)."""

from __future__ import annotations

from typing import Any

from prefctl.sim.run import simulate
from prefctl.sim.scenario import parse_scenario


def run(text: str, **options: Any) -> dict[str, Any]:
    """Validate ``text`` as a scenario and simulate it."""
    return simulate(parse_scenario(text, source="test.toml"), **options)


OUTAGE = """
seed = 5
[load]
events_per_minute = 6
duration_minutes = 60
[endpoint]
status_mix = { 200 = 1 }
latency_ms = { distribution = "lognormal", p50 = 50, p99 = 400 }
[[endpoint.outages]]
start_minute = 15
end_minute = 30
status = "connection_error"
"""

ALWAYS_500 = """
seed = 1
[settings]
MaxDeliveryAttempts = 3
[load]
events_per_minute = 1
duration_minutes = 3
arrival = "even"
[endpoint]
status_mix = { 500 = 1 }
latency_ms = 20
"""

SHORT_TTL = """
seed = 1
[settings]
EventTimeToLiveMinutes = 1
[load]
events_per_minute = 1
duration_minutes = 3
arrival = "even"
[endpoint]
status_mix = { 503 = 1 }
latency_ms = 20
"""

REJECTING = """
seed = 9
[settings]
AlertThresholdMin = 2
[load]
events_per_minute = 4
duration_minutes = 20
[endpoint]
status_mix = { 200 = 2, 400 = 1, 413 = 1 }
latency_ms = 30
"""

SLOW = """
seed = 4
[settings]
Duration = 2
[load]
events_per_minute = 3
duration_minutes = 20
[endpoint]
status_mix = { 200 = 0.9, 503 = 0.1 }
latency_ms = 60
[[endpoint.slow_periods]]
start_minute = 5
end_minute = 10
latency_ms = 45000
[[endpoint.outages]]
start_minute = 12
end_minute = 14
status = "timeout"
"""
