"""``run_demo``: the whole loop on a throwaway emulator and receiver, run once in this process."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from prefctl.demo import (
    EXPECTED_OUTCOMES,
    DemoOptions,
    DemoReport,
    DemoStep,
    StepKind,
    run_demo,
)
from prefctl.demo.story import RECIPIENT, STORY, expected_events, selections
from prefctl.errors import UsageError

USER_PATHS = ("config/profiles.toml", "cache", "data", "xdg-config", "xdg-cache", "xdg-data")


@dataclass
class DemoRun:
    report: DemoReport
    steps: list[DemoStep]
    seconds: float
    home: Path

    @property
    def printed(self) -> str:
        """Everything the demo handed out: step texts, step data and the report."""
        return "\n".join(
            [
                *(f"{s.text} {json.dumps(dict(s.data), default=str)}" for s in self.steps),
                json.dumps(self.report.to_dict()),
            ]
        )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One demo run (kept, so the tests can look at its store), with the user's folders pointed
    at an empty home to see that none of them is touched."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as env:
        for name in [n for n in os.environ if n.startswith("PREFCTL_")]:
            env.delenv(name)
        env.setenv("PREFCTL_CONFIG", str(home / "config" / "profiles.toml"))
        env.setenv("PREFCTL_CACHE_DIR", str(home / "cache"))
        env.setenv("PREFCTL_DATA_DIR", str(home / "data"))
        for kind in ("config", "cache", "data"):
            env.setenv(f"XDG_{kind.upper()}_HOME", str(home / f"xdg-{kind}"))
        steps: list[DemoStep] = []
        started = time.monotonic()
        options = DemoOptions(keep=True, parent_dir=tmp_path_factory.mktemp("demo"))
        report = run_demo(options, steps.append)
        seconds = time.monotonic() - started
    print(f"\nprefctl demo in-process: {seconds:.2f} s (report: {report.wall_seconds} s)")
    return DemoRun(report, steps, seconds, home)


def test_run_demo_with_defaults_meets_every_expected_outcome(demo: DemoRun) -> None:
    report = demo.report
    assert [c.name for c in report.failed] == [], [c.detail for c in report.failed]
    assert report.ok
    assert [c.name for c in report.checks] == list(EXPECTED_OUTCOMES)


def test_run_demo_finishes_well_under_a_minute(demo: DemoRun) -> None:
    assert demo.seconds < 60
    # The report rounds its wall time to 10 ms; the outside measurement is not rounded.
    assert 0 < demo.report.wall_seconds <= demo.seconds + 0.005


def test_run_demo_delivers_retries_and_dead_letters_what_the_story_says(demo: DemoRun) -> None:
    report = demo.report
    assert report.events_for_subscription == 7
    assert report.events_produced == 11  # the updates' profile.updated(full) are not subscribed
    assert report.delivered == 6
    assert report.retries == 3
    assert report.dead_letter_reasons == {"PayloadTooLarge": 1}
    [letter] = report.dead_letters
    assert (letter["event_type"], letter["attempts"], letter["last_status"]) == (
        "profile.replaced",
        1,
        413,
    )


def test_run_demo_retries_with_growing_backoff(demo: DemoRun) -> None:
    first, second, third = demo.report.backoff_seconds
    assert 9 <= first < second < third
    assert third < 60  # 40 s ± 10 % in rule time, plus a cycle's rounding


def test_run_demo_reads_the_alert_back_from_the_mbox(demo: DemoRun) -> None:
    [alert] = demo.report.alerts
    assert alert["recipients"] == [RECIPIENT]
    assert alert["event_ids"] == [demo.report.dead_letters[0]["event_id"]]
    assert "dead-lettered" in alert["subject"]
    assert '"demo"' in alert["subject"]


def test_run_demo_receiver_verifies_every_event(demo: DemoRun) -> None:
    receiver = demo.report.receiver
    assert receiver["signatures_rejected"] == 0
    assert receiver["signatures_valid"] == receiver["events"] == 9  # 6 delivered + 3 × 503
    assert receiver["statuses"] == {"200": 7, "413": 1, "503": 3}  # the handshake is a 200


def test_run_demo_narrates_each_act_with_the_receivers_lines(demo: DemoRun) -> None:
    phases = [s.text for s in demo.steps if s.kind is StepKind.PHASE]
    assert len(phases) == 5
    arrivals = [s.text for s in demo.steps if s.kind is StepKind.ARRIVAL]
    assert any("subscription.validation" in line for line in arrivals)
    assert sum("fault=outage" in line for line in arrivals) == 3
    assert any("sig=valid" in line and "profile.created" in line for line in arrivals)
    outcomes = [s for s in demo.steps if s.kind in (StepKind.OK, StepKind.FAILED)]
    assert [s.data["check"] for s in outcomes if "check" in s.data] == list(EXPECTED_OUTCOMES)


def test_run_demo_reveals_no_secret(demo: DemoRun) -> None:
    from prefctl.store import accounts
    from prefctl.store.db import open_store

    assert demo.report.workdir is not None
    workdir = Path(demo.report.workdir)
    with open_store(workdir / "emulator" / "emulator.db") as conn:
        credentials = accounts.get_local_credentials(conn)
        assert credentials is not None
        account = accounts.get_account(conn, credentials.service_client_id)
        assert account is not None
    [cached] = (workdir / "cache" / "tokens").glob("*.json")
    token = json.loads(cached.read_text())["access_token"]
    printed = demo.printed
    for secret in (credentials.client_secret, account.hashkey, token):
        assert secret not in printed
    assert "eyJ" not in printed  # nothing shaped like a JWT


def test_run_demo_leaves_the_users_config_cache_and_data_alone(demo: DemoRun) -> None:
    assert [p for p in USER_PATHS if (demo.home / p).exists()] == []


def test_run_demo_with_keep_leaves_the_store_and_the_mbox(demo: DemoRun) -> None:
    assert demo.report.workdir is not None
    data_dir = Path(demo.report.workdir) / "emulator"
    assert (data_dir / "emulator.db").is_file()
    assert (data_dir / "alerts.mbox").is_file()
    assert oct(Path(demo.report.workdir).stat().st_mode & 0o777) == "0o700"


def test_expected_events_follow_the_emulators_rules() -> None:
    assert expected_events(STORY.changes, selections()) == [
        ["profile.created"],
        [
            "contacts.email.added",
            "preference.added",
            "consent.added",
            "consent.filterassociation.created",
        ],
        ["contacts.phone.added"],
        ["profile.replaced"],
    ]


@pytest.mark.parametrize("scale", [0.0, -5.0, float("inf"), float("nan")])
def test_run_demo_with_a_bad_time_scale_is_a_usage_error(scale: float, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--time-scale"):
        run_demo(DemoOptions(time_scale=scale, parent_dir=tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_demo_report_counts_unreached_outcomes_as_failed() -> None:
    report = DemoReport(time_scale=60)
    report.check("handshake", True, "Succeeded")
    report.settle("the demo stopped before it")
    assert not report.ok
    assert [c.name for c in report.failed] == [n for n in EXPECTED_OUTCOMES if n != "handshake"]
    assert report.to_dict()["failed"] == [c.name for c in report.failed]
    assert report.failed[0].detail == "not reached: the demo stopped before it"


def test_demo_report_without_checks_is_not_ok() -> None:
    assert not DemoReport(time_scale=60).ok
