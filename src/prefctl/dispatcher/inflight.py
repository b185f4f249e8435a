"""Requests the engine sent and has not settled: answers, timeouts and the late-success window.

``InFlight`` turns what the transport reports into delivery results, by the rules of
``dispatcher/policy.py`` in rule time:

- an answer within the response timeout is the attempt's outcome (``policy.after_attempt``);
  the timeout (and the late window) count from when the request went on the wire: a request
  that waited for a free connection (``Transport.wire_wait``) gets that time on top, so the
  dispatcher's own queueing is never charged to the endpoint;
- no answer by then: the attempt is recorded ``timed_out`` (its retry scheduled), and the request
  stays open until the late-success window ends; a 200 within it becomes a ``late_delivered``
  result with no lease owner, which delivers the delivery whatever its retry is doing;
- an answer "arrives" at send time + ``elapsed``: a model transport may report it early (the
  simulator knows its latencies), and it waits here until the clock gets there.

Every outcome also goes to the endpoint's health (``probation.Probation``). A request counts as
open for its account (``open_by_account``: what MaxConcurrentRequests bounds) from ``track``
until it is settled: answered, or given up at the end of the late window.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from prefctl.dispatcher import policy
from prefctl.dispatcher.probation import Probation
from prefctl.dispatcher.rule_time import RuleTime
from prefctl.dispatcher.transport import UNSENT_ERROR, Response
from prefctl.store.delivery_claims import ClaimedDelivery
from prefctl.store.delivery_results import Attempt, AttemptOutcome, DeliveryResult

__all__ = ["InFlight", "Item", "Pending", "result"]

State = Literal["queued", "delivered", "dead_lettered"]
Item = tuple[ClaimedDelivery, DeliveryResult]


def result(
    delivery: ClaimedDelivery,
    *,
    state: State,
    attempts: int,
    at: float,
    owner: str | None,
    attempt: Attempt | None,
    next_at: float | None = None,
    reason: str | None = None,
) -> DeliveryResult:
    """A ``DeliveryResult`` for ``delivery``: what happened (``state``, the ``attempt`` made, if
    any), the attempts made so far, when (``at``), the lease ``owner``, and when it is due again
    (``next_at``) or why it was dead-lettered (``reason``)."""
    return DeliveryResult(
        delivery.delivery_id, state, attempts, at, owner, next_at, attempt, reason
    )


@dataclass(slots=True)
class _LateRecord:
    """A delivery with requests in the late window: the latest attempt sent and the open ones."""

    attempts: int = 0
    last_started_at: float = 0.0
    open: int = 0

    def sent(self, attempt_number: int, started_at: float) -> None:
        if attempt_number > self.attempts:
            self.attempts, self.last_started_at = attempt_number, started_at


@dataclass(slots=True)
class Pending:
    """A request sent and not yet settled."""

    delivery: ClaimedDelivery
    owner: str
    started_at: float
    probe: bool
    timed_out: bool = False
    waited: float = 0.0  # before it went on the wire (waiting for a free connection)

    @property
    def attempt_number(self) -> int:
        return self.delivery.attempts + 1


class InFlight:
    """The engine's open requests (see the module docstring); times are real Unix seconds."""

    def __init__(
        self,
        rules: RuleTime,
        rng: random.Random,
        probation: Probation,
        time_scale: float,
        wire_wait: Callable[[int], float | None] | None = None,
    ) -> None:
        self.rules = rules
        self.rng = rng
        self.probation = probation
        self.time_scale = time_scale
        self.timeout = policy.RESPONSE_TIMEOUT_SECONDS / time_scale
        self.late_window = policy.LATE_SUCCESS_WINDOW_SECONDS / time_scale
        # Requests sent and not settled (awaiting their answer, or kept open in the late window),
        # per account: what MaxConcurrentRequests bounds.
        self.open_by_account: Counter[str] = Counter()
        self._keys = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        # Requests within the timeout → their deadline, and the deadlines as a heap (entries whose
        # deadline moved or that settled are skipped when they come up).
        self._awaiting: dict[int, float] = {}
        self._deadlines: list[tuple[float, int]] = []
        self._wire_wait = wire_wait or _sent_at_once
        self._late: OrderedDict[int, None] = OrderedDict()  # timed out, in the late window
        self._future: list[tuple[float, int, Response]] = []  # answers the clock has not reached
        # Deliveries with a request in the late window → what a late 200 must not undercount:
        # the retries sent since (their attempt number, start time) and the open requests.
        self._late_attempts: dict[int, _LateRecord] = {}

    def track(self, delivery: ClaimedDelivery, owner: str, started_at: float, probe: bool) -> int:
        """Remember a request about to be sent; returns its transport key."""
        key = next(self._keys)
        self._pending[key] = Pending(delivery, owner, started_at, probe)
        recorded = self._late_attempts.get(delivery.delivery_id)
        if recorded is not None:  # a retry while an earlier request may still answer late
            recorded.sent(delivery.attempts + 1, started_at)
        deadline = started_at + self.timeout
        self._awaiting[key] = deadline
        heapq.heappush(self._deadlines, (deadline, key))
        self.open_by_account[delivery.service_client_id] += 1
        return key

    @property
    def awaiting(self) -> bool:
        """Whether a request still waits for its answer within the timeout (or a known answer
        waits for the clock)."""
        return bool(self._awaiting or self._future)

    def next_deadline(self) -> float | None:
        """When the next known answer arrives or the oldest request times out."""
        times = []
        if self._future:
            times.append(self._future[0][0])
        deadlines, awaiting = self._deadlines, self._awaiting
        while deadlines and awaiting.get(deadlines[0][1]) != deadlines[0][0]:
            heapq.heappop(deadlines)  # settled, or its deadline moved
        if deadlines:
            times.append(deadlines[0][0])
        return min(times, default=None)

    def collect(
        self, now: float, responses: list[Response], *, expire: bool
    ) -> tuple[list[Item], list[Item], list[int]]:
        """Settle answers that arrived by ``now`` and, with ``expire``, silences past the
        timeout or the late window. Returns (results, late successes — after the results: a
        late success may follow its own timeout — and the keys given up on)."""
        results: list[Item] = []
        late: list[Item] = []
        for response in responses:
            pending = self._pending.get(response.key)
            if pending is None:
                continue
            arrival = pending.started_at + response.elapsed
            if arrival > now:
                heapq.heappush(self._future, (arrival, response.key, response))
            else:
                self._answered(response.key, pending, response, arrival, results, late)
        while self._future and self._future[0][0] <= now:
            arrival, key, response = heapq.heappop(self._future)
            pending = self._pending.get(key)
            if pending is not None:
                self._answered(key, pending, response, arrival, results, late)
        expired: list[int] = []
        if expire:
            deadlines, awaiting = self._deadlines, self._awaiting
            while deadlines and deadlines[0][0] <= now:
                deadline, key = heapq.heappop(deadlines)
                if awaiting.get(key) != deadline:
                    continue  # settled, or its deadline moved
                pending = self._pending[key]
                waited = self._wire_wait(key)
                if waited is None:  # still waiting for a connection after the whole timeout
                    self._unsent(pending, now, results)
                    self._settle(key)
                    expired.append(key)
                    continue
                pending.waited = waited
                on_wire_until = pending.started_at + waited + self.timeout
                if on_wire_until > now:
                    awaiting[key] = on_wire_until
                    heapq.heappush(deadlines, (on_wire_until, key))
                    continue
                self._time_out(key, pending, results)
            while self._late:
                key = next(iter(self._late))
                pending = self._pending[key]
                if pending.started_at + pending.waited + self.late_window > now:
                    break
                self._settle(key)
                expired.append(key)
        return results, late, expired

    def leased(self) -> set[int]:
        """The deliveries of the requests still awaiting their answer: leased to this engine."""
        return {p.delivery.delivery_id for p in self._pending.values() if not p.timed_out}

    def abandon(self) -> tuple[list[int], set[str]]:
        """Forget every request: returns their keys and the lease owners of those that never
        got an answer within the timeout (their leases go back, no attempt spent)."""
        keys = list(self._pending)
        owners = {p.owner for p in self._pending.values() if not p.timed_out}
        self._pending.clear()
        self._awaiting.clear()
        self._deadlines.clear()
        self.open_by_account.clear()
        self._late.clear()
        self._future.clear()
        self._late_attempts.clear()
        return keys, owners

    # -- settling ------------------------------------------------------------------------------
    def _answered(
        self,
        key: int,
        pending: Pending,
        response: Response,
        arrival: float,
        results: list[Item],
        late: list[Item],
    ) -> None:
        if response.status is None and response.error == UNSENT_ERROR:
            if not pending.timed_out:
                self._unsent(pending, arrival, results)
            self._settle(key)
            return
        pending.waited = response.waited
        on_wire = response.elapsed - response.waited  # how long the endpoint took
        if not pending.timed_out and on_wire <= self.timeout:
            outcome = (
                policy.Outcome.http(response.status)
                if response.status is not None
                else policy.Outcome.connection_error(response.error or "no answer")
            )
            self._attempted(pending, outcome, arrival, on_wire, response.error, results)
        else:
            if not pending.timed_out:
                self._time_out(key, pending, results)
            if response.status == 200 and on_wire <= self.late_window:
                late.append(self._late_success(pending, arrival, on_wire))
        self._settle(key)

    def _attempted(
        self,
        pending: Pending,
        outcome: policy.Outcome,
        finished: float,
        elapsed: float | None,
        error: str | None,
        results: list[Item],
    ) -> None:
        """An attempt that ended on time (an answer, a connection error) or timed out."""
        delivery = pending.delivery
        made = pending.attempt_number
        at = self.rules.rule(finished)
        decision = policy.after_attempt(outcome, made, at, self.rng)
        self.probation.record(
            (delivery.service_client_id, delivery.url), outcome, at, probe=pending.probe
        )
        kind: AttemptOutcome = (
            "delivered"
            if decision.action is policy.Action.DELIVERED
            else "timed_out"
            if outcome.failure is policy.FailureKind.TIMEOUT
            else "failed"
        )
        latency = None if elapsed is None else round(elapsed * 1000, 3)
        attempt = Attempt(made, pending.started_at, finished, kind, outcome.status, error, latency)
        owner = pending.owner
        if decision.action is policy.Action.RETRY:
            assert decision.delay_seconds is not None
            next_at = finished + decision.delay_seconds / self.time_scale
            done = result(
                delivery,
                state="queued",
                attempts=made,
                at=finished,
                owner=owner,
                attempt=attempt,
                next_at=next_at,
            )
        elif decision.action is policy.Action.DEAD_LETTER:
            assert decision.reason is not None
            reason = decision.reason.value
            done = result(
                delivery,
                state="dead_lettered",
                attempts=made,
                at=finished,
                owner=owner,
                attempt=attempt,
                reason=reason,
            )
        else:
            done = result(
                delivery,
                state="delivered",
                attempts=made,
                at=finished,
                owner=owner,
                attempt=attempt,
            )
        results.append((delivery, done))
        recorded = self._late_attempts.get(delivery.delivery_id)
        if recorded is not None:
            recorded.sent(made, pending.started_at)

    def _unsent(self, pending: Pending, at: float, results: list[Item]) -> None:
        """A request that found no free connection within the response timeout was never sent:
        nothing reached the endpoint, so it is no attempt (recorded ``skipped``, like a delivery
        put off by probation) and says nothing of the endpoint's health. Queued again, due now.
        (A hung endpoint still reaches its limits: the requests it holds time out, probation
        follows, and the TTL is checked whenever a delivery comes due.)"""
        delivery = pending.delivery
        skip = Attempt(
            pending.attempt_number, pending.started_at, at, "skipped", error=UNSENT_ERROR
        )
        again = result(
            delivery,
            state="queued",
            attempts=delivery.attempts,
            at=at,
            owner=pending.owner,
            attempt=skip,
            next_at=at,
        )
        results.append((delivery, again))

    def _time_out(self, key: int, pending: Pending, results: list[Item]) -> None:
        finished = pending.started_at + pending.waited + self.timeout
        outcome = policy.Outcome.timeout()
        # The error says what happened: a dead letter after timeouts keeps it as its last error.
        self._attempted(pending, outcome, finished, None, outcome.error, results)
        pending.timed_out = True
        del self._awaiting[key]
        self._late[key] = None
        recorded = self._late_attempts.setdefault(pending.delivery.delivery_id, _LateRecord())
        recorded.sent(pending.attempt_number, pending.started_at)
        recorded.open += 1

    def _late_success(self, pending: Pending, arrival: float, elapsed: float) -> Item:
        """A 200 within the late-success window: delivered, by no lease owner (the retry it
        cancels may be queued, or leased again)."""
        delivery = pending.delivery
        self.probation.record(
            (delivery.service_client_id, delivery.url),
            policy.Outcome.http(200),
            self.rules.rule(arrival),
            probe=pending.probe,
        )
        recorded = self._late_attempts.get(delivery.delivery_id)
        attempts, last_started = pending.attempt_number, pending.started_at
        if recorded is not None and recorded.attempts > attempts:
            # A retry went out before this answer came: it counts, and it was the last attempt.
            attempts, last_started = recorded.attempts, recorded.last_started_at
        latency = round(elapsed * 1000, 3)
        attempt = Attempt(
            pending.attempt_number,
            pending.started_at,
            arrival,
            "late_delivered",
            200,
            None,
            latency,
        )
        done = result(
            delivery, state="delivered", attempts=attempts, at=arrival, owner=None, attempt=attempt
        )
        if last_started != attempt.started_at:
            done.last_attempt_at = last_started
        return delivery, done

    def _settle(self, key: int) -> None:
        """Forget a request: answered, or given up at the end of the late window."""
        pending = self._pending.pop(key)
        self._awaiting.pop(key, None)
        self.open_by_account[pending.delivery.service_client_id] -= 1
        self._late.pop(key, None)
        if pending.timed_out:
            delivery_id = pending.delivery.delivery_id
            recorded = self._late_attempts[delivery_id]
            recorded.open -= 1
            if recorded.open == 0:
                del self._late_attempts[delivery_id]


def _sent_at_once(_key: int) -> float:
    return 0.0
