"""What the simulator watches on the engine: alerts (the real incident rules) and probation.

Both are ``dispatcher.observer.EngineObserver``s, called by the engine after each cycle.

- ``AlertFeed`` hands the engine's dead letters, 200s and cycles to the real
  ``dispatcher.alerts.monitor.AlertMonitor``; its emails go to ``CapturedMail`` (kept in memory, never
  sent). ``next_due`` says when the incident rules next have something to do (an alert that comes
  due, an incident that closes for quiet), so the simulator can wake the engine then.
- ``ProbationWatch`` reads the engine's endpoint health (``store.dispatcher_state``) after results
  and notes when each Url went on probation and when a 200 took it off.
"""

from __future__ import annotations

from datetime import datetime
from email.message import EmailMessage
from pathlib import Path

from prefctl.dispatcher.alerts.mail import Mailer, MboxSink, Sent
from prefctl.dispatcher.alerts.monitor import AlertMonitor
from prefctl.dispatcher.observer import CycleResults
from prefctl.sim.report import ProbationPeriod
from prefctl.store import Store, alert_incidents
from prefctl.store.dispatcher_state import load_health

__all__ = ["AlertFeed", "CapturedMail", "ProbationWatch"]


class CapturedMail(Mailer):
    """A mailer that keeps every alert email in ``messages``: a simulation sends nothing."""

    def __init__(self) -> None:
        # The mbox sink is never used: ``send`` is replaced.
        super().__init__(MboxSink(Path("simulation-alerts.mbox")))
        self.messages: list[EmailMessage] = []

    def send(self, message: EmailMessage) -> Sent:
        self.messages.append(message)
        return Sent("mbox")


class AlertFeed:
    """Feeds the real alert monitor from the engine's results and cycles."""

    def __init__(self, conn: Store, frequency_max_minutes: int) -> None:
        self.mail = CapturedMail()
        self.monitor = AlertMonitor(conn, self.mail)
        self.conn = conn
        self._quiet_seconds = frequency_max_minutes * 60.0
        self._maybe_live = False

    def on_results(self, now: datetime, results: CycleResults) -> None:
        if results.dead_letters:
            self.monitor.dead_lettered(now, results.dead_letters)
            self._maybe_live = True
        if self._maybe_live:
            delivered = results.delivered_subscriptions
            if delivered:
                self.monitor.delivered(now, delivered)

    def on_cycle(self, now: datetime) -> None:
        if self._maybe_live:
            self.monitor.tick(now)

    def next_due(self) -> float | None:
        """When the incident rules next act on their own: an alert that comes due, or an
        incident that closes after AlertFrequencyMax minutes without dead letters."""
        if not self._maybe_live:
            return None
        moments = []
        for incident in alert_incidents.live_incidents(self.conn):
            if incident.state == "open" and incident.next_alert_at is not None:
                moments.append(incident.next_alert_at)
            moments.append(incident.last_dead_letter_at + self._quiet_seconds)
        if not moments and not alert_incidents.has_work(self.conn):
            self._maybe_live = False
        return min(moments, default=None)

    @property
    def live(self) -> bool:
        """Whether an incident may still be open."""
        return self._maybe_live and bool(alert_incidents.live_incidents(self.conn))


class ProbationWatch:
    """Notes the probation periods of every Url (``periods``, in the order they began)."""

    def __init__(self, conn: Store, urls: dict[str, int]) -> None:
        self.conn = conn
        self.urls = urls  # Url → subscription id
        self.periods: list[ProbationPeriod] = []
        self._open: dict[str, int] = {}  # Url → index in periods

    def on_results(self, now: datetime, results: CycleResults) -> None:
        failed = any(
            r.attempt is not None and r.attempt.outcome in ("failed", "timed_out")
            for r in results.recorded
        )
        if not failed and not self._open:
            return  # nothing can have started or ended
        on = {
            row.url: row
            for row in load_health(self.conn)
            if row.on_probation and row.next_probe_at is not None
        }
        for url, row in on.items():
            if url not in self._open and url in self.urls:
                # It began when the failure that tipped it over finished: one interval before
                # the first probe slot.
                started = row.next_probe_at - row.probe_interval_seconds  # type: ignore[operator]
                self._open[url] = len(self.periods)
                self.periods.append(ProbationPeriod(self.urls[url], url, started, None))
        for url in [url for url in self._open if url not in on]:
            index = self._open.pop(url)
            period = self.periods[index]
            self.periods[index] = ProbationPeriod(
                period.subscription_id, url, period.started_at, _first_200(results, period)
            )

    def on_cycle(self, now: datetime) -> None:
        return None


def _first_200(results: CycleResults, period: ProbationPeriod) -> float | None:
    """When the 200 that ended the probation came (the earliest of this cycle's)."""
    moments = [
        r.attempt.finished_at
        for r in results.recorded
        if r.subscription_id == period.subscription_id
        and r.attempt is not None
        and r.attempt.outcome in ("delivered", "late_delivered")
    ]
    return min(moments, default=None)
