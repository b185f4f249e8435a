"""Which of a cycle's claimed deliveries go out, and what becomes of the others, unsent.

Before a claimed delivery is sent, ``admit`` checks, in this order:

1. the policy (``policy.check_due``): attempts used up or TTL passed: dead-lettered now, at due
   time, with the reason;
2. its Url against the https rule (``webhooks.https_rule``): a Url stored before the API refused
   it is dead-lettered ``validation_failed`` unsent, an attempt recorded ``skipped``;
3. probation (``probation.Probation``): a delivery to an endpoint whose probe slot is not open is
   put off to that slot, recorded as ``skipped``, no attempt spent.

The rest go out, with their body (none for a transport that reads no payloads) and whether each
is its endpoint's probe.

    going, unsent = admit(deliveries, account=name, settings=settings, rules=rules,
                          probation=probation, now=now, owner=owner, payloads=True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from prefctl.dispatcher import policy
from prefctl.dispatcher.config_cache import DeliverySettings
from prefctl.dispatcher.inflight import Item, result
from prefctl.dispatcher.probation import Probation
from prefctl.dispatcher.rule_time import RuleTime
from prefctl.store.delivery_claims import ClaimedDelivery
from prefctl.store.delivery_results import Attempt, DeliveryResult
from prefctl.webhooks.https_rule import https_problem

__all__ = ["Going", "admit"]

Going = tuple[ClaimedDelivery, bool, bytes]  # (delivery, sent as its endpoint's probe, body)

_ON_PROBATION = "endpoint on probation: put off to its next probe slot"


def admit(
    deliveries: Sequence[ClaimedDelivery],
    *,
    account: str,
    settings: DeliverySettings,
    rules: RuleTime,
    probation: Probation,
    now: float,
    owner: str,
    payloads: bool,
) -> tuple[list[Going], list[Item]]:
    """Sort ``deliveries`` of ``account``, claimed at ``now`` by ``owner``, into those that go out
    and the results of those that do not (see the module docstring), each in claim order."""
    limits = policy.Limits(settings.max_delivery_attempts, settings.event_ttl_minutes)
    rule_now = rules.rule(now)
    going: list[Going] = []
    unsent: list[Item] = []
    for delivery in deliveries:
        due = rules.rule(delivery.event_time)
        reason = policy.check_due(delivery.attempts, due, rule_now, limits)
        if reason is not None:
            unsent.append((delivery, _dead_lettered(delivery, now, owner, reason)))
            continue
        refused = https_problem(delivery.url, allow_http=settings.allow_http_webhooks)
        if refused is not None:
            # A Url stored before the API refused it: unsent, as a Url failing validation
            # (``deadletters redrive`` sends it once the Url or the setting is fixed).
            skip = Attempt(delivery.attempts + 1, now, now, "skipped", error=f"not sent: {refused}")
            failed = policy.DeadLetterReason.VALIDATION_FAILED
            dead = _dead_lettered(delivery, now, owner, failed, skip)
            unsent.append((delivery, dead))
            continue
        endpoint = (account, delivery.url)
        slot = probation.admit(endpoint, rule_now)
        if slot is not None:
            skip = Attempt(delivery.attempts + 1, now, now, "skipped", error=_ON_PROBATION)
            later = rules.real(slot)
            put_off = result(
                delivery,
                state="queued",
                attempts=delivery.attempts,
                at=now,
                owner=owner,
                attempt=skip,
                next_at=later,
            )
            unsent.append((delivery, put_off))
            continue
        body = delivery.body() if payloads else b""
        going.append((delivery, probation.on_probation(endpoint), body))
    return going, unsent


def _dead_lettered(
    delivery: ClaimedDelivery,
    now: float,
    owner: str,
    reason: policy.DeadLetterReason,
    attempt: Attempt | None = None,
) -> DeliveryResult:
    """``delivery`` dead-lettered at ``now`` for ``reason`` without being sent."""
    dead = result(
        delivery,
        state="dead_lettered",
        attempts=delivery.attempts,
        at=now,
        owner=owner,
        attempt=attempt,
    )
    return replace(dead, dead_letter_reason=reason.value)
