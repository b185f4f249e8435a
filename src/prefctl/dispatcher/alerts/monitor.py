"""The incident rules of failure alerts (spec "Rules" 11–12 and "Limits"), fed by the dispatcher.

``AlertMonitor`` watches dead letters of subscriptions whose ``Alerts.Enabled`` is true, with the
account's AlertFrequencyMin/Max and AlertThresholdMin/Max (minutes divided by the emulator's time
scale). Its state lives in the store (``store/alert_incidents.py``, ``store/alerts.py``): a restart
neither resends nor forgets.

- An incident opens when AlertThresholdMin dead letters occur within AlertFrequencyMin minutes
  (spec: "failures within the window needed to alert"); its first alert goes out at once.
- Two alerts of one subscription are never closer than AlertFrequencyMax minutes (spec: "at most
  one alert per this many minutes"), within an incident and across incidents: later dead letters
  are batched into the next alert, which goes AlertFrequencyMax after the previous one, and only
  when there are dead letters it has not reported.
- Once the incident has counted AlertThresholdMax dead letters, its next alert says alerting is
  paused, and no more are sent (spec: "failures allowed before alerting stops").
- The incident closes after a 200 to that subscription, or AlertFrequencyMax minutes without dead
  letters. Only dead letters count: retries never alert.

**[decision]** where the spec is silent:

- A new incident's first alert goes at once unless the subscription's previous alert is less
  than AlertFrequencyMax old; then it goes when that spacing has passed.
- A 200 while dead letters await the next alert does not drop them: the incident closes when that
  alert goes out (kind ``recovered``); a dead letter in between cancels the recovery.
- Dead letters of a subscription whose alerts are disabled are not counted; disabling alerts (or
  deleting the subscription) closes its incident without another email.
- Alerts are written to the store first and sent afterwards (an outbox): an alert whose sending
  was interrupted is sent on the next call, so at worst one is sent twice, never lost.
- Several dispatchers on one store each see their own dead letters, and the incident rules run
  in one write transaction at a time; each alert is sent by the dispatcher that claims it first
  (``store.alerts.claim_alert``), so it goes out once however many see it pending. A claim lasts
  ``ALERT_CLAIM_SECONDS``: an alert whose sender died goes out from another after that.

The engine feeds it through ``observer(context)`` (an ``OBSERVER_FACTORIES`` entry of
``dispatcher/observer.py``), on a worker thread of its own since SMTP can block. Directly (tests,
the simulator), outside any open transaction on ``conn``::

    monitor = AlertMonitor(conn, Mailer.for_data_dir(data_dir, smtp), time_scale=60)
    monitor.dead_lettered(now, dead_letters)   # each cycle that dead-lettered something
    monitor.delivered(now, {12, 15})           # subscriptions that got a 200 in the cycle
    monitor.tick(now)                          # once per cycle: due alerts, quiet closes
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Protocol

from prefctl.dispatcher.alerts import mail
from prefctl.dispatcher.alerts import message as alert_email
from prefctl.dispatcher.alerts.mail import SMTP_SETTING, Mailer, SmtpSettings
from prefctl.dispatcher.alerts.message import AlertContent
from prefctl.dispatcher.observer import BackgroundObserver, CycleResults, ObserverContext
from prefctl.errors import PrefctlError
from prefctl.store import Store
from prefctl.store import alert_incidents as incidents
from prefctl.store import alerts as alert_store
from prefctl.store.accounts import get_account
from prefctl.store.db import connect, is_postgres_location, transaction
from prefctl.store.settings import get_settings
from prefctl.store.subscriptions import SubscriptionRecord, alerting_account, get_subscription

__all__ = [
    "AlertMonitor",
    "AlertObserver",
    "AlertRules",
    "DeadLetter",
    "DeadLetterNotice",
    "observer",
]

log = logging.getLogger(__name__)

# How long a dispatcher holds the sending of an alert: well past an SMTP exchange's timeouts.
ALERT_CLAIM_SECONDS = 120.0

Moment = float | datetime


class DeadLetter(Protocol):
    """What the monitor reads from a dead letter reported by the dispatcher."""

    @property
    def event_id(self) -> str: ...
    @property
    def subscription_id(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def last_status(self) -> int | None: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def first_attempt_at(self) -> Moment | None: ...
    @property
    def last_attempt_at(self) -> Moment | None: ...


@dataclass(frozen=True, slots=True)
class DeadLetterNotice:
    """A dead letter as plain data, for callers without a record of their own (tests, tools)."""

    event_id: str
    subscription_id: int
    reason: str
    attempts: int = 1
    last_status: int | None = None
    last_error: str | None = None
    first_attempt_at: Moment | None = None
    last_attempt_at: Moment | None = None


@dataclass(frozen=True, slots=True)
class AlertRules:
    """An account's alert settings; ``*_seconds`` are the windows under the time scale."""

    frequency_min: int
    frequency_max: int
    threshold_min: int
    threshold_max: int
    frequency_min_seconds: float
    frequency_max_seconds: float

    @classmethod
    def from_settings(cls, settings: Mapping[str, int], time_scale: float = 1.0) -> AlertRules:
        low, high = settings["AlertFrequencyMin"], settings["AlertFrequencyMax"]
        return cls(
            frequency_min=low,
            frequency_max=high,
            threshold_min=settings["AlertThresholdMin"],
            threshold_max=settings["AlertThresholdMax"],
            frequency_min_seconds=low * 60.0 / time_scale,
            frequency_max_seconds=high * 60.0 / time_scale,
        )

    @property
    def spacing_seconds(self) -> float:
        """The least time between two alerts of one subscription: AlertFrequencyMax."""
        return self.frequency_max_seconds


class AlertMonitor:
    """Applies the incident rules to what the dispatcher reports and sends the alerts.

    ``now`` arguments are Unix seconds or aware datetimes from the dispatcher's clock. The methods
    are thread-safe (one lock) and each runs its own transactions on ``conn``.
    """

    def __init__(
        self,
        conn: Store,
        mailer: Mailer,
        *,
        time_scale: float = 1.0,
    ) -> None:
        if not time_scale > 0:
            raise ValueError("time_scale must be greater than 0")
        self.conn = conn
        self.mailer = mailer
        self.time_scale = time_scale
        self._lock = threading.Lock()
        self._owned = False
        # Who claims the alerts this monitor sends (the store says so while it sends them).
        self._sender = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"

    @classmethod
    def open(
        cls,
        store_path: Path | str,
        mailer: Mailer,
        *,
        time_scale: float = 1.0,
    ) -> AlertMonitor:
        """A monitor with its own connection to the (migrated) store; ``close`` closes it."""
        monitor = cls(connect(store_path), mailer, time_scale=time_scale)
        monitor._owned = True
        return monitor

    def close(self) -> None:
        if self._owned:
            self.conn.close()

    # -- what the dispatcher reports ------------------------------------------------------------
    def dead_lettered(self, now: Moment, records: Iterable[DeadLetter]) -> None:
        """Count dead letters (at ``now``), open incidents, and send the alerts now due."""
        at = _seconds(now)
        waiting: dict[int, list[incidents.PendingDeadLetter]] = {}
        for record in records:
            waiting.setdefault(int(record.subscription_id), []).append(_pending(record, at))
        if not waiting:
            return
        with self._lock:
            with transaction(self.conn):
                incidents.lock_alerting(self.conn)
                rules = self._rules_cache()
                for subscription_id, letters in waiting.items():
                    self._count(at, subscription_id, letters, rules)
                self._evaluate(at, rules)
            self._flush(at)

    def delivered(self, now: Moment, subscription_ids: Iterable[int]) -> None:
        """A 200 reached these subscriptions: their incidents close (see the recovery rule)."""
        at = _seconds(now)
        ids = {int(i) for i in subscription_ids}
        if not ids:
            return
        with self._lock:
            if not incidents.live_incidents(self.conn, ids):
                return
            with transaction(self.conn):
                incidents.lock_alerting(self.conn)
                for incident in incidents.live_incidents(self.conn, ids):
                    waiting = incident.state == "open" and (
                        incidents.unreported_batch(self.conn, incident.id) is not None
                    )
                    if waiting:
                        incidents.set_recovered(self.conn, incident.id, at=at)
                    else:
                        incidents.close_incident(self.conn, incident.id, at=at, reason="delivered")
                self._evaluate(at, self._rules_cache())
            self._flush(at)

    def tick(self, now: Moment) -> None:
        """Send the alerts that have come due, close quiet incidents, drop stale dead letters,
        and retry alerts that could not be sent. Cheap when there is nothing to do."""
        at = _seconds(now)
        with self._lock:
            if not incidents.has_work(self.conn):
                return
            with transaction(self.conn):
                incidents.lock_alerting(self.conn)
                rules = self._rules_cache()
                self._evaluate(at, rules)
                for account in incidents.waiting_accounts(self.conn):
                    window = rules(account).frequency_min_seconds
                    incidents.prune_unattached(self.conn, before=at - window, account=account)
            self._flush(at)

    # -- the rules ------------------------------------------------------------------------------
    def _count(
        self,
        at: float,
        subscription_id: int,
        letters: list[incidents.PendingDeadLetter],
        rules: _Rules,
    ) -> None:
        conn = self.conn
        incident = incidents.current_incident(conn, subscription_id)
        if incident is not None:
            if incident.state == "open":
                incidents.add_dead_letters(conn, subscription_id, incident.id, letters)
            incidents.add_to_incident(conn, incident.id, len(letters), now=at)
            return
        account = alerting_account(conn, subscription_id)
        if account is None:
            return
        limits = rules(account)
        incidents.add_dead_letters(conn, subscription_id, None, letters)
        window_start = at - limits.frequency_min_seconds
        if incidents.count_recent(conn, subscription_id, since=window_start) < limits.threshold_min:
            return
        previous = alert_store.last_alert_at(conn, subscription_id)
        due = at if previous is None else max(at, previous + limits.spacing_seconds)
        opened = incidents.open_incident(
            conn, account, subscription_id, now=at, next_alert_at=due, window_start=window_start
        )
        if opened is None:  # another dispatcher opened it since: these count into its incident
            incident = incidents.current_incident(conn, subscription_id)
            if incident is None:  # and closed it too: they wait for the next incident's window
                return
            if incident.state == "open":
                incidents.attach_recent(conn, subscription_id, incident.id)
            incidents.add_to_incident(conn, incident.id, len(letters), now=at)

    def _evaluate(self, at: float, rules: _Rules) -> None:
        conn = self.conn
        for incident in incidents.live_incidents(conn):
            subscription = get_subscription(
                conn, incident.service_client_id, incident.subscription_id
            )
            if subscription is None or not subscription.alerts_enabled:
                incidents.close_incident(conn, incident.id, at=at, reason="alerts_disabled")
                continue
            limits = rules(incident.service_client_id)
            due = incident.next_alert_at
            if incident.state == "open" and due is not None and at >= due:
                batch = incidents.unreported_batch(conn, incident.id)
                if batch is not None:
                    self._write_alert(at, incident, subscription, batch, limits)
                    after = incidents.current_incident(conn, incident.subscription_id)
                    if after is None:  # the alert was the recovery's: the incident is closed
                        continue
                    incident = after
            # The quiet period ends no sooner than the next alert is due (both are AlertFrequencyMax
            # after a moment no later than the quiet's start), so nothing batched is dropped here.
            if at - incident.last_dead_letter_at >= limits.frequency_max_seconds:
                reason: incidents.CloseReason = "delivered" if incident.recovered_at else "quiet"
                incidents.close_incident(conn, incident.id, at=at, reason=reason)

    def _write_alert(
        self,
        at: float,
        incident: incidents.Incident,
        subscription: SubscriptionRecord,
        batch: incidents.Batch,
        limits: AlertRules,
    ) -> None:
        conn = self.conn
        sequence = incident.alerts_sent + 1
        kind: alert_store.AlertKind
        if incident.recovered_at is not None:
            kind = "recovered"
        elif incident.dead_letters >= limits.threshold_max:
            kind = "paused"
        else:
            kind = "opened" if sequence == 1 else "update"
        next_at = at + limits.spacing_seconds if kind in ("opened", "update") else None
        # The incident's next alert is this dispatcher's to write only if no other dispatcher on
        # the store wrote it since the incident was read.
        state: incidents.IncidentState = "paused" if kind == "paused" else incident.state
        seen = incident.alerts_sent
        if not incidents.record_alert(
            conn, incident.id, at=at, next_alert_at=next_at, state=state, alerts_sent=seen
        ):
            return
        account = get_account(conn, incident.service_client_id)
        content = AlertContent(
            alert_id=0,
            kind=kind,
            account=incident.service_client_id,
            environment=account.environment if account else "Sandbox",
            subscription_id=subscription.id,
            subscription_name=subscription.name,
            url=subscription.url,
            recipients=tuple(subscription.alert_recipients),
            incident_id=incident.id,
            incident_opened_at=incident.opened_at,
            incident_dead_letters=incident.dead_letters,
            sequence=sequence,
            batch=batch,
            created_at=at,
            next_alert_at=next_at,
            recovered_at=incident.recovered_at,
            frequency_min=limits.frequency_min,
            frequency_max=limits.frequency_max,
            threshold_max=limits.threshold_max,
        )
        message_id = _message_id(incident, sequence, at)
        alert_id = alert_store.add_alert(
            conn,
            alert_store.NewAlert(
                incident_id=incident.id,
                service_client_id=incident.service_client_id,
                subscription_id=subscription.id,
                subscription_name=subscription.name,
                kind=kind,
                sequence=sequence,
                dead_letters=batch.count,
                incident_dead_letters=incident.dead_letters,
                recipients=subscription.alert_recipients,
                subject=alert_email.subject(content),
                message_id=message_id,
                created_at=at,
            ),
        )
        message = alert_email.compose(
            replace(content, alert_id=alert_id), message_id=message_id, sender=self.mailer.sender
        )
        alert_store.set_alert_message(conn, alert_id, message.as_string())
        incidents.delete_reported(conn, incident.id)
        if kind == "recovered":
            incidents.close_incident(conn, incident.id, at=at, reason="delivered")
        log.info("alert %d (%s) for subscription %d", alert_id, kind, subscription.id)

    def _flush(self, at: float) -> None:
        """Send the alerts written but not sent yet, oldest first; on a failure, the rest wait
        for the next call."""
        conn, sender = self.conn, self._sender
        for alert in alert_store.pending_alerts(conn):
            with transaction(conn):
                until = at + ALERT_CLAIM_SECONDS
                mine = alert_store.claim_alert(conn, alert.id, sender, now=at, until=until)
            if not mine:
                continue  # another dispatcher sends it
            try:
                sent = self.mailer.send(mail.parse_message(alert.message))
            except PrefctlError as exc:
                log.error("alert %d could not be sent, will retry: %s", alert.id, exc)
                with transaction(conn):
                    alert_store.unclaim_alert(conn, alert.id, sender)
                return
            with transaction(self.conn):
                alert_store.mark_sent(
                    self.conn, alert.id, sink=sent.sink, at=at, smtp_error=sent.smtp_error
                )

    def _rules_cache(self) -> _Rules:
        cache: dict[str, AlertRules] = {}

        def rules(account: str) -> AlertRules:
            if account not in cache:
                settings = get_settings(self.conn, account)
                cache[account] = AlertRules.from_settings(settings, self.time_scale)
            return cache[account]

        return rules


class AlertObserver:
    """Feeds an ``AlertMonitor`` from the engine (an ``EngineObserver``, ``dispatcher/observer.py``):
    each cycle's dead letters, then its 200s, and a tick after every cycle."""

    def __init__(self, monitor: AlertMonitor) -> None:
        self.monitor = monitor

    def on_results(self, now: datetime, results: CycleResults) -> None:
        # Dead letters first: a 413 and a 200 in one cycle still alert, then close the incident.
        if results.dead_letters:
            self.monitor.dead_lettered(now, results.dead_letters)
        delivered = results.delivered_subscriptions
        if delivered:
            self.monitor.delivered(now, delivered)

    def on_cycle(self, now: datetime) -> None:
        self.monitor.tick(now)


class _AlertsInBackground(BackgroundObserver):
    """The alert observer on its own worker thread (SMTP may block), closing its monitor last."""

    def __init__(self, monitor: AlertMonitor) -> None:
        super().__init__(AlertObserver(monitor), name="prefctl-alerts")
        self.monitor = monitor

    def close(self) -> None:
        super().close()
        self.monitor.close()


def observer(context: ObserverContext) -> BackgroundObserver | None:
    """The engine observer of failure alerts (``OBSERVER_FACTORIES`` entry
    ``"prefctl.dispatcher.alerts.monitor:observer"``): a monitor with its own connection to the store, the
    engine's time scale, SMTP from ``context.settings`` (``emulator start --smtp-*``), and
    ``alerts.mbox`` beside the store (in the data dir for a PostgreSQL store). None for a store
    without a file (the simulator builds its
    own ``AlertMonitor``)."""
    store = context.store_path
    if store is None:
        return None
    smtp: SmtpSettings | None = context.settings.get(SMTP_SETTING)
    if is_postgres_location(store):  # no folder of its own: the data dir's mbox
        from prefctl.config.paths import resolve_data_dir

        folder = resolve_data_dir(None)
    else:
        folder = Path(store).parent
    mailer = Mailer.for_data_dir(folder, smtp)
    monitor = AlertMonitor.open(store, mailer, time_scale=context.time_scale)
    return _AlertsInBackground(monitor)


class _Rules(Protocol):
    def __call__(self, account: str) -> AlertRules: ...


def _pending(record: DeadLetter, at: float) -> incidents.PendingDeadLetter:
    return incidents.PendingDeadLetter(
        event_id=str(record.event_id),
        reason=str(record.reason),
        attempts=int(record.attempts),
        last_status=record.last_status,
        last_error=record.last_error,
        first_attempt_at=_optional_seconds(record.first_attempt_at),
        last_attempt_at=_optional_seconds(record.last_attempt_at),
        dead_lettered_at=at,
    )


def _seconds(moment: Moment) -> float:
    return moment.timestamp() if isinstance(moment, datetime) else float(moment)


def _optional_seconds(moment: Moment | None) -> float | None:
    return None if moment is None else _seconds(moment)


def _message_id(incident: incidents.Incident, sequence: int, at: float) -> str:
    # Unique per store (incident, sequence) and across stores and resets (time, account).
    domain = re.sub(r"[^a-z0-9-]+", "-", incident.service_client_id.lower()).strip("-")
    return f"<alert.{incident.id}.{sequence}.{int(at * 1000)}@{domain or 'account'}.prefctl>"
