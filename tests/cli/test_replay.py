"""``prefctl replay`` with ``--store``: the engine runs in-process against real receivers."""

from __future__ import annotations

import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from prefctl.dispatcher.run import DispatcherConfig
from prefctl.dispatcher.run import run as run_dispatcher
from prefctl.receiver.faults import FaultPlan, FaultStep, plan_from_options
from prefctl.receiver.serve import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.store.db import connect
from prefctl.webhooks.envelope import build_event
from tests.dispatcher.engine_helpers import (
    CREDENTIALS,
    new_store,
    queue_events,
    record_of,
    subscribe,
)
from tests.emulator.subscriptions.endpoints import stub_endpoint
from tests.helpers import free_port, run_cli, sorted_event_ids, wait_until

SUMMARY_KEYS = [
    "source",
    "target",
    "dispatcher",
    "waited",
    "total",
    "delivered",
    "dead_lettered",
    "pending",
    "skipped",
    "duplicates",
    "of_deleted_subscriptions",
    "elapsed_seconds",
    "succeeded",
    "outcomes",
]
OUTCOME_KEYS = [
    "event_id",
    "event_type",
    "subscription_id",
    "delivery_id",
    "state",
    "attempts",
    "reason",
    "last_status",
    "last_error",
]
FAST = ("--time-scale", "50", "--timeout", "15")


def _receiver(**options: Any) -> RunningReceiver:
    return start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS, **options))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    new_store(path).close()
    return path


@pytest.fixture
def recovering() -> Iterator[RunningReceiver]:
    """Answers 413 to the first event, then 200."""
    with _receiver(faults=FaultPlan(steps=(FaultStep(count=1, status=413),))) as receiver:
        yield receiver


def _deliver_once(store: Path, url: str, count: int = 1) -> list[int]:
    conn = connect(store)
    try:
        ids = queue_events(conn, subscribe(conn, url, name=url), count, at=time.time())
    finally:
        conn.close()
    run_dispatcher(DispatcherConfig(store_path=store, once=True, plugins=False))
    return ids


def _event_id(store: Path, delivery_id: int) -> str:
    conn = connect(store)
    try:
        return str(record_of(conn, delivery_id).event_id)
    finally:
        conn.close()


def test_replay_dead_lettered_json_summary(store: Path, recovering: RunningReceiver) -> None:
    (delivery,) = _deliver_once(store, recovering.webhook_url)

    result = run_cli("-o", "json", "replay", "--dead-lettered", "--store", store, *FAST)

    assert result.exit_code == 0, result.stderr
    summary = result.json
    assert list(summary) == SUMMARY_KEYS
    assert summary["source"] == "dead_lettered"
    assert summary["target"] == {"own_subscriptions": True}
    assert (summary["total"], summary["delivered"], summary["succeeded"]) == (1, 1, True)
    (outcome,) = summary["outcomes"]
    assert list(outcome) == OUTCOME_KEYS
    assert (outcome["delivery_id"], outcome["state"]) == (delivery, "delivered")
    assert [v.status for v in recovering.wait_for(2)] == [413, 200]


def test_replay_table_prints_a_summary(store: Path, recovering: RunningReceiver) -> None:
    _deliver_once(store, recovering.webhook_url)

    result = run_cli(
        "replay", "--dead-lettered", "--reason", "PayloadTooLarge", "--store", store, *FAST
    )

    assert result.exit_code == 0, result.stderr
    assert "delivered" in result.stdout
    assert "in_process" in result.stdout
    assert "EVENT ID" not in result.stdout  # no table of the events not delivered


def test_replay_recording_to_a_subscription(store: Path, tmp_path: Path) -> None:
    recording = tmp_path / "capture.ndjson"
    with _receiver(record=recording) as first:
        _deliver_once(store, first.webhook_url, 2)
        sent = first.wait_for(2)
    with _receiver() as second:
        conn = connect(store)
        target = subscribe(conn, second.webhook_url, name="second")
        conn.close()

        result = run_cli(
            "-o",
            "json",
            "replay",
            "--file",
            recording,
            "--subscription",
            str(target),
            "--store",
            store,
            *FAST,
        )
        got = second.wait_for(2)

    assert result.exit_code == 0, result.stderr
    assert result.json["delivered"] == 2
    assert sorted_event_ids(got) == sorted_event_ids(sent)


def test_replay_event_to_a_failing_url_exits_1_with_the_dead_letter(store: Path) -> None:
    with _receiver() as good, _receiver(faults=plan_from_options(respond=503)) as failing:
        (delivery,) = _deliver_once(store, good.webhook_url)
        event_id = _event_id(store, delivery)

        result = run_cli(
            "replay",
            "--event",
            event_id,
            "--to",
            failing.webhook_url,
            "--max-attempts",
            "1",
            "--store",
            store,
            "--time-scale",
            "50",
        )

    assert result.exit_code == 1
    assert "1 replayed: 1 dead-lettered" in result.stderr
    assert "\tdead_lettered\t" in result.stdout  # the table of the events not delivered
    assert "MaxDeliveryAttemptsExceeded" in result.stdout


def _capture_one_event(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A capture file (NDJSON, one notification per line) holding one event."""
    capture = tmp_path / "events.ndjson"
    event = build_event(
        event_id="6513270e-269e-4d37-b2a7-4de452e6b438",
        event_type="tag.added",
        subscription_id=12,
        client_id=CREDENTIALS.client_id,
        profile_id=1001,
        event_time="2026-11-21T19:20:30.123Z",
        original_event_time="2026-11-21T19:20:29.998Z",
        data={"Tag": "vip"},
    )
    capture.write_bytes(orjson.dumps(event) + b"\n")
    return capture, event


def test_replay_capture_to_a_url_without_a_store_signs_with_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFCTL_SERVICE_CLIENT_ID", CREDENTIALS.client_id)
    monkeypatch.setenv("PREFCTL_SIGNATURE_USER_ID", CREDENTIALS.signature_user_id)
    monkeypatch.setenv("PREFCTL_HASHKEY", CREDENTIALS.hashkey)
    capture, event = _capture_one_event(tmp_path)

    with _receiver() as receiver:
        result = run_cli("replay", "--file", capture, "--to", receiver.webhook_url, *FAST)
        (verdict,) = receiver.wait_for(1)

    assert result.exit_code == 0, result.stderr
    assert (verdict.event_id, verdict.signature, verdict.status) == (event["EventId"], "valid", 200)
    assert verdict.event_time != event["EventTime"]  # queued again: a new EventTime


def test_replay_no_wait_queues_and_exits_0(store: Path) -> None:
    with _receiver(faults=plan_from_options(respond=413)) as receiver:
        (delivery,) = _deliver_once(store, receiver.webhook_url)
        result = run_cli("-o", "json", "replay", "--dead-lettered", "--no-wait", "--store", store)
    assert result.exit_code == 0, result.stderr
    assert (result.json["waited"], result.json["pending"]) == (False, 1)
    conn = connect(store)
    assert record_of(conn, delivery).state == "queued"
    conn.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "choose one source"),
        (["--dead-lettered", "--event", "x", "--file", "f.ndjson"], "choose one source"),
        (["--reason", "BadRequest", "--since", "1h"], "add --dead-lettered"),
        (["--since", "1h", "--to", "http://a", "--subscription", "1"], "choose one target"),
        (["--since", "1h", "--subscription", "1", "--max-attempts", "2"], "applies to --to"),
    ],
)
def test_replay_usage_errors_exit_2(store: Path, args: list[str], message: str) -> None:
    result = run_cli("replay", *args, "--store", store)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_replay_capture_without_a_target_exits_2(store: Path, tmp_path: Path) -> None:
    capture = tmp_path / "events.ndjson"
    capture.write_bytes(
        orjson.dumps(
            build_event(
                event_id="e1",
                event_type="tag.added",
                subscription_id=1,
                client_id="DEMO_CORP",
                profile_id=1001,
                event_time="2026-11-21T19:20:30.123Z",
                original_event_time="2026-11-21T19:20:29.998Z",
                data={},
            )
        )
    )
    result = run_cli("replay", "--file", capture, "--store", store)
    assert result.exit_code == 2
    assert "need a target" in result.stderr


def test_replay_unknown_event_exits_4(store: Path) -> None:
    result = run_cli("replay", "--event", "nope", "--store", store)
    assert result.exit_code == 4
    assert "no stored event nope" in result.stderr


def _read_line(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        assert selector.select(timeout), f"no line on stdout within {timeout} s"
        return proc.stdout.readline()


def test_replay_with_a_running_emulator_waits_for_its_dispatcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default store is the emulator's: replay queues there and its dispatcher delivers."""
    data_dir = tmp_path / "data"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "prefctl", "--config", str(tmp_path / "profiles.toml")),
            *("emulator", "start", "--port", str(free_port()), "--data-dir", str(data_dir)),
            *("--time-scale", "20"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert _read_line(proc).startswith("emulator ready at")
        monkeypatch.setenv("PREFCTL_DATA_DIR", str(data_dir))
        once_413 = FaultPlan(steps=(FaultStep(count=1, status=413),))
        with start_in_thread(ReceiverConfig(port=0, verify=False, faults=once_413)) as receiver:
            conn = connect(data_dir / "emulator.db")
            (delivery,) = queue_events(
                conn, subscribe(conn, receiver.webhook_url), 1, at=time.time()
            )
            wait_until(lambda: record_of(conn, delivery).state == "dead_lettered", timeout=15)

            result = run_cli("-o", "json", "replay", "--dead-lettered", "--timeout", "15")

            assert [v.status for v in receiver.wait_for(2)] == [413, 200]
            conn.close()
    finally:
        proc.terminate()
        proc.wait(20)
    assert result.exit_code == 0, result.stderr
    assert (result.json["dispatcher"], result.json["delivered"]) == ("emulator", 1)


def test_replay_to_a_url_stopped_by_sigterm_removes_its_private_store(tmp_path: Path) -> None:
    # The throwaway store of 'replay --to' holds the Hashkey and the events: 0600 while it
    # exists, and gone when the command is stopped (SIGTERM is handled like Ctrl-C, exit 143).
    import os
    import signal
    import stat

    temp = tmp_path / "tmp"
    temp.mkdir()
    capture, _ = _capture_one_event(tmp_path)
    env = {
        **os.environ,
        "TMPDIR": str(temp),
        "PREFCTL_SERVICE_CLIENT_ID": CREDENTIALS.client_id,
        "PREFCTL_SIGNATURE_USER_ID": CREDENTIALS.signature_user_id,
        "PREFCTL_HASHKEY": CREDENTIALS.hashkey,
    }
    prefctl = Path(sys.executable).parent / "prefctl"
    with stub_endpoint(hang=True) as receiver:
        command = [str(prefctl), "replay", "--file", str(capture), "--to", receiver.url]
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: list(temp.glob("prefctl-replay-*/*.db")), timeout=20)
            wait_until(lambda: receiver.requests, timeout=20)  # the event is held there
            [folder] = list(temp.glob("prefctl-replay-*"))
            for path in folder.iterdir():
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 143, err
    assert err.strip().splitlines()[-1] == "error: terminated"
    assert list(temp.iterdir()) == []


@pytest.mark.slow
def test_replay_goes_on_in_process_when_its_emulator_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``emulator stop`` while replay waits for the emulator's dispatcher: replay delivers the
    rest itself instead of waiting out --timeout for deliveries nobody makes."""
    data_dir = tmp_path / "data"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "prefctl", "--config", str(tmp_path / "profiles.toml")),
            *("emulator", "start", "--port", str(free_port()), "--data-dir", str(data_dir)),
            *("--time-scale", "5"),  # a retry 2 s after a failure
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    results: list[Any] = []
    try:
        assert _read_line(proc).startswith("emulator ready at")
        monkeypatch.setenv("PREFCTL_DATA_DIR", str(data_dir))
        plan = FaultPlan(steps=(FaultStep(count=1, status=413), FaultStep(count=1, status=500)))
        with start_in_thread(ReceiverConfig(port=0, verify=False, faults=plan)) as receiver:
            conn = connect(data_dir / "emulator.db")
            (delivery,) = queue_events(
                conn, subscribe(conn, receiver.webhook_url), 1, at=time.time()
            )
            wait_until(lambda: record_of(conn, delivery).state == "dead_lettered", timeout=15)
            conn.close()
            replaying = threading.Thread(
                target=lambda: results.append(
                    run_cli("-o", "json", "replay", "--dead-lettered", "--timeout", "60")
                )
            )
            replaying.start()
            assert [v.status for v in receiver.wait_for(2)] == [413, 500]  # by the emulator
            proc.terminate()  # its retry is due in 2 s: the emulator never makes it
            proc.wait(20)
            replaying.join(60)
            assert [v.status for v in receiver.wait_for(1)] == [200]  # by replay itself
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(20)
    (result,) = results
    assert result.exit_code == 0, result.stderr
    assert (result.json["dispatcher"], result.json["delivered"]) == ("in_process", 1)
    assert result.json["elapsed_seconds"] < 30
