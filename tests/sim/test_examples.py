"""Every example scenario of docs/examples runs, and shows what its comment promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prefctl.sim.run import simulate
from prefctl.sim.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


_REPORTS: dict[str, dict[str, Any]] = {}


def _run(name: str) -> dict[str, Any]:
    """The example's report, simulated once per test session (reports are not mutated)."""
    if name not in _REPORTS:
        _REPORTS[name] = simulate(load_scenario(EXAMPLES / f"{name}.toml"))
    return _REPORTS[name]


def test_examples_are_the_three_documented() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.toml")) == ["outage", "ttl", "two-endpoints"]
    documented = (EXAMPLES.parent / "simulate.md").read_text()
    for path in EXAMPLES.glob("*.toml"):
        assert f"examples/{path.name}" in documented


@pytest.mark.parametrize("name", ["outage", "ttl", "two-endpoints"])
def test_example_runs_until_every_delivery_is_final(name: str) -> None:
    report = _run(name)

    assert report["deliveries"]["pending"] == 0
    assert report["deliveries"]["total"] > 0
    assert report["scenario"]["name"] == name
    # Every 200 is accounted for: a delivery, a duplicate, or one after a dead letter.
    outcomes, deliveries = report["attempts"]["by_outcome"], report["deliveries"]
    assert outcomes["delivered"] + outcomes["late_delivered"] == (
        deliveries["delivered"]
        + deliveries["duplicates"]
        + deliveries["delivered_after_dead_letter"]
    )


def test_example_outage_recovers_without_dead_letters() -> None:
    report = _run("outage")

    assert report["dead_letters"]["total"] == 0
    assert report["attempts"]["by_outcome"]["failed"] > 0
    assert len(report["probation"]) == 1


def test_example_ttl_dead_letters_and_alerts() -> None:
    report = _run("ttl")

    by_reason = report["dead_letters"]["by_reason"]
    assert {reason for reason, count in by_reason.items() if count} == {
        "TimeToLiveExceeded",
        "MaxDeliveryAttemptsExceeded",
    }
    # Every reason is a key, 0 when it did not happen: scripts can read any of them.
    assert by_reason["BadRequest"] == by_reason["PayloadTooLarge"] == 0
    # docs/simulate.md says what it prints: opened, update, then paused past AlertThresholdMax.
    alerts = [(round(a["minute"]), a["kind"], a["dead_letters"]) for a in report["alerts"]]
    assert alerts == [(52, "opened", 12), (82, "update", 173), (112, "paused", 180)]
    assert "alerting paused" in report["alerts"][-1]["subject"]


def test_example_two_endpoints_rejects_and_times_out() -> None:
    report = _run("two-endpoints")

    crm, legacy = report["subscriptions"]
    assert crm["dead_letters"]["total"] == 0
    assert crm["attempts"]["by_outcome"]["late_delivered"] > 0
    by_reason = legacy["dead_letters"]["by_reason"]
    assert {reason for reason, count in by_reason.items() if count} == {
        "BadRequest",
        "PayloadTooLarge",
    }
