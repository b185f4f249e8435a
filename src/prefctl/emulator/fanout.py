"""Which deliveries a profile write's events make: one per event and matching subscription.

Every profile write fans its events out to the account's subscriptions that take new events
(``store.subscriptions.fanout_targets``: Succeeded and Active, or Paused with catch-up, which
holds them). Those rarely change while writes keep coming, so a ``Fanout`` keeps each account's
targets with their parsed selections and re-reads them only when the store's subscriptions
version moved (a counter kept by triggers, read in the write's own transaction, so a change
committed by any connection or process is seen by the next write). It also remembers which
targets an event type and filter values went to; matching depends on nothing else.

    >>> fanout = Fanout()                      # one per emulator (ctx.shared)
    >>> fanout.deliveries(conn, "DEMO_CORP", [(rowid, change), …])
    [NewDelivery(event_rowid=…, subscription_id=3, held=False), …]
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from prefctl.emulator.matching import MatchableEvent, Selector, selector_for
from prefctl.store import Store, subscriptions
from prefctl.store.deliveries import NewDelivery

__all__ = ["Fanout"]

# Event kinds (type and filter values) remembered per account; the catalog has ~80 types and
# filters are few, so this bound is only reached by unusual data.
_MEMO_SIZE = 4096

Target = tuple[int, bool]  # (subscription id, held)


@dataclass
class _Account:
    version: int
    targets: list[tuple[int, bool, Selector]]
    memo: dict[tuple[str, tuple[str, ...]], list[Target]] = field(default_factory=dict)

    def targets_of(self, event: MatchableEvent) -> list[Target]:
        key = (event.event_type, event.filter_values)
        found = self.memo.get(key)
        if found is None:
            if len(self.memo) >= _MEMO_SIZE:
                self.memo.clear()
            found = [(sid, held) for sid, held, selector in self.targets if selector.matches(event)]
            self.memo[key] = found
        return found


class Fanout:
    """The fan-out of profile writes, with each account's targets cached (module docstring)."""

    def __init__(self) -> None:
        self._accounts: dict[str, _Account] = {}
        self._lock = threading.Lock()

    def deliveries(
        self,
        conn: Store,
        account: str,
        events: Iterable[tuple[int, MatchableEvent]],
    ) -> list[NewDelivery]:
        """The deliveries of ``events`` (each with its stored row id), in event order then
        subscription order. Call inside the write's transaction."""
        state = self._account(conn, account)
        return [
            NewDelivery(rowid, subscription_id, held)
            for rowid, event in events
            for subscription_id, held in state.targets_of(event)
        ]

    def _account(self, conn: Store, account: str) -> _Account:
        version = subscriptions.subscriptions_version(conn)
        with self._lock:
            state = self._accounts.get(account)
            if state is None or state.version != version:
                targets = [
                    (t.subscription_id, t.held, selector_for(t.selections_json))
                    for t in subscriptions.fanout_targets(conn, account)
                ]
                state = self._accounts[account] = _Account(version, targets)
            return state
