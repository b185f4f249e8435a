"""The incident rules of failure alerts (docs/alerts.md), one setting at a time, on a FakeClock.

Each test drives a real ``AlertMonitor`` over a real SQLite store with an mbox in a temp dir, as
the dispatcher would: dead letters, 200s and per-cycle ticks, with the time it chooses.
"""

from __future__ import annotations

import itertools
import mailbox
import re
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from prefctl.clock import FakeClock
from prefctl.dispatcher.alerts.mail import MBOX_FILE, Mailer, MboxSink, parse_message
from prefctl.dispatcher.alerts.monitor import (
    AlertMonitor,
    AlertObserver,
    DeadLetterNotice,
    observer,
)
from prefctl.dispatcher.observer import CycleResults, DeadLetter, ObserverContext
from prefctl.dispatcher.transport import Reply, Request
from prefctl.store import alert_incidents as incidents
from prefctl.store import alerts as store
from prefctl.store import subscriptions
from prefctl.store.db import connect, transaction
from prefctl.store.settings import update_settings
from prefctl.store.timestamps import epoch
from tests.dispatcher.engine_helpers import Rig, new_store, queue_events, record_of, set_settings
from tests.store.service_helpers import (
    ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

RECIPIENT = "ops@example.com"


def body(alert: store.AlertRecord) -> str:
    """The alert email's text as a reader sees it."""
    return str(parse_message(alert.message).get_content())


class Harness:
    """A store with one alert-enabled subscription, a monitor and a fake clock."""

    def __init__(self, tmp_path: Path, location: str | None = None, /, **settings: int) -> None:
        self.tmp_path = tmp_path
        self.conn = open_service_store(location or tmp_path / "emulator.db")
        body = subscription_body("https://hooks.example/events", name="orders")
        body["Alerts"] = {"Enabled": True, "Recipients": [RECIPIENT]}
        self.subscription_id = add_subscription(self.conn, body)
        if settings:
            with transaction(self.conn):
                update_settings(self.conn, ACCOUNT, settings)
        self.clock = FakeClock()
        self.time_scale = 1.0
        self.monitor = self.new_monitor()
        self._ids = itertools.count(1)

    def new_monitor(self, mailer: Mailer | None = None) -> AlertMonitor:
        return AlertMonitor(
            self.conn, mailer or Mailer.for_data_dir(self.tmp_path), time_scale=self.time_scale
        )

    def minutes(self, minutes: float) -> None:
        self.clock.advance(minutes * 60)
        self.monitor.tick(self.clock.now())

    def dead_letter(
        self, count: int = 1, *, reason: str = "MaxDeliveryAttemptsExceeded", status: int = 503
    ) -> list[str]:
        notices = [
            DeadLetterNotice(
                event_id=f"evt-{next(self._ids):04d}",
                subscription_id=self.subscription_id,
                reason=reason,
                attempts=30,
                last_status=status,
                last_error=f"HTTP {status}",
                first_attempt_at=self.clock.now(),
                last_attempt_at=self.clock.now(),
            )
            for _ in range(count)
        ]
        self.monitor.dead_lettered(self.clock.now(), notices)
        return [notice.event_id for notice in notices]

    def delivered(self) -> None:
        self.monitor.delivered(self.clock.now(), [self.subscription_id])

    def alerts(self) -> list[store.AlertRecord]:
        return store.list_alerts(self.conn)

    def alert_minutes(self) -> list[float]:
        """When each alert was written, in minutes from the start."""
        start = epoch(FakeClock().now())
        return [round((alert.created_at - start) / 60, 3) for alert in self.alerts()]

    def incident(self) -> incidents.Incident | None:
        return incidents.current_incident(self.conn, self.subscription_id)


@pytest.fixture
def harness(tmp_path: Path, store_location: str) -> Iterator[Harness]:
    """A harness on each backend (SQLite, PostgreSQL)."""
    h = Harness(tmp_path, store_location)
    yield h
    h.conn.close()


def settings_harness(tmp_path: Path, **settings: int) -> Harness:
    return Harness(tmp_path, **settings)


# -- opening: AlertThresholdMin within AlertFrequencyMin ----------------------------------------
def test_first_dead_letter_with_default_settings_alerts_at_once(harness: Harness) -> None:
    [event_id] = harness.dead_letter(reason="PayloadTooLarge", status=413)

    [alert] = harness.alerts()
    assert (alert.kind, alert.state, alert.sink, alert.dead_letters) == (
        "opened",
        "sent",
        "mbox",
        1,
    )
    assert alert.recipients == [RECIPIENT]
    box = mailbox.mbox(harness.tmp_path / MBOX_FILE)
    [message] = list(box)
    assert message["Message-ID"] == alert.message_id
    assert event_id in message.get_payload()


def test_threshold_min_not_reached_sends_nothing(tmp_path: Path) -> None:
    h = settings_harness(tmp_path, AlertThresholdMin=3, AlertFrequencyMin=5)
    h.dead_letter()
    h.minutes(1)
    h.dead_letter()
    h.minutes(1)

    assert h.alerts() == []
    assert h.incident() is None


def test_threshold_min_reached_within_frequency_min_opens_incident(tmp_path: Path) -> None:
    h = settings_harness(tmp_path, AlertThresholdMin=3, AlertFrequencyMin=5)
    first = h.dead_letter()
    h.minutes(2)
    second = h.dead_letter()
    h.minutes(2)
    third = h.dead_letter()

    [alert] = h.alerts()
    assert alert.dead_letters == 3
    assert alert.incident_dead_letters == 3
    text = body(alert)
    assert all(event_id in text for event_id in first + second + third)


def test_threshold_min_spread_beyond_frequency_min_never_opens(tmp_path: Path) -> None:
    h = settings_harness(tmp_path, AlertThresholdMin=3, AlertFrequencyMin=5)
    for _ in range(6):
        h.dead_letter()
        h.minutes(3)  # never 3 dead letters within 5 minutes

    assert h.alerts() == []


# -- spacing: at most one alert per AlertFrequencyMax minutes ---------------------------------------
def test_steady_dead_letters_alert_at_most_once_per_frequency_max(tmp_path: Path) -> None:
    # Spec, Limits: "Alert Frequency (Max) | at most one alert per this many minutes".
    h = settings_harness(
        tmp_path, AlertFrequencyMin=5, AlertFrequencyMax=30, AlertThresholdMax=1000
    )
    h.dead_letter()
    for _ in range(100):  # a dead letter every minute for 100 minutes
        h.minutes(1)
        h.dead_letter()

    assert h.alert_minutes() == [0, 30, 60, 90]
    assert [a.kind for a in h.alerts()] == ["opened"] + ["update"] * 3
    times = h.alert_minutes()
    assert min(b - a for a, b in itertools.pairwise(times)) >= 30


def test_batched_alert_counts_every_dead_letter_since_the_previous_by_reason(
    harness: Harness,
) -> None:
    harness.dead_letter()
    harness.minutes(1)
    harness.dead_letter(2, reason="TimeToLiveExceeded", status=500)
    harness.minutes(1)
    harness.dead_letter(reason="BadRequest", status=400)
    assert len(harness.alerts()) == 1  # still inside AlertFrequencyMax (30)

    harness.minutes(28)

    _first, second = harness.alerts()
    assert (second.kind, second.dead_letters, second.incident_dead_letters) == ("update", 3, 4)
    assert re.search(r"TimeToLiveExceeded +2\n", body(second))
    assert re.search(r"BadRequest +1\n", body(second))
    assert "HTTP status:  400" in body(second)


def test_no_new_dead_letters_after_the_gap_sends_nothing(harness: Harness) -> None:
    harness.dead_letter()
    harness.minutes(20)
    harness.minutes(20)

    assert len(harness.alerts()) == 1


def test_dead_letter_inside_the_spacing_alerts_when_it_ends(harness: Harness) -> None:
    harness.dead_letter()
    harness.minutes(20)
    harness.dead_letter()  # the incident is still open: it waits for the spacing
    harness.minutes(10)

    assert harness.alert_minutes() == [0, 30]


# -- pausing: AlertThresholdMax --------------------------------------------------------------------
def test_threshold_max_sends_a_last_alert_saying_alerting_is_paused(tmp_path: Path) -> None:
    h = settings_harness(tmp_path, AlertThresholdMax=6, AlertFrequencyMax=30)
    h.dead_letter()
    h.minutes(1)
    h.dead_letter(5)
    h.minutes(29)  # the spacing has passed: the 6th dead letter's alert is the last

    _first, last = h.alerts()
    assert (last.kind, last.incident_dead_letters) == ("paused", 6)
    assert "alerting paused" in last.subject
    assert "no more alerts are sent for it" in " ".join(body(last).split())

    for _ in range(30):
        h.dead_letter()
        h.minutes(1)
    assert len(h.alerts()) == 2
    incident = h.incident()
    assert incident is not None
    assert (incident.state, incident.dead_letters) == ("paused", 36)


def test_threshold_max_reached_at_once_makes_the_first_alert_the_last(tmp_path: Path) -> None:
    h = settings_harness(tmp_path, AlertThresholdMax=6)
    h.dead_letter(10)

    [alert] = h.alerts()
    assert (alert.kind, alert.dead_letters, alert.sequence) == ("paused", 10, 1)


# -- closing: a 200, or AlertFrequencyMax quiet minutes --------------------------------------------
def test_a_200_closes_the_incident_and_the_next_dead_letter_opens_another(
    harness: Harness,
) -> None:
    harness.dead_letter()
    first_incident = harness.incident()
    harness.minutes(1)
    harness.delivered()
    assert harness.incident() is None

    harness.minutes(30)
    harness.dead_letter()

    _first, second = harness.alerts()
    assert first_incident is not None
    assert second.incident_id != first_incident.id
    assert (second.kind, second.sequence) == ("opened", 1)


def test_a_200_while_dead_letters_wait_closes_after_a_recovered_alert(
    harness: Harness,
) -> None:
    harness.dead_letter()
    harness.minutes(1)
    [waiting] = harness.dead_letter()
    harness.minutes(1)
    harness.delivered()
    assert harness.incident() is not None  # closes once its waiting dead letter is reported

    harness.minutes(28)

    _first, last = harness.alerts()
    assert (last.kind, last.dead_letters) == ("recovered", 1)
    assert waiting in body(last)
    assert "recovered" in last.subject
    assert harness.incident() is None


def test_a_200_before_the_paused_alert_is_due_makes_the_last_alert_recovered(
    tmp_path: Path,
) -> None:
    # The incident counts AlertThresholdMax dead letters while its next alert waits for the gap;
    # a 200 comes first. That alert is the recovery's: the incident closes, nothing is paused.
    h = settings_harness(tmp_path, AlertThresholdMax=6, AlertFrequencyMax=30)
    h.dead_letter()
    h.minutes(1)
    h.dead_letter(5)  # 6 counted: the next alert (due at minute 30) would say paused
    h.minutes(1)
    h.delivered()
    h.minutes(28)

    _first, last = h.alerts()
    assert (last.kind, last.dead_letters, last.incident_dead_letters) == ("recovered", 5, 6)
    assert h.incident() is None
    h.minutes(60)
    assert len(h.alerts()) == 2


def test_a_200_to_a_paused_incident_closes_it(tmp_path: Path) -> None:
    h = settings_harness(tmp_path, AlertThresholdMax=6)
    h.dead_letter(6)
    h.delivered()

    assert h.incident() is None
    assert len(h.alerts()) == 1


def test_frequency_max_without_dead_letters_closes_the_incident(tmp_path: Path) -> None:
    h = settings_harness(tmp_path, AlertFrequencyMin=5, AlertFrequencyMax=30)
    h.dead_letter()
    h.minutes(29)
    assert h.incident() is not None
    h.minutes(1)
    assert h.incident() is None
    closed = h.conn.execute("SELECT close_reason FROM alert_incidents").fetchone()[0]
    assert closed == "quiet"

    h.dead_letter()
    assert [a.sequence for a in h.alerts()] == [1, 1]


def test_new_incident_soon_after_the_previous_alert_waits_for_frequency_max(
    harness: Harness,
) -> None:
    harness.dead_letter()
    harness.minutes(1)
    harness.delivered()
    harness.minutes(1)
    harness.dead_letter()  # a new incident 2 minutes after the last alert
    assert len(harness.alerts()) == 1

    harness.minutes(27)
    assert len(harness.alerts()) == 1
    harness.minutes(1)
    assert harness.alert_minutes() == [0, 30]


# -- only dead letters count -----------------------------------------------------------------------
def test_retries_and_successes_without_dead_letters_never_alert(harness: Harness) -> None:
    for _ in range(120):  # two hours of cycles: the dispatcher retries, nothing dead-letters
        harness.minutes(1)
        harness.delivered()

    assert harness.alerts() == []
    assert harness.incident() is None


def test_dead_letters_of_a_subscription_without_alerts_are_not_counted(
    harness: Harness,
) -> None:
    with transaction(harness.conn):
        subscriptions.set_alerts(
            harness.conn,
            ACCOUNT,
            harness.subscription_id,
            enabled=False,
            recipients=[],
            actor="support",
            now=0,
        )
    harness.dead_letter(20)

    assert harness.alerts() == []
    assert not (harness.tmp_path / MBOX_FILE).exists()


def test_disabling_alerts_during_an_incident_closes_it_silently(harness: Harness) -> None:
    harness.dead_letter()
    with transaction(harness.conn):
        subscriptions.set_alerts(
            harness.conn,
            ACCOUNT,
            harness.subscription_id,
            enabled=False,
            recipients=[],
            actor="support",
            now=0,
        )
    harness.dead_letter()
    harness.minutes(10)

    assert len(harness.alerts()) == 1
    assert harness.incident() is None


# -- time scale, restarts, sending failures ------------------------------------------------------
def test_time_scale_divides_every_alert_window(tmp_path: Path) -> None:
    h = settings_harness(tmp_path, AlertFrequencyMin=5, AlertFrequencyMax=30)
    h.time_scale = 60.0  # 30 minutes become 30 seconds
    h.monitor = h.new_monitor()
    h.dead_letter()
    h.clock.advance(29)
    h.dead_letter()
    h.monitor.tick(h.clock.now())
    assert len(h.alerts()) == 1
    h.clock.advance(1)
    h.monitor.tick(h.clock.now())
    assert len(h.alerts()) == 2

    h.clock.advance(30)
    h.monitor.tick(h.clock.now())
    assert h.incident() is None


def test_restarted_monitor_neither_resends_nor_forgets(harness: Harness) -> None:
    harness.dead_letter()
    harness.minutes(1)
    harness.dead_letter()
    harness.monitor = harness.new_monitor()  # the dispatcher restarts

    harness.minutes(1)
    assert len(harness.alerts()) == 1
    harness.minutes(28)
    assert [a.dead_letters for a in harness.alerts()] == [1, 1]


def test_alert_that_cannot_be_sent_stays_pending_and_goes_on_a_later_tick(
    harness: Harness,
) -> None:
    blocked = harness.tmp_path / "blocked"
    blocked.write_text("a file where the mbox's folder should be")
    harness.monitor = harness.new_monitor(Mailer(MboxSink(blocked / MBOX_FILE)))
    harness.dead_letter()
    [alert] = harness.alerts()
    assert alert.state == "pending"

    harness.monitor = harness.new_monitor()
    harness.minutes(0.1)

    [alert] = harness.alerts()
    assert (alert.state, alert.sink) == ("sent", "mbox")
    assert len(mailbox.mbox(harness.tmp_path / MBOX_FILE)) == 1


def test_deleting_the_subscription_keeps_its_alert_history(harness: Harness) -> None:
    harness.dead_letter()
    with transaction(harness.conn):
        subscriptions.delete_subscription(harness.conn, ACCOUNT, harness.subscription_id)
    harness.minutes(10)

    [alert] = harness.alerts()
    assert alert.subscription_name == "orders"


def test_worked_timeline_of_docs_alerts_md(harness: Harness) -> None:
    """docs/alerts.md walks through this outage with the default settings."""
    harness.clock.set(harness.clock.now().replace(hour=10))
    start = harness.clock.now()

    def at(minute: int) -> None:
        harness.clock.set(start + timedelta(minutes=minute))
        harness.monitor.tick(harness.clock.now())

    harness.dead_letter(reason="PayloadTooLarge", status=413)  # 10:00
    for minute in (2, 3):
        at(minute)
        harness.dead_letter()
    at(30)
    for minute in range(31, 40):
        at(minute)
        harness.dead_letter()
    at(45)
    harness.dead_letter(3)  # the 15th dead letter (AlertThresholdMax)
    at(60)
    for minute in range(65, 95, 5):
        at(minute)
        harness.dead_letter()
    at(100)
    harness.delivered()

    alerts = harness.alerts()
    assert [round((a.created_at - start.timestamp()) / 60) for a in alerts] == [0, 30, 60]
    assert [(a.kind, a.dead_letters, a.incident_dead_letters) for a in alerts] == [
        ("opened", 1, 1),
        ("update", 2, 3),
        ("paused", 12, 15),
    ]
    assert harness.incident() is None


# -- fed by the real engine ------------------------------------------------------------------------
def engine_rig(tmp_path: Path, answer: Callable[[Request], Reply]) -> tuple[Rig, AlertMonitor]:
    """The engine on a FakeClock over a store with one alert-enabled subscription, with the alert
    observer attached to it."""
    conn = new_store(tmp_path / "emulator.db")
    body = subscription_body("https://hooks.example/events", name="orders")
    body["Alerts"] = {"Enabled": True, "Recipients": [RECIPIENT]}
    add_subscription(conn, body)
    rig = Rig(conn, answer)
    monitor = AlertMonitor.open(tmp_path / "emulator.db", Mailer.for_data_dir(tmp_path))
    rig.engine.observers.append(AlertObserver(monitor))
    return rig, monitor


def test_engine_retries_never_alert_and_the_dead_letter_does(tmp_path: Path) -> None:
    rig, monitor = engine_rig(tmp_path, lambda _request: Reply(503))
    set_settings(rig.engine.conn, MaxDeliveryAttempts=3)
    [delivery_id] = queue_events(rig.engine.conn, 1, 1)
    try:
        rig.cycle()
        while record_of(rig.engine.conn, delivery_id).state != "dead_lettered":
            assert store.list_alerts(monitor.conn) == []  # still retrying
            rig.advance(15)

        [alert] = store.list_alerts(monitor.conn)
        text = body(alert)
        assert "MaxDeliveryAttemptsExceeded  1" in text
        assert "HTTP status:  503" in text
        assert "00000000-0000-4000-8000-000000000000" in text
    finally:
        rig.close()
        monitor.close()


def test_engine_413_alerts_at_once_and_the_200s_of_the_cycle_close_the_incident(
    tmp_path: Path,
) -> None:
    too_large = "00000000-0000-4000-8000-000000000000"
    rig, monitor = engine_rig(
        tmp_path, lambda request: Reply(413 if too_large.encode() in request.body else 200)
    )
    queue_events(rig.engine.conn, 1, 3)
    try:
        rig.cycle()  # sends the three
        rig.advance(1)  # records their answers

        [alert] = store.list_alerts(monitor.conn)
        assert (alert.kind, alert.dead_letters, alert.state) == ("opened", 1, "sent")
        assert "PayloadTooLarge" in body(alert)
        assert incidents.current_incident(monitor.conn, 1) is None
    finally:
        rig.close()
        monitor.close()


def test_observer_factory_sends_from_its_worker_thread(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    context = ObserverContext(tmp_path / "emulator.db", harness.conn, harness.clock, 1.0, {})
    made = observer(context)
    assert made is not None
    at = harness.clock.now().timestamp()
    letter = DeadLetter(
        delivery_id=1,
        event_id="evt-1",
        event_type="profile.created",
        profile_id=1001,
        subscription_id=harness.subscription_id,
        service_client_id=ACCOUNT,
        reason="BadRequest",
        attempts=1,
        last_status=400,
        last_error="HTTP 400",
        first_attempt_at=at,
        last_attempt_at=at,
        dead_lettered_at=at,
    )

    made.on_results(harness.clock.now(), CycleResults(dead_letters=(letter,)))
    made.on_cycle(harness.clock.now())
    made.close()  # waits for the calls already made

    [alert] = harness.alerts()
    assert (alert.kind, alert.sink) == ("opened", "mbox")
    harness.conn.close()


def test_alert_subject_folded_after_its_colon_reads_back_without_a_leading_space() -> None:
    from email.message import EmailMessage
    from email.policy import default

    from prefctl.dispatcher.alerts.log import AlertEntry
    from prefctl.dispatcher.alerts.mail import parse_message

    # This length makes the email package fold the header right after "Subject:".
    subject = '[Sandbox] DEMO_CORP: 1 webhook event dead-lettered for subscription "big" (3)'
    message = EmailMessage()
    message["Subject"] = subject
    message.set_content("body")
    assert message.as_bytes(policy=default).startswith(b"Subject:\n ")

    entry = AlertEntry(parse_message(message.as_bytes(policy=default)), 0.0)
    assert entry.to_dict()["subject"] == subject


def test_two_dispatchers_seeing_dead_letters_at_once_send_one_alert(
    tmp_path: Path, postgres_url: str
) -> None:
    # Two dispatchers on one PostgreSQL store, each with its own monitor and connection, each
    # dead-letters a delivery of the same subscription at the same moment (AlertThresholdMin 1).
    h = Harness(tmp_path, postgres_url)
    other = connect(postgres_url)
    monitors = [h.monitor, AlertMonitor(other, Mailer.for_data_dir(tmp_path), time_scale=1.0)]
    start = threading.Barrier(len(monitors))

    def dispatcher(monitor: AlertMonitor, n: int) -> None:
        notice = DeadLetterNotice(
            event_id=f"evt-{n}",
            subscription_id=h.subscription_id,
            reason="PayloadTooLarge",
            attempts=1,
            last_status=413,
            last_error="HTTP 413",
            first_attempt_at=h.clock.now(),
            last_attempt_at=h.clock.now(),
        )
        start.wait()
        monitor.dead_lettered(h.clock.now(), [notice])

    threads = [
        threading.Thread(target=dispatcher, args=(monitor, n)) for n, monitor in enumerate(monitors)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    [alert] = h.alerts()
    assert alert.kind == "opened"
    assert len(mailbox.mbox(tmp_path / MBOX_FILE)) == 1
    incident = h.incident()
    assert incident is not None
    assert incident.dead_letters == 2
    other.close()
    h.conn.close()
