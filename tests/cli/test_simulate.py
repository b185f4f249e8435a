"""`prefctl simulate`: a report and a chart, byte-identical JSON per seed, one-line errors."""

from __future__ import annotations

from pathlib import Path

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


def test_simulate_table_shows_summary_tables_and_chart(tmp_path: Path) -> None:
    path = tmp_path / "rejecting.toml"
    path.write_text(REJECTING)

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
