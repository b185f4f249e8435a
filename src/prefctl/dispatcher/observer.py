"""What the engine tells others after each cycle: the ``EngineObserver`` protocol.

Alerts, ``prefctl demo``, ``dispatcher run``'s progress and the simulator's report all watch the
engine the same way. After each cycle's results are recorded the engine calls, on its own loop and
outside any transaction:

- ``on_results(now, results)`` when the cycle recorded something: every recorded attempt
  (``results.recorded``), the dead letters with their full record (``results.dead_letters``: event,
  subscription, reason, attempts, last status and error, first and last attempt times), and the
  subscriptions that got a 200 (``results.delivered_subscriptions``);
- ``on_cycle(now)`` after every ``run_cycle`` (each cycle, and the wake-ups in between that only
  collect answers), for time-driven work (alert batching, quiet closes).

Observers must return quickly: one that does slow work (SMTP) wraps itself in
``BackgroundObserver``, which runs its calls in order on a worker thread (it then needs its own
store connection). An observer that raises is logged and the engine goes on delivering.

The emulator's dispatcher and ``dispatcher run`` add the observers named in
``OBSERVER_FACTORIES``: ``"module:function"`` entries called as ``function(ObserverContext)``,
returning an observer or None (e.g. when the feature is off).
"""

from __future__ import annotations

import concurrent.futures
import importlib
import logging
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from prefctl.clock import Clock
from prefctl.store import Store
from prefctl.store.delivery_claims import ClaimedDelivery
from prefctl.store.delivery_history import DeliveryRecord, get_delivery
from prefctl.store.delivery_results import Attempt, DeliveryResult
from prefctl.store.timestamps import wire_time

__all__ = [
    "OBSERVER_FACTORIES",
    "BackgroundObserver",
    "CycleResults",
    "DeadLetter",
    "EngineObserver",
    "ObserverContext",
    "Recorded",
    "guarded",
    "load_observers",
    "recorded_of",
]

log = logging.getLogger(__name__)

# "module:function" entries; each function(ObserverContext) returns an EngineObserver or None.
OBSERVER_FACTORIES: tuple[str, ...] = ("prefctl.dispatcher.alerts.monitor:observer",)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A delivery that was dead-lettered, as the store now records it (times: Unix seconds)."""

    delivery_id: int
    event_id: str
    event_type: str
    profile_id: int | None
    subscription_id: int
    service_client_id: str
    reason: str
    attempts: int
    last_status: int | None
    last_error: str | None
    first_attempt_at: float | None
    last_attempt_at: float | None
    dead_lettered_at: float | None

    @classmethod
    def from_record(cls, record: DeliveryRecord) -> DeadLetter:
        return cls(
            delivery_id=record.delivery_id,
            event_id=record.event_id,
            event_type=record.event_type,
            profile_id=record.profile_id,
            subscription_id=record.subscription_id,
            service_client_id=record.service_client_id,
            reason=record.dead_letter_reason or "",
            attempts=record.attempts,
            last_status=record.last_status,
            last_error=record.last_error,
            first_attempt_at=record.first_attempt_at,
            last_attempt_at=record.last_attempt_at,
            dead_lettered_at=record.finished_at,
        )

    def to_dict(self) -> dict[str, Any]:
        """The dead-letter record of docs/cli.md (snake_case, RFC 3339 times)."""
        return {
            "delivery_id": self.delivery_id,
            "event_id": self.event_id,
            "event_type": self.event_type,
            "subscription_id": self.subscription_id,
            "reason": self.reason,
            "attempts": self.attempts,
            "last_status": self.last_status,
            "last_error": self.last_error,
            "first_attempt_at": _time(self.first_attempt_at),
            "last_attempt_at": _time(self.last_attempt_at),
        }


def _time(seconds: float | None) -> str | None:
    return None if seconds is None else wire_time(seconds)


# Not frozen: made once per delivery on the dispatcher's hot path, where a frozen dataclass's
# __init__ (object.__setattr__ per field) cost ~5x a plain one. Treat it as immutable.
@dataclass(slots=True)
class Recorded:
    """One result of a cycle: the delivery's new ``state`` and the ``attempt`` behind it (None for
    a dead letter at due time, which makes no attempt). ``applied`` is False when the store had
    moved on (the delivery was final, re-leased or deleted): the attempt is logged, nothing else."""

    delivery_id: int
    subscription_id: int
    service_client_id: str
    event_id: str
    event_time: float
    state: Literal["queued", "delivered", "dead_lettered"]
    attempt: Attempt | None
    applied: bool
    dead_letter_reason: str | None = None


def recorded_of(
    batch: Sequence[tuple[ClaimedDelivery, DeliveryResult]], applied: Set[int]
) -> tuple[Recorded, ...]:
    """A batch of results as recorded; ``applied``: the delivery ids the store changed."""
    return tuple(
        Recorded(
            delivery.delivery_id,
            delivery.subscription_id,
            delivery.service_client_id,
            delivery.event_id,
            delivery.event_time,
            done.state,
            done.attempt,
            done.delivery_id in applied,
            done.dead_letter_reason,
        )
        for delivery, done in batch
    )


@dataclass(frozen=True)
class CycleResults:
    """Everything one cycle recorded."""

    recorded: tuple[Recorded, ...] = ()
    dead_letters: tuple[DeadLetter, ...] = ()

    @classmethod
    def read(cls, conn: Store, recorded: tuple[Recorded, ...]) -> CycleResults:
        """``recorded`` with the full record of its dead letters, read from ``conn``."""
        dead = [r.delivery_id for r in recorded if r.applied and r.state == "dead_lettered"]
        records = (get_delivery(conn, delivery_id) for delivery_id in dead)
        return cls(recorded, tuple(DeadLetter.from_record(r) for r in records if r is not None))

    @property
    def delivered_subscriptions(self) -> frozenset[int]:
        """Subscriptions that got a 200 (on time or late) in this cycle."""
        return frozenset(
            r.subscription_id
            for r in self.recorded
            if r.attempt is not None and r.attempt.outcome in ("delivered", "late_delivered")
        )


class EngineObserver(Protocol):
    """Watches the engine (see the module docstring). ``now`` is the engine clock's time."""

    def on_results(self, now: datetime, results: CycleResults) -> None: ...

    def on_cycle(self, now: datetime) -> None: ...


@dataclass(frozen=True)
class ObserverContext:
    """What an observer factory may use. ``conn`` is the engine's connection: use it only inside
    the callbacks (same thread), never from a ``BackgroundObserver``'s worker."""

    store_path: Path | str | None  # a SQLite file, a PostgreSQL URL, or None (in memory)
    conn: Store
    clock: Clock
    time_scale: float
    settings: Mapping[str, Any] = field(default_factory=dict)


def load_observers(context: ObserverContext) -> list[EngineObserver]:
    """The observers of ``OBSERVER_FACTORIES`` for one engine."""
    observers = []
    for entry in OBSERVER_FACTORIES:
        module, _, name = entry.partition(":")
        factory: Callable[[ObserverContext], EngineObserver | None] = getattr(
            importlib.import_module(module), name
        )
        observer = factory(context)
        if observer is not None:
            observers.append(observer)
    return observers


class BackgroundObserver:
    """Runs another observer's calls in order on one worker thread, so that the engine does not
    wait for it. ``close`` waits for the calls already made."""

    def __init__(self, observer: EngineObserver, *, name: str = "prefctl-observer") -> None:
        self._observer = observer
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)

    def on_results(self, now: datetime, results: CycleResults) -> None:
        self._pool.submit(guarded, self._observer.on_results, now, results)

    def on_cycle(self, now: datetime) -> None:
        self._pool.submit(guarded, self._observer.on_cycle, now)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def guarded(call: Callable[..., None], *args: Any) -> None:
    """Call an observer; an exception it raises is logged, never passed on to deliveries."""
    try:
        call(*args)
    except Exception:  # an observer's bug must not stop deliveries; it is logged with its trace
        log.exception("dispatcher observer %r failed", call)
