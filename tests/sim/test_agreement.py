"""One scenario through the simulator, ``policy explain`` and the real emulator: the same alert
times and attempt counts (issue 19, "Done when").

The emulator runs with ``--time-scale``, its dispatcher sending to a real ``prefctl receive``
that answers 503 to everything; its events are queued at the times the simulator's load writes
them (``sim.load.generate_arrivals``, even arrivals), through the same store functions. Three
events, 3 attempts each: 9 failures, under the 10 that put a Url on probation, so the timing is
the retry schedule and the alert rules alone.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl.dispatcher.policy import Limits
from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.receiver.faults import plan_from_options
from prefctl.receiver.serve import ReceiverConfig
from prefctl.receiver.serve import start_in_thread as start_receiver
from prefctl.sim.explain import explain
from prefctl.sim.load import generate_arrivals
from prefctl.sim.run import simulate
from prefctl.sim.scenario import parse_scenario
from prefctl.store import alert_incidents, subscriptions
from prefctl.store import alerts as alert_store
from prefctl.store.db import connect, transaction
from prefctl.store.delivery_history import DeliveryQuery, list_deliveries
from prefctl.webhooks.signature import SigningCredentials
from tests.dispatcher.engine_helpers import queue_events, set_settings, subscribe
from tests.helpers import free_port, wait_until

SETTINGS = {
    "MaxDeliveryAttempts": 3,
    "AlertFrequencyMin": 1,
    "AlertFrequencyMax": 2,
    "AlertThresholdMin": 1,
    "AlertThresholdMax": 6,
}
SCENARIO = "\n".join(
    [
        "seed = 3",
        "[settings]",
        *(f"{key} = {value}" for key, value in SETTINGS.items()),
        "[load]",
        "events_per_minute = 4",
        "duration_minutes = 0.75",
        'arrival = "even"',
        'event_mix = { "profile.created" = 1 }',
        "[endpoint]",
        "status_mix = { 503 = 1 }",
        "latency_ms = 5",
    ]
)
SCALE = 30.0  # one rule-minute is 2 s
# Jitter moves each dead letter by up to ±7 s and the emulator's cycles add a little: alert times
# agree within this many rule-minutes; the rule itself (AlertFrequencyMax = 2) is far coarser.
TOLERANCE_MINUTES = 0.4


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[RunningEmulator]:
    running = start_in_thread(
        EmulatorConfig(port=free_port(), data_dir=tmp_path / "data", time_scale=SCALE)
    )
    yield running
    running.stop()


def run_emulator(emulator: RunningEmulator) -> tuple[list[tuple[float, str, int]], list[int]]:
    """The scenario on the emulator: (rule-minute, kind, dead letters) of each alert, measured from
    the start of the load, and the attempts of each delivery."""
    scenario = parse_scenario(SCENARIO)
    account = emulator.account
    credentials = SigningCredentials(
        account.service_client_id, account.signature_user_id, account.hashkey
    )
    faults = plan_from_options(respond=503)
    conn = connect(emulator.store_path)
    try:
        with start_receiver(ReceiverConfig(port=0, credentials=credentials, faults=faults)) as rx:
            set_settings(conn, account.service_client_id, **SETTINGS)
            subscription_id = subscribe(conn, rx.webhook_url, account=account.service_client_id)
            with transaction(conn):
                subscriptions.set_alerts(
                    conn,
                    account.service_client_id,
                    subscription_id,
                    enabled=True,
                    recipients=["ops@example.com"],
                    actor="test",
                    now=time.time(),
                )
            start = time.time() + 0.5
            for n, arrival in enumerate(generate_arrivals(scenario.load, random.Random(0))):
                at = start + arrival.at / SCALE
                queue_events(
                    conn, subscription_id, 1, at=at, account=account.service_client_id,
                    prefix=f"{n:08d}",
                )  # fmt: skip

            def settled() -> bool:
                states = {d.state for d in list_deliveries(conn, DeliveryQuery())}
                closed = alert_incidents.current_incident(conn, subscription_id) is None
                return (
                    states == {"dead_lettered"} and closed and bool(alert_store.list_alerts(conn))
                )

            wait_until(settled, timeout=60)
        alerts: list[tuple[float, str, int]] = [
            (round((a.created_at - start) * SCALE / 60, 3), a.kind, a.dead_letters)
            for a in alert_store.list_alerts(conn)
        ]
        attempts = [d.attempts for d in list_deliveries(conn, DeliveryQuery())]
    finally:
        conn.close()
    return alerts, attempts


@pytest.mark.slow
def test_simulator_explain_and_emulator_agree_on_alert_times_and_attempts(
    emulator: RunningEmulator,
) -> None:
    report = simulate(parse_scenario(SCENARIO))
    simulated = [(a["minute"], a["kind"], a["dead_letters"]) for a in report["alerts"]]
    alert_settings = {k: v for k, v in SETTINGS.items() if k.startswith("Alert")}
    explained = explain(Limits(max_attempts=3, ttl_minutes=240), None, alert_settings)

    emulated, attempts = run_emulator(emulator)

    # policy explain: 3 attempts, then the next due time dead-letters the event.
    assert explained.cut_off.after_attempts == 3
    assert explained.cut_off.reason == "MaxDeliveryAttemptsExceeded"
    assert [row["attempts"] for row in report["attempts"]["histogram"]] == [3]
    assert attempts == [3, 3, 3]
    # Both: the first dead letter alerts at once, the other two wait for AlertFrequencyMax.
    assert [(kind, count) for _, kind, count in simulated] == [("opened", 1), ("update", 2)]
    assert [(kind, count) for _, kind, count in emulated] == [("opened", 1), ("update", 2)]
    first_dead_letter = 7.5 / 60 + explained.cut_off.at_seconds / 60  # first event at 7.5 s
    for (sim_minute, _, _), (emu_minute, _, _) in zip(simulated, emulated, strict=True):
        assert abs(sim_minute - emu_minute) <= TOLERANCE_MINUTES, (simulated, emulated)
    assert abs(simulated[0][0] - first_dead_letter) <= TOLERANCE_MINUTES
    # policy explain's alert table: the first at the cut-off, the next AlertFrequencyMax later.
    assert [a.kind for a in explained.alerts[:2]] == ["opened", "update"]
    assert explained.alerts[0].at_seconds == explained.cut_off.at_seconds
    explained_minutes = [a.at_seconds / 60 for a in explained.alerts[:2]]
    for alerts in (simulated, emulated):
        assert alerts[1][0] - alerts[0][0] >= explained_minutes[1] - explained_minutes[0] - 1e-3
        gap = alerts[1][0] - alerts[0][0]
        assert SETTINGS["AlertFrequencyMax"] - 1e-3 <= gap <= SETTINGS["AlertFrequencyMax"] + 0.2
