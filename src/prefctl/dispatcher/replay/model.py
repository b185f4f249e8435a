"""What a replay is asked to do and what it reports: ``ReplayConfig``, ``ReplayTarget``,
``ReplayProgress``, ``ReplayOutcome`` and ``ReplaySummary`` (``run.py`` runs it)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from prefctl.clock import Clock, SystemClock
from prefctl.dispatcher.replay.queue import ReplaySource
from prefctl.errors import UsageError
from prefctl.store.delivery_history import DeliveryRecord
from prefctl.webhooks.signature import SigningCredentials

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "ReplayConfig",
    "ReplayOutcome",
    "ReplayProgress",
    "ReplaySummary",
    "ReplayTarget",
]

DEFAULT_TIMEOUT_SECONDS = 300.0
Dispatcher = Literal["auto", "emulator", "in_process"]


@dataclass(frozen=True)
class ReplayTarget:
    """Where replayed events go: ``url``, ``subscription_id``, or neither (their own)."""

    url: str | None = None
    subscription_id: int | None = None

    def check(self) -> None:
        if self.url is not None and self.subscription_id is not None:
            raise UsageError("choose one target: --to URL or --subscription ID")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise UsageError(f"--to must be an http(s) URL, not '{self.url}'")

    def to_dict(self) -> dict[str, Any]:
        if self.url is not None:
            return {"url": self.url}
        if self.subscription_id is not None:
            return {"subscription_id": self.subscription_id}
        return {"own_subscriptions": True}


@dataclass(frozen=True)
class ReplayProgress:
    """Counts of the replayed deliveries so far."""

    total: int
    delivered: int = 0
    dead_lettered: int = 0

    @property
    def finished(self) -> int:
        return self.delivered + self.dead_lettered


@dataclass(frozen=True)
class ReplayOutcome:
    """Where one replayed delivery ended (``state`` is still pending after a timeout)."""

    event_id: str
    event_type: str
    subscription_id: int | None
    delivery_id: int | None
    state: str
    attempts: int
    reason: str | None
    last_status: int | None
    last_error: str | None

    @classmethod
    def of(cls, record: DeliveryRecord) -> ReplayOutcome:
        return cls(
            event_id=record.event_id,
            event_type=record.event_type,
            subscription_id=record.subscription_id,
            delivery_id=record.delivery_id,
            state=record.state,
            attempts=record.attempts,
            reason=record.dead_letter_reason,
            last_status=record.last_status,
            last_error=record.last_error,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "subscription_id": self.subscription_id,
            "delivery_id": self.delivery_id,
            "state": self.state,
            "attempts": self.attempts,
            "reason": self.reason,
            "last_status": self.last_status,
            "last_error": self.last_error,
        }


@dataclass(frozen=True)
class ReplaySummary:
    """How a replay went; ``succeeded`` when every replayed event was delivered (or, without
    waiting, queued)."""

    source: str
    target: ReplayTarget
    dispatcher: str
    waited: bool
    skipped: int
    duplicates: int
    elapsed_seconds: float
    outcomes: list[ReplayOutcome]
    # Selected deliveries left because their subscription was deleted (no --to: nowhere to go).
    of_deleted_subscriptions: int = 0

    def count(self, state: str) -> int:
        return sum(1 for outcome in self.outcomes if outcome.state == state)

    @property
    def delivered(self) -> int:
        return self.count("delivered")

    @property
    def dead_lettered(self) -> int:
        return self.count("dead_lettered")

    @property
    def pending(self) -> int:
        return len(self.outcomes) - self.delivered - self.dead_lettered

    @property
    def succeeded(self) -> bool:
        if not self.waited:
            return True
        return self.delivered == len(self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        """The summary object of ``prefctl replay -o json``."""
        return {
            "source": self.source,
            "target": self.target.to_dict(),
            "dispatcher": self.dispatcher,
            "waited": self.waited,
            "total": len(self.outcomes),
            "delivered": self.delivered,
            "dead_lettered": self.dead_lettered,
            "pending": self.pending,
            "skipped": self.skipped,
            "duplicates": self.duplicates,
            "of_deleted_subscriptions": self.of_deleted_subscriptions,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "succeeded": self.succeeded,
            "outcomes": [outcome.to_dict() for outcome in self.outcomes],
        }


@dataclass(frozen=True)
class ReplayConfig:
    """One replay. ``store_path`` is the store the events come from (and, for a subscription or
    their own, go to); a file replayed ``--to URL`` needs none. ``credentials`` signs a ``--to``
    replay when the store holds no account for the events (the profile's webhook credentials).
    ``time_scale`` divides the delivery-rule durations of an in-process engine."""

    store_path: Path | str | None  # a SQLite file, or a PostgreSQL database's URL
    source: ReplaySource
    target: ReplayTarget = field(default_factory=ReplayTarget)
    dispatcher: Dispatcher = "auto"
    wait: bool = True
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    max_attempts: int | None = None
    time_scale: float = 1.0
    clock: Clock = field(default_factory=SystemClock)
    rng: random.Random = field(default_factory=random.Random)
    credentials: Callable[[], SigningCredentials] | None = None
    on_progress: Callable[[ReplayProgress], None] | None = None
    # Whether an emulator serves the store and so delivers what replay queues (``auto``); without
    # it, ``auto`` runs the engine in this process. ``prefctl replay`` passes the emulator's check.
    served: Callable[[Path | str], bool] | None = None

    def check(self) -> None:
        self.source.check()
        self.target.check()
        if not self.timeout > 0:
            raise UsageError("--timeout must be more than 0 seconds")
        if self.max_attempts is not None and self.target.url is None:
            raise UsageError(
                "--max-attempts applies to --to URL; a subscription follows its account's settings"
            )
        if self.target.url is not None and not self.wait:
            raise UsageError("--no-wait needs a subscription: a --to URL replay runs in-process")
        if self.store_path is None and self.source.file is None:
            raise UsageError("replaying stored events needs a store")
