"""An alert goes out once however many dispatchers share the store: each one's ``AlertMonitor``
sees the alerts pending, and only the one that claimed an alert sends it (docs/alerts.md); on
SQLite and on PostgreSQL (``store_location``)."""

from __future__ import annotations

import asyncio
import mailbox
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from prefctl.dispatcher.alerts.mail import MBOX_FILE, Mailer, SmtpSettings, parse_message
from prefctl.dispatcher.alerts.monitor import ALERT_CLAIM_SECONDS, AlertMonitor, DeadLetterNotice
from prefctl.store import Store
from prefctl.store import alert_incidents as incidents
from prefctl.store import alerts as alert_store
from prefctl.store.db import connect, transaction
from tests.helpers import free_port
from tests.store.service_helpers import (
    ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class _OtherDispatcherTicksMeanwhile:
    """An SMTP server that, while it takes an alert from the first dispatcher, lets the second
    dispatcher's monitor tick: the alert is still pending then."""

    def __init__(self, other: AlertMonitor) -> None:
        self.other = other
        self.message_ids: list[str] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.message_ids.append(str(parse_message(envelope.content)["Message-ID"]))
        await asyncio.to_thread(self.other.tick, T0 + 1)
        return "250 Message accepted for delivery"


@pytest.fixture
def store(store_location: str) -> tuple[str, int]:
    conn = open_service_store(store_location)
    body = subscription_body("https://hooks.example/events", name="orders")
    body["Alerts"] = {"Enabled": True, "Recipients": ["ops@example.com"]}
    subscription_id = add_subscription(conn, body)
    conn.close()
    return store_location, subscription_id


def test_alert_pending_while_one_dispatcher_sends_it_is_not_sent_by_another(
    tmp_path: Path, store: tuple[str, int]
) -> None:
    path, subscription_id = store
    second = AlertMonitor(connect(path), Mailer.for_data_dir(tmp_path / "second"))
    smtp = _OtherDispatcherTicksMeanwhile(second)
    controller = Controller(smtp, hostname="127.0.0.1", port=free_port())
    controller.start()
    first_mailer = Mailer.for_data_dir(tmp_path, SmtpSettings("127.0.0.1", controller.port))
    first = AlertMonitor(connect(path), first_mailer)
    try:
        notice = DeadLetterNotice("evt-0001", subscription_id, "BadRequest", last_status=400)
        first.dead_lettered(T0, [notice])
    finally:
        controller.stop()
        first.conn.close()
        second.conn.close()

    conn = connect(path)
    [alert] = alert_store.list_alerts(conn)
    conn.close()
    assert (alert.state, alert.sink) == ("sent", "smtp")
    assert smtp.message_ids == [alert.message_id]
    assert not (tmp_path / "second" / MBOX_FILE).exists()  # the second sent nothing
    assert not (tmp_path / MBOX_FILE).exists()


def _pending_alert(path: str, subscription_id: int, tmp_path: Path) -> tuple[Store, int]:
    """A store with one alert written and not sent (its mbox cannot be written)."""
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the mbox's folder should be")
    monitor = AlertMonitor(connect(path), Mailer.for_data_dir(blocked))
    notice = DeadLetterNotice("evt-0001", subscription_id, "BadRequest", last_status=400)
    monitor.dead_lettered(T0, [notice])
    monitor.conn.close()
    conn = connect(path)
    [alert] = alert_store.pending_alerts(conn)
    return conn, alert.id


def test_claim_alert_is_held_by_one_sender_until_it_ends(
    tmp_path: Path, store: tuple[str, int]
) -> None:
    path, subscription_id = store
    conn, alert_id = _pending_alert(path, subscription_id, tmp_path)
    other = connect(path)
    until = T0 + ALERT_CLAIM_SECONDS
    try:
        with transaction(conn):
            assert alert_store.claim_alert(conn, alert_id, "a", now=T0, until=until)
        with transaction(other):
            assert not alert_store.claim_alert(other, alert_id, "b", now=T0 + 1, until=until + 1)
            # A sender that died: its claim ends, and another sends the alert.
            assert alert_store.claim_alert(other, alert_id, "b", now=until, until=until + 60)
        with transaction(conn):
            alert_store.unclaim_alert(conn, alert_id, "a")  # not a's any more: changes nothing
            assert not alert_store.claim_alert(conn, alert_id, "a", now=until, until=until + 60)
        with transaction(other):
            alert_store.unclaim_alert(other, alert_id, "b")  # b could not send it: anyone may
        with transaction(conn):
            assert alert_store.claim_alert(conn, alert_id, "a", now=until, until=until + 60)
            alert_store.mark_sent(conn, alert_id, sink="mbox", at=until, smtp_error=None)
        with transaction(other):
            assert not alert_store.claim_alert(other, alert_id, "b", now=until + 600, until=T0)
    finally:
        conn.close()
        other.close()


def test_alert_that_cannot_be_sent_is_sent_by_the_next_dispatcher_at_once(
    tmp_path: Path, store: tuple[str, int]
) -> None:
    path, subscription_id = store
    conn, _ = _pending_alert(path, subscription_id, tmp_path)
    conn.close()
    monitor = AlertMonitor(connect(path), Mailer.for_data_dir(tmp_path))
    try:
        monitor.tick(T0 + 1)  # the first one's claim was given back when sending failed
    finally:
        monitor.conn.close()
    assert len(mailbox.mbox(tmp_path / MBOX_FILE)) == 1


def test_record_alert_read_before_another_dispatcher_wrote_one_is_refused(
    tmp_path: Path, store: tuple[str, int]
) -> None:
    path, subscription_id = store
    conn, _ = _pending_alert(path, subscription_id, tmp_path)
    try:
        incident = incidents.current_incident(conn, subscription_id)
        assert incident is not None
        assert incident.alerts_sent == 1
        with transaction(conn):
            stale = incidents.record_alert(
                conn, incident.id, at=T0 + 1, next_alert_at=None, state="open", alerts_sent=0
            )
        assert not stale
        assert incidents.current_incident(conn, subscription_id) == incident
        assert len(alert_store.list_alerts(conn)) == 1
    finally:
        conn.close()


def test_open_incident_when_another_dispatcher_opened_one_meanwhile_opens_none(
    tmp_path: Path, store: tuple[str, int]
) -> None:
    path, subscription_id = store
    conn = connect(path)
    try:
        with transaction(conn):
            first = incidents.open_incident(
                conn, ACCOUNT, subscription_id, now=T0, next_alert_at=T0, window_start=T0
            )
            again = incidents.open_incident(
                conn, ACCOUNT, subscription_id, now=T0 + 1, next_alert_at=T0, window_start=T0
            )
        assert first is not None
        assert again is None
        assert incidents.current_incident(conn, subscription_id) == first
    finally:
        conn.close()
