"""The delivery engine: cycles of claims, fresh signatures, concurrent POSTs and batched results.

One ``Engine`` delivers the queue of a store (every account, or one). Each cycle of an account:

1. reads its settings (so ``settings set`` takes effect at the next cycle) and claims due
   deliveries as leases: MaxConcurrentRequests less the account's requests still in flight (sent
   and not settled: awaiting an answer, or kept open in the late window), so that at no moment
   more than MaxConcurrentRequests of them are in flight; the transport is sized for the sum of
   the accounts' MaxConcurrentRequests (``Transport.size_for``). The limits are the account's,
   not one process's: every dispatcher on the store takes the account's cycle in turn and counts
   the requests the others hold (``store/ceilings.py``, in the claim's transaction). The cadence,
   the room and the claim are ``turns.Turns``'s;
2. per delivery (``admission.admit``): ``policy.check_due`` (max attempts, TTL: dead-lettered
   now, at due time, with the reason), the https rule (a Url stored before the API refused it:
   dead-lettered unsent), then probation (``probation.Probation``: a delivery to an endpoint whose
   probe slot is not open is put off to that slot, recorded as ``skipped``, no attempt spent),
   then its body;
3. signs the batch for the moment it goes out (every attempt gets a fresh Timestamp and
   Signature, by the account's signer: ``account_state.AccountState``), hands it to the
   transport at once and waits Duration, counted from the cycle's start: the next cycle is due
   Duration after this one was due, or when this one's work ends if that is later (the cadence
   then goes on from there). A transport that reads neither bodies nor signatures (``payloads``
   False: the simulator's model) is sent neither.

At the start of every cycle the engine takes the answers that arrived, applies
``policy.after_attempt`` to each (200 delivered; 400/413 dead-lettered; anything else, a
connection error or no answer within 30 s: retried with backoff), and records all of them, with
endpoint health, in ONE transaction (``store.delivery_results.record_results``), the same that then
claims for the accounts whose turn it is (one transaction per cycle, not two: ``BEGIN``/``COMMIT``
were a tenth of a busy cycle's store work in the simulator). The real dispatcher (``store_thread``)
claims and sends first and records in a second transaction while those requests are on the wire:
under the account's ceiling, time spent before sending is time no request of it is out (a late
success recorded after a claim can then not stop a retry claimed in the same cycle: best effort,
as below). A request that got no
answer within the response timeout is recorded ``timed_out`` (its retry scheduled) but kept open
until the late-success window ends: a 200 within it is recorded ``late_delivered`` by no owner,
which cancels the pending retry (best effort: a retry already sent may duplicate).

Every rule duration is divided by ``time_scale`` (``rule_time.RuleTime``); the clock, the
transport and the random source are injected, so the simulator runs this same engine on a
``FakeClock``, an in-memory store and a model transport.

    engine = Engine(conn, transport=CurlTransport(), clock=SystemClock(), rng=random.Random())
    totals = await engine.run(stop=stop_event)          # or: await engine.run(once=True)
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from prefctl.clock import Clock, SystemClock
from prefctl.dispatcher.account_state import AccountState
from prefctl.dispatcher.admission import Going, admit
from prefctl.dispatcher.config_cache import ConfigCache
from prefctl.dispatcher.inflight import InFlight, Item
from prefctl.dispatcher.leases import SWEEP_SECONDS, LeaseOwner, release_dead_owners
from prefctl.dispatcher.observer import CycleResults, EngineObserver, guarded, recorded_of
from prefctl.dispatcher.probation import Probation
from prefctl.dispatcher.rule_time import RuleTime
from prefctl.dispatcher.totals import CycleReport, EngineTotals
from prefctl.dispatcher.transport import Request, Transport
from prefctl.dispatcher.turns import Plan, Turns
from prefctl.errors import NotFoundError, PrefctlError
from prefctl.store import Store, ceilings, dispatcher_state
from prefctl.store.accounts import Account, get_account
from prefctl.store.db import transaction
from prefctl.store.delivery_claims import ClaimedDelivery, release_claims, release_orphans
from prefctl.store.delivery_results import record_results
from prefctl.store.timestamps import epoch, wire_time
from prefctl.webhooks.signature import RAW

__all__ = ["CycleReport", "Engine", "EngineTotals"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# In --once mode, how often (real seconds) to look for answers once nothing more is claimed.
ONCE_POLL_SECONDS = 0.02
# A cycle's deliveries go to the transport in parts of this many, so that sending starts while
# the rest are prepared.
SEND_CHUNK = 500
# How long to wait (real seconds) before trying again to reach a store that went away, doubling.
RECONNECT_FIRST_SECONDS = 0.2
RECONNECT_MAX_SECONDS = 5.0
# How long to wait (rule seconds) before looking again at a store that has no account yet.
NO_ACCOUNT_WAIT_SECONDS = 1.0


class Engine:
    """Delivers a store's queue (see the module docstring). Use it from one event loop.

    ``account`` None delivers every account of the store, each on its own cadence.
    ``static_config``: the store is this engine's alone (the simulator's private in-memory store):
    its accounts, settings and TLS rows cannot change while the engine runs, so they are read once,
    not checked each cycle, and no other dispatcher shares its accounts' limits. Otherwise every
    account's MaxConcurrentRequests and Duration hold across all the dispatchers on the store
    together (``turns.Turns``).
    """

    def __init__(
        self,
        conn: Store,
        *,
        transport: Transport,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        account: str | None = None,
        time_scale: float = 1.0,
        observers: Sequence[EngineObserver] = (),
        store_thread: bool = False,
        static_config: bool = False,
        signature_encoding: str = RAW,
    ) -> None:
        if not time_scale > 0:
            raise ValueError("time_scale must be greater than 0")
        self.conn = conn
        self.transport = transport
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.account = account
        self.time_scale = time_scale
        self.signature_encoding = signature_encoding
        self.observers = list(observers)
        self.store_thread = store_thread
        self.totals = EngineTotals()
        self._owner: LeaseOwner | None = None
        self._inflight: InFlight | None = None
        self._turns: Turns | None = None
        self._accounts: dict[str, AccountState] = {}
        self._config = ConfigCache(conn, account, static=static_config)
        self._shared = not static_config  # the accounts' limits are kept in the store
        self._carried: list[Item] = []  # results known before their cycle's batch
        self._ceiling = 0  # the sum of the accounts' MaxConcurrentRequests, as last sized
        self._woken = asyncio.Event()  # ``wake``: deliveries came due since the last cycle
        self._next_sweep = time.monotonic() + SWEEP_SECONDS  # ``_sweep``; ``start`` swept

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Give back the leases of dead dispatchers, load endpoint health (idempotent)."""
        if self._owner is not None:
            return
        if self.account is not None and get_account(self.conn, self.account) is None:
            raise NotFoundError(f"no account {self.account} in the store")
        released = release_dead_owners(self.conn)
        if released:
            log.info("took back %d deliveries leased by a dispatcher that is gone", released)
        rules = RuleTime(epoch(self.clock.now()), self.time_scale)
        probation = Probation.load(self.conn, rules, self.account)
        self._inflight = InFlight(
            rules, self.rng, probation, self.time_scale, wire_wait=self.transport.wire_wait
        )
        self._owner = LeaseOwner()
        self._turns = Turns(
            self.conn,
            self._config,
            self._inflight,
            self._owner,
            time_scale=self.time_scale,
            shared=self._shared,
        )

    async def run(self, *, stop: asyncio.Event | None = None, once: bool = False) -> EngineTotals:
        """Run cycles until ``stop`` is set or, with ``once``, until nothing is due and every
        request has its answer or has timed out; then ``close``. Returns the totals."""
        await self.start()
        try:
            while stop is None or not stop.is_set():
                try:
                    self._take_wake()
                    await self._sweep()
                    await self.run_cycle()
                    if once and self._drained():
                        break
                    wake = self._next_wake(once)
                except PrefctlError as exc:
                    if not await self._reconnect(exc, stop):
                        raise
                    continue
                await self._sleep_until(wake, stop)
        finally:
            await self.close()
        return self.totals

    async def _release_orphans(self) -> None:
        """After a reconnection: a claim whose commit the engine never heard of (the connection
        broke) leased deliveries it will never send; give them back now rather than when their
        leases expire."""
        if self._owner is None or self._inflight is None:
            return
        keep = self._inflight.leased() | {done.delivery_id for _, done in self._carried}
        released = await self._in_store(release_orphans, self.conn, f"{self._owner.base}:", keep)
        if released:
            log.info("gave back %d deliveries claimed as the connection broke", released)

    async def _sweep(self) -> None:
        """Every ``SWEEP_SECONDS``, give back the leases of dead dispatchers on this host (a
        dispatcher beside this one was killed): they are retried now, not when they expire."""
        moment = time.monotonic()
        if moment < self._next_sweep:
            return
        self._next_sweep = moment + SWEEP_SECONDS
        released = await self._in_store(release_dead_owners, self.conn)
        if released:
            log.info("took back %d deliveries leased by a dispatcher that is gone", released)

    def wake(self) -> None:
        """Deliveries came due (a notification of the store: ``store/wakeups.py``): an account
        that was idle (its last cycle claimed nothing) starts its next cycle now instead of at
        its next turn. Call it on the engine's loop."""
        self._woken.set()

    def _take_wake(self) -> None:
        if not self._woken.is_set():
            return
        self._woken.clear()
        now = epoch(self.clock.now())
        for account in self._accounts.values():
            if account.idle:
                account.next_cycle_at = min(account.next_cycle_at, now)

    async def _reconnect(self, exc: PrefctlError, stop: asyncio.Event | None) -> bool:
        """After a failure of the store's connection (a PostgreSQL server restarted or out of
        reach), reconnect, waiting between tries, until it answers (True) or ``stop`` is set
        (False). False at once for any other error: it is the caller's. Results not recorded
        when the connection broke are recorded by the next cycle; claims rolled back with it
        were never sent."""
        lost = getattr(self.conn, "lost", None)
        reconnect = getattr(self.conn, "reconnect", None)
        if lost is None or reconnect is None or not lost():
            return False
        log.warning("lost the store's connection (%s): reconnecting", exc)
        delay = RECONNECT_FIRST_SECONDS
        while stop is None or not stop.is_set():
            try:
                await asyncio.to_thread(reconnect)
            except PrefctlError as again:
                log.debug("the store does not answer yet: %s", again)
                await self._sleep_until(epoch(self.clock.now()) + delay, stop, real=True)
                delay = min(delay * 2, RECONNECT_MAX_SECONDS)
                continue
            log.warning("reconnected to the store")
            await self._release_orphans()
            return True
        return False

    async def close(self) -> None:
        """Record the answers already in, give back the leases of requests still unanswered
        (retried later without spending an attempt) and abandon the open ones."""
        if self._owner is None or self._inflight is None:
            return
        now = epoch(self.clock.now())
        results, late, _ = self._inflight.collect(now, self.transport.take(), expire=False)
        await self._record(now, [*self._take_carried(), *results, *late])
        keys, owners = self._inflight.abandon()
        self.transport.cancel(keys)
        if owners or self._shared:
            with transaction(self.conn):
                for owner in owners:
                    release_claims(self.conn, owner)
                if self._shared:
                    ceilings.release_slots(self.conn, self._owner.base)
        self._owner.retire()
        self._owner = None

    # -- one cycle ---------------------------------------------------------------------------
    async def run_cycle(self) -> CycleReport:
        """Record what came back and claim for each account whose turn it is, in one store
        transaction; then tell the observers and send what was claimed. With ``store_thread``
        (the real dispatcher), when there is both to record and room to claim, the claims are
        made and sent first and the answers recorded while those requests are on the wire: the
        store's work for a full cycle is a good part of a second on a busy machine, and no
        request of the account may go out before its cycle's claim."""
        await self.start()
        assert self._inflight is not None
        now = epoch(self.clock.now())
        results, late, expired = self._inflight.collect(now, self.transport.take(), expire=True)
        if expired:
            self.transport.cancel(expired)
        batch = self._batch([*self._take_carried(), *results, *late])
        assert self._turns is not None
        cycle = self.totals.cycles
        plans = [
            self._turns.plan(row, account, now, cycle=cycle)
            for row, account in self._due_accounts(now)
        ]
        try:
            if self.store_thread and batch and any(plan.room > 0 for plan in plans):
                _, claims = await self._in_store(self._store_cycle, [], now, plans)
                claimed, sent = await self._dispatch_all(plans, claims, now)
                applied, _ = await self._in_store(self._store_cycle, batch, now, [])
            else:
                applied, claims = await self._in_store(self._store_cycle, batch, now, plans)
                claimed, sent = -1, 0  # sent below, once the batch is recorded
        except PrefctlError:
            # The store failed (its connection broke): the transaction that would have recorded
            # the batch was rolled back, so the next cycle records it (``_reconnect``).
            self._carried[:0] = batch
            raise
        recorded = self._recorded(batch, applied)
        if claimed < 0:
            claimed, sent = await self._dispatch_all(plans, claims, now)
        moment = self.clock.now()
        if plans:
            self.totals.cycles += 1
            ended = epoch(moment)
            for plan in plans:  # a cycle that overran its Duration: the next starts as it ends
                plan.account.next_cycle_at = max(plan.account.next_cycle_at, ended)
        for observer in self.observers:
            guarded(observer.on_cycle, moment)
        return CycleReport(now, len(plans), claimed, sent, recorded)

    def _due_accounts(self, now: float) -> list[tuple[Account, AccountState]]:
        self._config.refresh()  # what changed in the store takes effect from this cycle
        rows = self._config.accounts()
        names = {row.service_client_id for row in rows}
        for gone in [name for name in self._accounts if name not in names]:
            del self._accounts[gone]
        # The transport makes room for every request the accounts' ceilings allow at once.
        settings = self._config.settings
        ceiling = sum(settings(row.service_client_id).max_concurrent_requests for row in rows)
        if ceiling != self._ceiling:
            self._ceiling = ceiling
            self.transport.size_for(ceiling)
        due = []
        for row in rows:
            state = self._accounts.setdefault(row.service_client_id, AccountState())
            if state.next_cycle_at <= now:
                due.append((row, state))
        return due

    def _store_cycle(
        self, batch: list[Item], now: float, plans: list[Plan]
    ) -> tuple[set[int], list[list[ClaimedDelivery]]]:
        """The store's part of a cycle, in ONE transaction: the batch of results and endpoint
        health, then each account's claim. Returns the delivery ids the batch changed and the
        claims, in the order of ``plans``."""
        assert self._inflight is not None
        assert self._turns is not None
        turns, probation = self._turns, self._inflight.probation
        applied: set[int] = set()
        claims: list[list[ClaimedDelivery]] = []
        if not batch and not probation.dirty and not turns.claiming(plans):
            return applied, [[] for _ in plans]
        with transaction(self.conn):
            if batch:
                applied.update(record_results(self.conn, [r for _, r in batch]).applied)
            probation.save(self.conn, now=now)
            for plan in plans:
                claims.append(turns.claim(plan, now))
            if self._shared and batch:
                turns.report_settled(batch, plans, now, known=self._accounts)
        return applied, claims

    async def _dispatch_all(
        self, plans: list[Plan], claims: list[list[ClaimedDelivery]], now: float
    ) -> tuple[int, int]:
        """Send each plan's claims. Returns how many were claimed and sent."""
        claimed = sent = 0
        for plan, got in zip(plans, claims, strict=True):
            claimed += len(got)
            sent += await self._dispatch(plan, got, now)
        return claimed, sent

    async def _dispatch(self, plan: Plan, claimed: list[ClaimedDelivery], now: float) -> int:
        """Check each claimed delivery against the policy, the https rule and probation
        (``admission.admit``), then send the rest in parts. Returns how many were sent."""
        if not claimed:
            return 0
        assert self._inflight is not None
        inflight, row, account, owner = self._inflight, plan.row, plan.account, plan.owner
        name = row.service_client_id
        self.totals.claimed += len(claimed)
        account.prepare(row, self._config.tls(name), self.signature_encoding)
        sent = 0
        for first in range(0, len(claimed), SEND_CHUNK):
            going, unsent = admit(
                claimed[first : first + SEND_CHUNK],
                account=name,
                settings=plan.settings,
                rules=inflight.rules,
                probation=inflight.probation,
                now=now,
                owner=owner,
                payloads=self.transport.payloads,
            )
            self._carried.extend(unsent)
            if going:
                self._send(going, owner, account)
                sent += len(going)
            if first + SEND_CHUNK < len(claimed):
                # The transport starts on this part while the next one is prepared.
                await asyncio.sleep(0)
        return sent

    def _send(self, going: list[Going], owner: str, account: AccountState) -> None:
        """Sign a part of the cycle for the moment it goes out and hand it to the transport:
        every attempt carries the Timestamp of its sending; the attempts sent in the same
        millisecond share it, and so its Signature."""
        inflight = self._inflight
        assert inflight is not None
        sent_at = epoch(self.clock.now())
        header = account.sign(wire_time(sent_at)) if self.transport.payloads else None
        timeout, late_window, identity = inflight.timeout, inflight.late_window, account.tls
        requests = [
            Request(
                inflight.track(delivery, owner, sent_at, probe),
                delivery.url,
                body,
                header,
                timeout,
                late_window,
                identity,
            )
            for delivery, probe, body in going
        ]
        self.totals.sent += len(requests)
        self.transport.send(requests)

    # -- recording ---------------------------------------------------------------------------
    def _take_carried(self) -> list[Item]:
        carried, self._carried = self._carried, []
        return carried

    async def _in_store(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a batch statement on the store; with ``store_thread``, on a worker thread, so that
        the transport keeps answering while SQLite works (it lets go of the GIL meanwhile). The
        engine never runs two at once, so its one connection is used by one thread at a time."""
        if self.store_thread:
            return await asyncio.to_thread(call, *args, **kwargs)
        return call(*args, **kwargs)

    def _batch(self, items: list[Item]) -> list[Item]:
        """One result per delivery: a second one waits for the next batch."""
        batch: list[Item] = []
        seen: set[int] = set()
        for item in items:
            if item[1].delivery_id in seen:
                self._carried.append(item)
            else:
                seen.add(item[1].delivery_id)
                batch.append(item)
        return batch

    async def _record(self, now: float, items: list[Item]) -> int:
        """Write a batch of results and endpoint health in one transaction (no claims: the
        engine is closing), then tell the observers. Returns the batch size."""
        batch = self._batch(items)
        applied, _ = await self._in_store(self._store_cycle, batch, now, [])
        return self._recorded(batch, applied)

    def _recorded(self, batch: list[Item], applied: set[int]) -> int:
        """Count a recorded batch and tell the observers. Returns the batch size."""
        recorded = recorded_of(batch, applied)
        self.totals.count(recorded)
        if recorded and self.observers:
            view = CycleResults.read(self.conn, recorded)
            moment = self.clock.now()
            for observer in self.observers:
                guarded(observer.on_results, moment, view)
        return len(batch)

    # -- waiting -----------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """Nothing in flight, nothing waiting to be recorded and nothing due now: what ``run``
        with ``once`` stops on (a driver of ``run_cycle``, like the simulator, asks it too)."""
        return self._drained()

    def next_wake(self, *, once: bool = False) -> float:
        """When the next cycle should run (Unix seconds): the next account's turn, the next
        answer or timeout; with ``once`` and the queue drained, soon (answers are polled)."""
        return self._next_wake(once)

    def _drained(self) -> bool:
        assert self._inflight is not None
        if self._inflight.awaiting or self._carried:
            return False
        return not dispatcher_state.due_exists(self.conn, epoch(self.clock.now()), self.account)

    def _next_wake(self, once: bool) -> float:
        assert self._inflight is not None
        now = epoch(self.clock.now())
        if once and self._carried:
            return now  # results known already (dead at due time, put off): record them now
        idle = now + NO_ACCOUNT_WAIT_SECONDS / self.time_scale
        wake = min((a.next_cycle_at for a in self._accounts.values()), default=idle)
        deadline = self._inflight.next_deadline()
        if deadline is not None:
            wake = min(wake, deadline)
            if once and not any(a.full for a in self._accounts.values()):
                # The queue is drained: only answers are awaited, so look for them often.
                wake = min(wake, now + ONCE_POLL_SECONDS)
        return wake

    async def _sleep_until(
        self, wake: float, stop: asyncio.Event | None, *, real: bool = False
    ) -> None:
        """Sleep until ``wake``, or until ``stop`` is set or the engine is woken (``wake``);
        ``real``: on the event loop's time, whatever the engine's clock."""
        delay = wake - epoch(self.clock.now())
        if delay <= 0:
            await asyncio.sleep(0)
            return
        sleeping = asyncio.sleep(delay) if real else self.clock.sleep(delay)
        if stop is None and real:
            await sleeping
            return
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(sleeping)]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        if not real:
            waits.append(asyncio.ensure_future(self._woken.wait()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
