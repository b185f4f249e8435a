"""Endpoint health for the engine: ``policy.EndpointHealth`` per (account, Url), kept in the store.

The rules are the policy's (``EndpointHealth.may_attempt / probe_started / record``); this module
only keeps one health per endpoint, in rule time (``RuleTime``), and says what to write back:

- Only unhealthy endpoints are tracked; a 200 forgets the endpoint.
- **[decision]** While an endpoint is on probation, only the probe's outcome moves it on: a failure
  of a request that went out before probation began is not a failed probe (it would double the
  probe interval for nothing). Any 200 ends probation.
- When probation ends, the deliveries that were put off to its next probe slot are made due at once
  (``store.dispatcher_state.release_waiting``): they waited only for the probe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from prefctl.dispatcher.policy import EndpointHealth, Outcome
from prefctl.dispatcher.rule_time import RuleTime
from prefctl.store import Store, dispatcher_state
from prefctl.store.dispatcher_state import HealthRow

__all__ = ["Endpoint", "Probation"]

Endpoint = tuple[str, str]  # (service_client_id, url)
_HEALTHY = EndpointHealth()


@dataclass
class Probation:
    """The health of every endpoint that failed since its last 200."""

    rules: RuleTime
    _health: dict[Endpoint, EndpointHealth] = field(default_factory=dict)
    _changed: set[Endpoint] = field(default_factory=set)
    _ended: dict[Endpoint, float] = field(default_factory=dict)  # endpoint → real probe slot

    @classmethod
    def load(cls, conn: Store, rules: RuleTime, account: str | None) -> Probation:
        probation = cls(rules)
        for row in dispatcher_state.load_health(conn, account):
            probation._health[(row.service_client_id, row.url)] = EndpointHealth(
                consecutive_failures=row.consecutive_failures,
                on_probation=row.on_probation,
                probe_interval_seconds=row.probe_interval_seconds,
                next_probe_at=None if row.next_probe_at is None else rules.rule(row.next_probe_at),
            )
        return probation

    def on_probation(self, endpoint: Endpoint) -> bool:
        health = self._health.get(endpoint)
        return health is not None and health.on_probation

    def admit(self, endpoint: Endpoint, now: datetime) -> datetime | None:
        """Whether a delivery to ``endpoint`` may go out at ``now``: None if it may (as the probe,
        when on probation: the next slot opens one interval later), else the probe slot to put
        it off to."""
        health = self._health.get(endpoint)
        if health is None:
            return None
        if not health.may_attempt(now):
            return health.next_probe_at
        if health.on_probation:
            self._set(endpoint, health.probe_started(now))
        return None

    def record(self, endpoint: Endpoint, outcome: Outcome, at: datetime, *, probe: bool) -> None:
        """Account for an attempt's outcome at rule time ``at``."""
        health = self._health.get(endpoint)
        if health is None:
            if outcome.succeeded:
                return  # the common case: a healthy endpoint stays healthy
            health = _HEALTHY
        if health.on_probation and not probe and not outcome.succeeded:
            return
        updated = health.record(outcome, at)
        if updated == health:
            return
        if updated == _HEALTHY and health.on_probation and health.next_probe_at is not None:
            self._ended[endpoint] = self.rules.real(health.next_probe_at)
        self._set(endpoint, updated)

    def _set(self, endpoint: Endpoint, health: EndpointHealth) -> None:
        if health == _HEALTHY:
            self._health.pop(endpoint, None)
        else:
            self._health[endpoint] = health
        self._changed.add(endpoint)

    @property
    def dirty(self) -> bool:
        return bool(self._changed or self._ended)

    def save(self, conn: Store, *, now: float) -> None:
        """Write what changed since the last save (inside the caller's transaction)."""
        rows, gone = [], []
        for endpoint in self._changed:
            health = self._health.get(endpoint)
            if health is None:
                gone.append(endpoint)
                continue
            rows.append(
                HealthRow(
                    endpoint[0],
                    endpoint[1],
                    health.consecutive_failures,
                    health.on_probation,
                    health.probe_interval_seconds,
                    None if health.next_probe_at is None else self.rules.real(health.next_probe_at),
                )
            )
        if rows:
            dispatcher_state.save_health(conn, rows, now=now)
        if gone:
            dispatcher_state.delete_health(conn, gone)
        for (account, url), slot in self._ended.items():
            if (account, url) not in self._health:
                dispatcher_state.release_waiting(conn, account, url, slot=slot, now=now)
        self._changed.clear()
        self._ended.clear()
