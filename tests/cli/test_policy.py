"""`prefctl policy explain`: the timeline and the outcome table come from the policy itself."""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import pytest

from prefctl.dispatcher.policy import backoff_delay
from tests.helpers import run_cli


def test_policy_explain_defaults_are_cut_off_by_the_ttl() -> None:
    result = run_cli("policy", "explain", "-o", "json")

    assert result.exit_code == 0, result.stderr
    report = result.json
    assert (report["max_attempts"], report["ttl_minutes"]) == (30, 240)
    assert [row["at_seconds"] for row in report["timeline"][:4]] == [0, 10, 30, 70]
    assert report["cut_off"]["reason"] == "TimeToLiveExceeded"
    assert report["cut_off"]["after_attempts"] == len(report["timeline"]) == 15
    assert report["cut_off"]["at_seconds"] >= 240 * 60
    assert report["timeline"][-1]["at_seconds"] < 240 * 60


def test_policy_explain_seeded_delays_are_the_draws_of_backoff_delay() -> None:
    result = run_cli("policy", "explain", "--seed", "11", "--max-attempts", "8", "-o", "json")

    assert result.exit_code == 0, result.stderr
    report = result.json
    rng = random.Random(11)
    expected = [backoff_delay(n, rng) for n in range(1, 9)]
    delays = [row["delay_seconds"] for row in report["timeline"][1:]]
    cut_off = report["cut_off"]
    assert delays == [round(d, 3) for d in expected[:7]]
    assert cut_off["reason"] == "MaxDeliveryAttemptsExceeded"
    assert cut_off["after_attempts"] == 8
    assert cut_off["at_seconds"] == round(sum(expected), 3)


def test_policy_explain_jitter_bounds_surround_every_attempt() -> None:
    report = run_cli("policy", "explain", "--seed", "3", "-o", "json").json

    for row in report["timeline"]:
        assert row["earliest_at_seconds"] <= row["at_seconds"] <= row["latest_at_seconds"]
    low, high = report["cut_off"]["attempts_min"], report["cut_off"]["attempts_max"]
    assert low <= report["cut_off"]["after_attempts"] <= high


def test_policy_explain_outcome_table_covers_every_answer() -> None:
    outcomes = {
        row["outcome"]: row for row in run_cli("policy", "explain", "-o", "json").json["outcomes"]
    }

    assert list(outcomes) == [
        "200", "3xx", "400", "401", "403", "404", "408", "413", "429", "500", "503",
        "timeout", "connection refused",
    ]  # fmt: skip
    assert outcomes["200"]["action"] == "delivered"
    assert (outcomes["400"]["action"], outcomes["400"]["reason"]) == ("dead_letter", "BadRequest")
    assert outcomes["413"]["reason"] == "PayloadTooLarge"
    retried = [name for name, row in outcomes.items() if row["action"] == "retry"]
    assert retried == [
        "3xx", "401", "403", "404", "408", "429", "500", "503", "timeout", "connection refused",
    ]  # fmt: skip
    assert {outcomes[name]["retry_after_seconds"] for name in retried} == {10.0}


def test_policy_explain_table_marks_where_the_retries_stop() -> None:
    result = run_cli("policy", "explain", "--max-attempts", "3")

    assert result.exit_code == 0, result.stderr
    assert "(4)" in result.stdout
    assert "MaxDeliveryAttemptsExceeded" in result.stdout
    assert "PayloadTooLarge" in result.stdout
    assert "connection refused" in result.stdout


def test_policy_explain_out_of_range_ttl_is_a_usage_error() -> None:
    result = run_cli("policy", "explain", "--ttl", "241")

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "--ttl" in result.stderr
    assert "at most 240" in result.stderr


def test_policy_explain_alerts_at_most_once_per_frequency_max() -> None:
    # Spec, Limits: "Alert Frequency (Max) | at most one alert per this many minutes".
    result = run_cli(
        "policy", "explain", "--max-attempts", "3", "--alert-frequency-max", "20",
        "--alert-threshold-max", "40", "-o", "json",
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    report = result.json
    alerts = report["alerts"]
    assert alerts[0]["at_seconds"] == report["cut_off"]["at_seconds"]  # the first dead letter
    assert [a["kind"] for a in alerts] == ["opened", "update", "paused"]
    assert [b["at_seconds"] - a["at_seconds"] for a, b in itertools.pairwise(alerts)] == [1200] * 2
    assert [a["dead_letters"] for a in alerts] == [1, 20, 20]
    assert report["alert_settings"]["AlertFrequencyMax"] == 20


def test_policy_explain_alert_max_below_min_is_a_usage_error() -> None:
    result = run_cli("policy", "explain", "--alert-frequency-max", "3")

    assert result.exit_code == 2
    assert result.stderr == (
        "error: --alert-frequency-max: AlertFrequencyMax must be at least AlertFrequencyMin (5)\n"
    )


def test_policy_docs_show_what_policy_explain_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # as on a terminal of 100 columns
    printed = run_cli("policy", "explain").stdout
    blocks = re.findall(
        r"<!-- generated: [^>]*-->\n```text\n(.*?)```",
        (Path(__file__).resolve().parents[2] / "docs" / "policy.md").read_text(),
        re.S,
    )
    tables = [block.strip("\n") for block in printed.split("\n\n")]

    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.strip("\n").splitlines()]

    assert [lines(block) for block in blocks] == [lines(table) for table in tables], (
        "docs/policy.md is stale: paste the output of NO_COLOR=1 COLUMNS=100 prefctl policy explain"
    )
