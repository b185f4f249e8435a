"""`prefctl simulate`: a report and a chart, byte-identical JSON per seed, one-line errors."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_cli
from tests.sim.scenarios import OUTAGE, REJECTING


@pytest.fixture
def outage(tmp_path: Path) -> Path:
    path = tmp_path / "outage.toml"
    path.write_text(OUTAGE)
    return path


def test_simulate_json_is_byte_identical_for_a_seed(outage: Path) -> None:
    first = run_cli("simulate", str(outage), "-o", "json")
    second = run_cli("simulate", str(outage), "-o", "json")

    assert first.exit_code == 0, first.stderr
    assert first.stdout == second.stdout
    report = first.json
    assert report["scenario"]["seed"] == 5
    assert report["deliveries"]["delivered"] == report["events"]


def test_simulate_seed_option_replaces_the_files_seed(outage: Path) -> None:
    default = run_cli("simulate", str(outage), "-o", "json")
    seeded = run_cli("simulate", str(outage), "--seed", "99", "-o", "json")

    assert seeded.json["scenario"]["seed"] == 99
    assert seeded.stdout != default.stdout


def test_simulate_table_shows_summary_tables_and_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rejecting.toml"
    path.write_text(REJECTING)
    piped = run_cli("simulate", str(path)).stdout
    assert "scenario\trejecting\n" in piped  # key, tab, value for cut and awk
    assert "REASON\tDEAD LETTERS\n" in piped
    assert not any(c in piped for c in "┃│━█")  # neither boxes nor the chart

    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # as on a terminal
    result = run_cli("simulate", str(path))

    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for heading in ("Simulation", "Attempts per delivery", "Dead letters by reason", "Alerts"):
        assert heading in out
    assert "BadRequest" in out
    assert "PayloadTooLarge" in out
    assert "Outcomes per" in out
    assert "█" in out
    assert "x dead lettered" in out


def test_simulate_bad_scenario_is_one_line_naming_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(OUTAGE.replace("end_minute = 30", "end_minute = 10"))

    result = run_cli("simulate", str(path))

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert f"{path}:11: endpoint.outages[1].end_minute: 10 is before start_minute" in result.stderr


def test_simulate_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli("simulate", str(tmp_path / "nope.toml"))

    assert result.exit_code == 2
    assert "cannot read the scenario" in result.stderr


# -- 200s that deliver nothing ---------------------------------------------------------------------
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
# One event; every answer is a 200 after 45 s: the first request times out at 30 s, its retry
# goes out ~10 s later, then both 200s come back late (docs/dispatcher.md: a duplicate is possible).
SLOW_200 = """
seed = 1
[load]
events_per_minute = 1
duration_minutes = 1
arrival = "even"
[endpoint]
latency_ms = 45000
"""


def _ok_200s(figures: dict[str, Any]) -> int:
    outcomes = figures["attempts"]["by_outcome"]
    return int(outcomes["delivered"] + outcomes["late_delivered"])


def _accounted_200s(figures: dict[str, Any]) -> int:
    deliveries = figures["deliveries"]
    return int(
        deliveries["delivered"]
        + deliveries["duplicates"]
        + deliveries["delivered_after_dead_letter"]
    )


def test_simulate_counts_a_duplicate_200_once_as_a_delivery(tmp_path: Path) -> None:
    path = tmp_path / "slow.toml"
    path.write_text(SLOW_200)

    report = run_cli("simulate", str(path), "-o", "json").json

    deliveries = report["deliveries"]
    assert (deliveries["delivered"], deliveries["duplicates"]) == (1, 1)
    assert deliveries["delivered_after_dead_letter"] == 0
    assert _ok_200s(report) == 2 == _accounted_200s(report)
    assert sum(b["delivered"] for b in report["timeline"]["buckets"]) == 1


def test_simulate_table_shows_duplicate_200s(tmp_path: Path) -> None:
    path = tmp_path / "slow.toml"
    path.write_text(SLOW_200)

    result = run_cli("simulate", str(path))

    assert result.exit_code == 0, result.stderr
    assert re.search(r"duplicate 200s\s+1 \(for deliveries already delivered\)", result.stdout)
    assert "200s after a dead letter" not in result.stdout  # shown only when there are some


def test_simulate_counts_a_200_after_its_dead_letter(tmp_path: Path) -> None:
    # One attempt allowed: the retry comes due at ~40 s and dead-letters the delivery; the 200
    # of the first request arrives at 45 s, too late to deliver it.
    path = tmp_path / "one-attempt.toml"
    path.write_text(SLOW_200.replace("seed = 1", "seed = 1\n[settings]\nMaxDeliveryAttempts = 1"))

    report = run_cli("simulate", str(path), "-o", "json").json
    table = run_cli("simulate", str(path)).stdout

    deliveries = report["deliveries"]
    assert (deliveries["delivered"], deliveries["dead_lettered"]) == (0, 1)
    assert (deliveries["duplicates"], deliveries["delivered_after_dead_letter"]) == (0, 1)
    assert report["attempts"]["by_outcome"]["late_delivered"] == 1
    assert _ok_200s(report) == _accounted_200s(report)
    buckets = report["timeline"]["buckets"]
    assert sum(b["delivered"] for b in buckets) == 0
    assert sum(b["dead_lettered"] for b in buckets) == 1
    assert re.search(r"200s after a dead letter\s+1", table)


def test_simulate_two_endpoints_accounts_for_every_200() -> None:
    result = run_cli("simulate", str(EXAMPLES / "two-endpoints.toml"), "-o", "json")

    assert result.exit_code == 0, result.stderr
    report = result.json
    assert report["deliveries"]["duplicates"] > 0  # crm's slow hour: late 200s after retries
    for figures in (report, *report["subscriptions"]):
        assert _ok_200s(figures) == _accounted_200s(figures), figures["deliveries"]
    buckets = report["timeline"]["buckets"]
    assert sum(b["delivered"] for b in buckets) == report["deliveries"]["delivered"]
    assert sum(b["dead_lettered"] for b in buckets) == report["deliveries"]["dead_lettered"]


# -- numbers and windows -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("latency_ms = { distribution = \"lognormal\", p50 = 50, p99 = 400 }", "latency_ms = nan", ":8: endpoint.latency_ms: must be a finite number, not nan"),
        ("status_mix = { 200 = 1 }", "status_mix = { 200 = nan, 500 = 1 }", ":7: endpoint.status_mix.200: must be a finite number, not nan"),
        ("status_mix = { 200 = 1 }", "status_mix = { 200 = inf }", ":7: endpoint.status_mix.200: must be a finite number, not inf"),
        ("start_minute = 15", "start_minute = nan", ":10: endpoint.outages[1].start_minute: must be a finite number, not nan"),
        ("end_minute = 30", "end_minute = -inf", ":11: endpoint.outages[1].end_minute: must be a finite number, not -inf"),
        ("[load]", '[load]\nevent_mix = { "profile.updated" = nan, "tag.added" = 1 }', ':4: load.event_mix."profile.updated": must be a finite number, not nan'),
        ("duration_minutes = 60", "duration_minutes = inf", ":5: load.duration_minutes: must be a finite number, not inf"),
        ("duration_minutes = 60", "duration_minutes = 60\n[[load.windows]]\nstart_minute = 50\nend_minute = 70\nevents_per_minute = 2", ":8: load.windows[1].end_minute: 70 is after the end of the load (duration_minutes = 60)"),
        ("end_minute = 30", "end_minute = 301", ":11: endpoint.outages[1].end_minute: 301 is after minute 300, when the last possible attempt is due"),
    ],
)  # fmt: skip
def test_simulate_refuses_numbers_that_are_not_finite_and_windows_past_their_limit(
    tmp_path: Path, old: str, new: str, where: str
) -> None:
    assert old in OUTAGE
    path = tmp_path / "bad.toml"
    path.write_text(OUTAGE.replace(old, new, 1))

    result = run_cli("simulate", str(path))

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"error: {path}{where}\n"


def test_simulate_huge_weights_split_evenly_without_overflow(tmp_path: Path) -> None:
    # 1e308 + 1e308 overflows to inf: summed as written, both weights became 0 and every
    # attempt got the last status.
    path = tmp_path / "huge.toml"
    path.write_text(
        "seed = 1\n[settings]\nMaxDeliveryAttempts = 1\n"
        "[load]\nevents_per_minute = 20\nduration_minutes = 10\narrival = 'even'\n"
        "[endpoint]\nstatus_mix = { 200 = 1e308, 500 = 1e308 }\nlatency_ms = 20\n"
    )

    report = run_cli("simulate", str(path), "-o", "json").json

    delivered, dead = report["deliveries"]["delivered"], report["deliveries"]["dead_lettered"]
    assert delivered + dead == 200
    assert 70 <= delivered <= 130


def test_simulate_ttl_alerts_at_most_once_per_frequency_max() -> None:
    # Spec, Limits: "Alert Frequency (Max) | at most one alert per this many minutes" (30 here).
    result = run_cli("simulate", str(EXAMPLES / "ttl.toml"), "--seed", "1", "-o", "json")

    assert result.exit_code == 0, result.stderr
    report = result.json
    alerts = [(round(a["minute"]), a["kind"]) for a in report["alerts"]]
    assert alerts == [(52, "opened"), (82, "update"), (112, "paused")]
    minutes = [a["minute"] for a in report["alerts"]]  # rounded to the millisecond
    assert all(b - a >= 30 - 1e-3 for a, b in itertools.pairwise(minutes))
    counted = sum(a["dead_letters"] for a in report["alerts"])
    assert counted > report["scenario"]["settings"]["AlertThresholdMax"] == 200
