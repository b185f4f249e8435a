"""Scenario files: accepted in one step, or refused with one line naming the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefctl.errors import UsageError
from prefctl.sim.scenario import load_scenario, parse_scenario

GOOD = """\
seed = 7

[settings]
MaxDeliveryAttempts = 12
EventTimeToLiveMinutes = 120

[load]
events_per_minute = 20
duration_minutes = 180
event_mix = { "profile.updated" = 3, "contacts.email.added" = 1 }

[endpoint]
status_mix = { 200 = 0.98, 503 = 0.02 }
latency_ms = { distribution = "lognormal", p50 = 80, p99 = 900 }

[[endpoint.outages]]
start_minute = 30
end_minute = 60
status = "connection_error"

[[endpoint.outages]]
start_minute = 90
end_minute = 100
status = 500
"""


def test_scenario_good_file_reads_every_section() -> None:
    scenario = parse_scenario(GOOD)

    assert scenario.seed == 7
    assert scenario.settings["MaxDeliveryAttempts"] == 12
    assert scenario.settings["Duration"] == 1  # the default fills what is left out
    assert scenario.load.event_mix == (("profile.updated", 0.75), ("contacts.email.added", 0.25))
    (subscription,) = scenario.subscriptions
    assert subscription.event_types == ("profile.updated", "contacts.email.added")
    outages = subscription.endpoint.outages
    assert [(o.start_minute, o.end_minute, o.status_mix) for o in outages] == [
        (30, 60, (("connection_error", 1.0),)),
        (90, 100, ((500, 1.0),)),
    ]


def test_scenario_subscription_endpoint_replaces_keys_of_the_default() -> None:
    text = (
        GOOD
        + """
[[subscriptions]]
name = "crm"

[[subscriptions]]
name = "erp"
event_types = ["contacts.email.added"]
alerts = false
[subscriptions.endpoint]
latency_ms = 5
"""
    )
    crm, erp = parse_scenario(text).subscriptions

    assert crm.endpoint.latency.distribution == "lognormal"
    assert len(crm.endpoint.outages) == 2
    assert (erp.endpoint.latency.distribution, erp.endpoint.latency.low_ms) == ("fixed", 5.0)
    assert erp.endpoint.outages == crm.endpoint.outages  # not replaced: inherited
    assert erp.event_types == ("contacts.email.added",)
    assert (crm.alerts, erp.alerts) == (True, False)


def _edit(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        (_edit("events_per_minute", "events_per_minut"), ":8: load.events_per_minut:", "did you mean events_per_minute"),
        (_edit("[settings]\n", "[settings]\nMaxRetries = 3\n"), ":4: settings.MaxRetries:", "unknown key"),
        (_edit("MaxDeliveryAttempts = 12", "MaxDeliveryAttempts = 31"), ":4: settings.MaxDeliveryAttempts:", "at most 30"),
        (_edit("EventTimeToLiveMinutes = 120", "EventTimeToLiveMinutes = 0"), ":5: settings.EventTimeToLiveMinutes:", "at least 1"),
        (_edit("MaxDeliveryAttempts = 12", 'MaxDeliveryAttempts = "12"'), ":4: settings.MaxDeliveryAttempts:", "must be an integer"),
        (_edit("end_minute = 60", "end_minute = 20"), ":18: endpoint.outages[1].end_minute:", "before start_minute"),
        (_edit("start_minute = 90", "start_minute = 200"), ":22: endpoint.outages[2].start_minute:", "not within the load"),
        (_edit("end_minute = 100", "end_minute = 400"), ":23: endpoint.outages[2].end_minute:", "last possible attempt"),
        (_edit("start_minute = 90", "start_minute = 50"), ":21: endpoint.outages[2]:", "overlap endpoint.outages[1]"),
        (_edit('status = "connection_error"', 'status = "refused"'), ":19: endpoint.outages[1].status:", "not a status"),
        (_edit("503 = 0.02", "700 = 0.02"), ":13: endpoint.status_mix.700:", "not a status"),
        (_edit("p99 = 900", "p99 = 40"), ":14: endpoint.latency_ms.p99:", "at least 80"),
        (_edit('"lognormal"', '"gamma"'), ":14: endpoint.latency_ms.distribution:", "not one of"),
        (_edit('"profile.updated" = 3', '"profile.changed" = 3'), ':10: load.event_mix."profile.changed":', "unknown event type"),
        (_edit("duration_minutes = 180", "duration_minutes = -5"), ":9: load.duration_minutes:", "greater than 0"),
        (_edit("duration_minutes = 180\n", ""), ":7: load.duration_minutes:", "is required"),
        (GOOD + "\n[[subscriptions]]\nname = 'a'\n[[subscriptions]]\nname = 'a'\n", ":29: subscriptions[2].name:", "used twice"),
        (GOOD + "\n[[subscriptions]]\nname = 'a'\nalert = true\n", ":28: subscriptions[1].alert:", "did you mean alerts"),
        (GOOD + "\n[[subscriptions]]\nname = 'a'\n[[subscriptions.endpoint.windows]]\nstart_minute = 5\nend_minute = 9\n", ":28: subscriptions[1].endpoint.windows[1]:", "needs status_mix or latency_ms"),
        ("seed = 1\n[load\n", ":2:", "not valid TOML"),
    ],
)  # fmt: skip
def test_scenario_bad_file_names_line_and_key(text: str, where: str, words: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_scenario(text, source="bad.toml")

    message = caught.value.message
    assert message.startswith(f"bad.toml{where}"), message
    assert words in message
    assert "\n" not in message


def test_scenario_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read the scenario"):
        load_scenario(tmp_path / "missing.toml")
