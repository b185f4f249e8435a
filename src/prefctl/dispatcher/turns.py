"""An account's turn in a cycle: its cadence (Duration) and its room (MaxConcurrentRequests).

``Turns.plan`` keeps the account's cadence and sizes its turn; ``Turns.claim``, in the cycle's
store transaction, claims due deliveries as leases:

- Duration counts from the start of a cycle: cycles are due every Duration, and one that starts
  late keeps that cadence (``store.ceilings.next_cycle``);
- MaxConcurrentRequests is a ceiling on the account's requests in flight (sent and not settled):
  a cycle claims only what keeps it there.

Both limits are the account's, not one engine's (``shared``): every dispatcher on the store takes
the account's cycle in turn, Duration apart, and counts the requests the others hold
(``store/ceilings.py``, in the claim's transaction); each reports what it holds under a lease, and
``report_settled`` tells the others when requests of an account settle between its turns. An
engine whose store is its alone (the simulator's) only keeps its own cadence and count.

    turns = Turns(conn, config, inflight, owner, time_scale=1.0, shared=True)
    plan = turns.plan(row, state, now, cycle=3)
    with transaction(conn):
        claimed = turns.claim(plan, now)
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from prefctl.dispatcher.account_state import AccountState
from prefctl.dispatcher.config_cache import ConfigCache, DeliverySettings
from prefctl.dispatcher.inflight import InFlight, Item
from prefctl.dispatcher.leases import LeaseOwner, lease_seconds
from prefctl.store import Store, ceilings, dispatcher_state
from prefctl.store.accounts import Account
from prefctl.store.delivery_claims import ClaimedDelivery, claim_due

__all__ = ["Plan", "Turns"]


@dataclass(slots=True)
class Plan:
    """An account's turn in a cycle: what it may claim, and under which lease."""

    row: Account
    account: AccountState
    settings: DeliverySettings
    room: int
    owner: str
    lease: float
    period: float


class Turns:
    """An engine's turns at its accounts' cycles (see the module docstring)."""

    def __init__(
        self,
        conn: Store,
        config: ConfigCache,
        inflight: InFlight,
        owner: LeaseOwner,
        *,
        time_scale: float,
        shared: bool,
    ) -> None:
        self.conn = conn
        self.config = config
        self.inflight = inflight
        self.owner = owner
        self.time_scale = time_scale
        self.shared = shared

    def plan(self, row: Account, account: AccountState, now: float, *, cycle: int) -> Plan:
        """An account's turn: keep its cadence and say how much it may claim."""
        name = row.service_client_id
        settings = self.config.settings(name)
        duration = settings.duration_seconds
        # Duration counts from the start of a cycle: cycles are due every Duration, and one that
        # starts late (the loop was busy, the simulator skipped idle cycles) keeps that cadence;
        # the next is due at the cadence's next point, or as this one's work ends if that is
        # later (``Engine.run_cycle``), the cadence then counting from there.
        period = duration / self.time_scale
        account.next_cycle_at = ceilings.next_cycle(account.next_cycle_at or now, now, period)
        # MaxConcurrentRequests is a ceiling on the account's requests in flight: a cycle claims
        # only what keeps it there (a request counts until its answer, or the end of the late
        # window, settles it).
        room = settings.max_concurrent_requests - self.inflight.open_by_account[name]
        account.full = True
        owner = self.owner.for_cycle(cycle)
        lease = lease_seconds(duration, self.time_scale)
        return Plan(row, account, settings, room, owner, lease, period)

    def claiming(self, plans: list[Plan]) -> bool:
        """Whether the cycle's transaction has claims to make for ``plans``."""
        # Shared limits: every turn goes to the store, if only to say what this engine holds.
        return bool(plans) if self.shared else any(plan.room > 0 for plan in plans)

    def claim(self, plan: Plan, now: float) -> list[ClaimedDelivery]:
        """The account's claim for its turn, in the caller's transaction."""
        plan.account.idle = False
        if not self.shared:
            return self._claim_room(plan, plan.room, now)
        name = plan.row.service_client_id
        turn = self._turn(plan, now)
        claimed = self._claim_room(plan, turn, now)
        if turn > 0 and not claimed:
            # An idle cycle: the account's next one may start as soon as a wake-up comes, on any
            # dispatcher (``Engine.wake``); cycles that send stay Duration apart, since this one
            # sent nothing a Duration or more after the last that did.
            ceilings.take_turn(self.conn, name, seen=plan.account.next_cycle_at, next_at=now)
        held = self.inflight.open_by_account[name] + len(claimed)
        ceilings.hold(
            self.conn, name, self.owner.base, in_flight=held, lease_until=now + plan.lease
        )
        return claimed

    def report_settled(
        self, batch: list[Item], plans: list[Plan], now: float, *, known: Container[str]
    ) -> None:
        """Tell the other dispatchers that requests of these accounts settled, so that they
        count them no more before this engine's next turn (the accounts of ``plans`` have
        just said what they hold). ``known``: the accounts still in the store."""
        planned = {plan.row.service_client_id for plan in plans}
        for name in {delivery.service_client_id for delivery, _ in batch} - planned:
            if name not in known:
                continue  # removed from the store meanwhile: its row's lease runs out
            duration = self.config.settings(name).duration_seconds
            until = now + lease_seconds(duration, self.time_scale)
            held = self.inflight.open_by_account[name]
            ceilings.hold(self.conn, name, self.owner.base, in_flight=held, lease_until=until)

    def _turn(self, plan: Plan, now: float) -> int:
        """With limits shared by every dispatcher on the store: what this engine may claim for
        the account now, 0 when the cycle is not its own. The account's cycle is taken by one
        dispatcher at a time, Duration apart (the store keeps when the next may start); the room
        is MaxConcurrentRequests less the requests in flight of every dispatcher. An engine that
        would have no room leaves the turn to one that has (the others' counts are those of their
        last cycle) and looks again at its own next cycle."""
        conn, account, name = self.conn, plan.account, plan.row.service_client_id
        seen = ceilings.next_cycle_at(conn, name)
        if seen is not None and seen > now:
            account.next_cycle_at = seen  # another dispatcher runs this cycle
            return 0
        if plan.room <= 0:
            return 0
        room = plan.room - ceilings.others_in_flight(conn, name, self.owner.base, now=now)
        if room <= 0:
            return 0
        # The store's cadence, or this engine's when later (its last cycle overran Duration).
        next_at = account.next_cycle_at
        if seen is not None:
            next_at = max(next_at, ceilings.next_cycle(seen, now, plan.period))
        if not ceilings.take_turn(conn, name, seen=seen, next_at=next_at):
            return 0
        account.next_cycle_at = next_at
        return room

    def _claim_room(self, plan: Plan, room: int, now: float) -> list[ClaimedDelivery]:
        if room <= 0:
            return []
        name = plan.row.service_client_id
        settings = plan.settings
        # Deliveries of a subscription that is not receiving are claimed only to be dead-lettered
        # (TTL or attempts used up); a millisecond's margin keeps the store's TTL test from
        # claiming one that policy.check_due would still let go.
        ttl = 60.0 * settings.event_ttl_minutes / self.time_scale
        claimed = claim_due(
            self.conn,
            now,
            room,
            plan.lease,
            plan.owner,
            account=name,
            expired_before=now - ttl - 0.001,
            max_attempts=settings.max_delivery_attempts,
        )
        # In --once mode, whether more is due decides between waiting for the next cycle and
        # polling for the last answers.
        plan.account.full = len(claimed) >= room and dispatcher_state.due_exists(
            self.conn, now, name
        )
        # Nothing claimed: this cycle sent nothing, so the last one that did started a Duration
        # or more ago, and a cycle woken early (``Engine.wake``) keeps cycles that send Duration
        # apart.
        plan.account.idle = not claimed
        return claimed
