"""The load: arrivals at the scenario's rate, in its windows, with its event mix."""

from __future__ import annotations

import random

from prefctl.sim.load import generate_arrivals
from prefctl.sim.scenario import parse_scenario

TEXT = """
[load]
events_per_minute = 30
duration_minutes = 60
event_mix = { "profile.updated" = 3, "tag.added" = 1 }
[[load.windows]]
start_minute = 10
end_minute = 20
events_per_minute = 0
[[load.windows]]
start_minute = 30
end_minute = 35
events_per_minute = 300
"""


def test_load_arrivals_follow_the_rate_and_its_windows() -> None:
    arrivals = generate_arrivals(parse_scenario(TEXT).load, random.Random(2))

    def count(first: float, last: float) -> int:
        return sum(1 for a in arrivals if first * 60 <= a.at < last * 60)

    assert count(10, 20) == 0
    assert 1300 < count(30, 35) < 1700  # 1500 expected
    assert 1200 < count(0, 10) + count(20, 30) + count(35, 60) < 1500  # 1350 expected
    assert [a.at for a in arrivals] == sorted(a.at for a in arrivals)
    assert all(0 <= a.at < 3600 for a in arrivals)


def test_load_event_mix_sets_the_share_of_each_type() -> None:
    arrivals = generate_arrivals(parse_scenario(TEXT).load, random.Random(2))

    share = sum(1 for a in arrivals if a.event_type == "tag.added") / len(arrivals)

    assert 0.21 < share < 0.29


def test_load_even_arrival_spaces_events_evenly() -> None:
    text = "[load]\nevents_per_minute = 6\nduration_minutes = 2\narrival = 'even'\n"
    arrivals = generate_arrivals(parse_scenario(text).load, random.Random(1))

    # rate × duration of them, each in the middle of its 10 s slot.
    assert [a.at for a in arrivals] == [5.0 + 10.0 * n for n in range(12)]


def test_load_even_arrival_gives_one_event_for_one_minute_at_one_per_minute() -> None:
    text = "[load]\nevents_per_minute = 1\nduration_minutes = 1\narrival = 'even'\n"
    arrivals = generate_arrivals(parse_scenario(text).load, random.Random(1))

    assert [a.at for a in arrivals] == [30.0]
