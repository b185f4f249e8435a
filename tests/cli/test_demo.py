"""``prefctl demo``: as a real process (JSON report, exit code, time, Ctrl-C) and in-process (the
summary table)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from prefctl.demo.model import EXPECTED_OUTCOMES
from tests.helpers import CliResult, run_cli

PROFILES = '# mine\ndefault = "work"\n\n[profiles.work]\napi_url = "https://api.example.com/v1"\n'
RUN_TIMEOUT_SECONDS = 120


@dataclass
class Process:
    code: int
    stdout: str
    stderr: str
    seconds: float
    home: Path

    @property
    def report(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.stdout)
        return result


def _environment(home: Path) -> dict[str, str]:
    """The user's folders under ``home``, with a profiles.toml of their own; TMPDIR too, so
    that what the demo leaves behind can be seen."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFCTL_")}
    config = home / "config" / "profiles.toml"
    config.parent.mkdir(parents=True)
    config.write_text(PROFILES)
    (home / "tmp").mkdir()
    env.update(
        PREFCTL_CONFIG=str(config),
        PREFCTL_CACHE_DIR=str(home / "cache"),
        PREFCTL_DATA_DIR=str(home / "data"),
        TMPDIR=str(home / "tmp"),
        NO_COLOR="1",
        COLUMNS="80",  # a terminal of 80 columns: every line must fit
    )
    return env


@pytest.fixture(scope="module")
def process(tmp_path_factory: pytest.TempPathFactory) -> Process:
    home = tmp_path_factory.mktemp("home")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "prefctl", "demo", "-o", "json"],
        env=_environment(home),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )
    seconds = time.monotonic() - started
    print(f"\nprefctl demo -o json as a process: {seconds:.2f} s")
    return Process(done.returncode, done.stdout, done.stderr, seconds, home)


def test_demo_process_exits_0_with_every_expected_outcome(process: Process) -> None:
    assert process.code == 0, process.stderr
    report = process.report
    assert report["ok"] is True
    assert report["failed"] == []
    assert [c["name"] for c in report["checks"] if c["ok"]] == list(EXPECTED_OUTCOMES)


def test_demo_process_reports_deliveries_retries_dead_letters_and_the_alert(
    process: Process,
) -> None:
    report = process.report
    assert (report["events_for_subscription"], report["delivered"], report["retries"]) == (7, 6, 3)
    assert report["dead_lettered"] == 1
    assert report["dead_letter_reasons"] == {"PayloadTooLarge": 1}
    [alert] = report["alerts"]
    assert alert["recipients"] == ["ops@example.com"]
    assert report["receiver"]["signatures_rejected"] == 0


def test_demo_process_finishes_well_under_a_minute(process: Process) -> None:
    assert process.seconds < 60
    assert process.report["wall_seconds"] < process.seconds


def test_demo_process_leaves_the_users_files_and_no_temp_dir(process: Process) -> None:
    assert (process.home / "config" / "profiles.toml").read_text() == PROFILES
    assert sorted(p.name for p in (process.home / "config").iterdir()) == ["profiles.toml"]
    assert not (process.home / "cache").exists()
    assert not (process.home / "data").exists()
    assert list((process.home / "tmp").iterdir()) == []
    assert process.report["workdir"] is None


def test_demo_process_shows_steps_on_stderr_and_no_token(process: Process) -> None:
    assert "1. Start a throwaway emulator and a webhook receiver" in process.stderr
    assert "5. A 413 is not retried: the event is dead-lettered and an alert email goes out" in (
        process.stderr
    )
    assert "✓ every expected outcome happened" in process.stderr
    assert "eyJ" not in process.stdout + process.stderr


def test_demo_process_at_80_columns_fits_them_and_splits_no_id_or_url(process: Process) -> None:
    from rich.cells import cell_len

    lines = process.stderr.splitlines()
    assert [line for line in lines if cell_len(line) > 80] == []
    report = process.report
    text = "\n".join(lines)
    for whole in (report["emulator_url"], report["receiver_url"], report["emulator_url"] + "/"):
        assert whole in text  # on one line: a split URL would not be found
    shown_ids = re.findall(r"event=(\S+)", text)
    assert len(shown_ids) >= 9
    assert all(re.fullmatch(r"[0-9a-f]{8}…", shown) for shown in shown_ids), shown_ids


def test_demo_process_explains_its_words_in_plain_ones(process: Process) -> None:
    for jargon in ("rule time", "fault plan", "5×normal", "time scale"):
        assert jargon not in process.stderr
    assert "the service's clock runs 60× fast here: a minute on it passes in 1 s" in " ".join(
        process.stderr.split()
    )


def test_demo_process_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    env = _environment(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefctl", "demo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(RUN_TIMEOUT_SECONDS, proc.kill)
    watchdog.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # interrupt while the receiver is failing
            if line.startswith("4. "):
                break
        proc.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        proc.communicate(timeout=30)
        stopped_in = time.monotonic() - interrupted
    finally:
        watchdog.cancel()
    assert proc.returncode == 130
    assert stopped_in < 15
    assert list((tmp_path / "tmp").iterdir()) == []  # servers stopped, temp dir removed


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliResult]:
    """``prefctl demo`` in this process, in table mode."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFCTL_CONFIG", str(home / "profiles.toml"))
        env.setenv("PREFCTL_CACHE_DIR", str(home / "cache"))
        env.setenv("PREFCTL_DATA_DIR", str(home / "data"))
        env.setenv("NO_COLOR", "1")
        env.setenv("COLUMNS", "160")
        yield run_cli("demo", "--seed", "7")


def test_demo_prints_a_summary_table_on_stdout(table: CliResult) -> None:
    assert table.exit_code == 0, table.output
    rows = {line.split("\t")[0]: line for line in table.stdout.splitlines()}
    assert "6 of 6" in rows["expected outcomes"]
    assert "1 × PayloadTooLarge" in rows["dead-lettered"]
    assert "to ops@example.com" in rows["alerts sent"]
    assert rows["retries"].split("\t")[1] == "3"
    assert "Start a throwaway emulator" not in table.stdout  # steps go to stderr


def test_demo_prints_each_step_on_stderr(table: CliResult) -> None:
    stderr = table.stderr
    assert "→ POST /subscriptions" in stderr
    assert "    ← " in stderr
    assert "sig=valid" in stderr
    assert "✓ the subscription is active (ProvisioningState Succeeded)" in stderr
    assert "fault=outage 3/3" in stderr
    assert "✓ profile.replaced is in the dead-letter queue" in stderr
    assert "PayloadTooLarge after 1 attempt" in stderr


@pytest.mark.parametrize("scale", ["0", "1e9", "1e-300"])
def test_demo_with_a_useless_time_scale_exits_2(scale: str) -> None:
    # 1e9 would make the response timeout 30 ns (every attempt times out), 1e-300 a cycle last
    # for ever: refused rather than run silently useless.
    result = run_cli("demo", "--time-scale", scale)
    assert result.exit_code == 2
    assert "--time-scale must be a number from 0.001 to 10000" in result.stderr
    assert result.stdout == ""
