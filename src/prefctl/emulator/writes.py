"""The one write path of profiles: change, events and deliveries in one transaction.

Every REST profile write goes through a ``ProfileWriter``. One call:

1. reads the current profile (inside the write transaction, so concurrent writes cannot lose
   each other's changes) and builds the new one: ProfileId, IsActive and ReasonCode kept (only
   deactivate/reactivate change them), Edited stamped with the user and the clock;
2. computes the events with ``changes.events_for_change`` (an update that changes nothing stores
   nothing and emits nothing);
3. stores the profile (or deletes it), the events (one EventId each, from the injected rng) and
   one delivery per event and matching subscription: queued for Succeeded + Active ones, held for
   Succeeded + Paused with CatchUpOnResume, none otherwise (``emulator.fanout``; pass the
   emulator's one ``Fanout`` so that the targets are not re-read by every write).

All of it commits together or not at all: a call opens its own transaction, or, inside the
caller's, is part of it (the group writer runs each write in a savepoint of its own, so a second
savepoint here would only cost two statements per write). Bulk import writes profiles without
events (``store/imports.py``).

    >>> writer = ProfileWriter(conn, "DEMO_CORP", actor="admin", clock=clock, rng=rng)
    >>> result = writer.create({"Emails": [{"Address": "ann@example.com"}]})
    >>> result.profile["ProfileId"], [e.event_type for e in result.events]
    (1001, ['profile.created'])
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from prefctl.clock import Clock, FakeClock
from prefctl.emulator.changes import Operation, events_for_change
from prefctl.emulator.fanout import Fanout
from prefctl.errors import NotFoundError
from prefctl.store import Store, profiles
from prefctl.store import events as event_store
from prefctl.store.db import atomic
from prefctl.store.deliveries import add_deliveries
from prefctl.store.timestamps import epoch, from_epoch
from prefctl.webhooks.envelope import new_event_id

__all__ = ["ProfileChange", "ProfileJob", "ProfileWriter", "WriteResult", "WrittenEvent"]

WireProfile = dict[str, Any]
# Builds the new profile body from (a copy of) the stored one: a JSON Patch or merge patch
# applied and validated by the route. Raising aborts the write.
ProfileChange = Callable[[WireProfile], Mapping[str, Any]]


# The three records below cross the pipe to and from the writer process with every write: each
# pickles as its constructor call, which unpickles ~5x faster than a frozen dataclass's state.
@dataclass(frozen=True, slots=True)
class WrittenEvent:
    event_id: str
    event_type: str

    def __reduce__(self) -> tuple[type[WrittenEvent], tuple[str, str]]:
        return (WrittenEvent, (self.event_id, self.event_type))


@dataclass(frozen=True, slots=True)
class WriteResult:
    """The profile as stored (None after a delete), its events and how many deliveries they
    made (queued and held)."""

    profile: WireProfile | None
    events: tuple[WrittenEvent, ...]
    deliveries: int

    def __reduce__(self) -> tuple[type[WriteResult], tuple[Any, ...]]:
        return (WriteResult, (self.profile, self.events, self.deliveries))


class ProfileWriter:
    """Profile operations of one account by one API user (``actor`` fills Edited); ``fanout``
    caches the account's fan-out targets across writers (a fresh one when not given)."""

    def __init__(
        self,
        conn: Store,
        account: str,
        *,
        actor: str,
        clock: Clock,
        rng: random.Random,
        fanout: Fanout | None = None,
    ) -> None:
        self._conn = conn
        self._account = account
        self._actor = actor
        self._clock = clock
        self._rng = rng
        self._fanout = fanout or Fanout()

    def create(self, body: Mapping[str, Any]) -> WriteResult:
        """POST /profiles: a new profile (next ProfileId) → profile.created."""
        with atomic(self._conn):
            profile_id = profiles.next_profile_id(self._conn, self._account)
            return self._store("create", None, self._prepare(body, profile_id, None))

    def replace(self, profile_id: int, body: Mapping[str, Any]) -> WriteResult:
        """PUT /profiles/{id}: overwrite the profile → profile.replaced."""
        with atomic(self._conn):
            old = self._load(profile_id)
            return self._store("replace", old, self._prepare(body, profile_id, old))

    def update(self, profile_id: int, change: ProfileChange) -> WriteResult:
        """PATCH /profiles/{id}: ``change`` builds the new body from the stored profile →
        profile.updated, profile.updatedfull and the element events (nothing if unchanged)."""
        with atomic(self._conn):
            old = self._load(profile_id)
            # A JSON round trip copies a wire profile several times faster than deepcopy.
            new = self._prepare(change(orjson.loads(orjson.dumps(old))), profile_id, old)
            return self._store("update", old, new)

    def deactivate(self, profile_id: int, reason: str | None = None) -> WriteResult:
        """POST …/deactivate: IsActive false with the reason → profile.deactivated."""
        with atomic(self._conn):
            old = self._load(profile_id)
            new = self._prepare(old, profile_id, old)
            new["IsActive"] = False
            new.pop("ReasonCode", None)
            if reason is not None:
                new["ReasonCode"] = reason
            return self._store("deactivate", old, new)

    def reactivate(self, profile_id: int) -> WriteResult:
        """POST …/reactivate: IsActive true, ReasonCode cleared → profile.reactivated."""
        with atomic(self._conn):
            old = self._load(profile_id)
            new = self._prepare(old, profile_id, old)
            new["IsActive"] = True
            new.pop("ReasonCode", None)
            return self._store("reactivate", old, new)

    def delete(self, profile_id: int, reason_code: str | None = None) -> WriteResult:
        """DELETE /profiles/{id}: removed for good → profile.deleted with the reason code."""
        with atomic(self._conn):
            old = self._load(profile_id)
            gone = dict(old)
            if reason_code is not None:
                gone["ReasonCode"] = reason_code
            return self._store("delete", old, gone)

    # -- the shared path ---------------------------------------------------------------------------
    def _load(self, profile_id: int) -> WireProfile:
        profile = profiles.get_profile(self._conn, self._account, profile_id, for_update=True)
        if profile is None:
            raise NotFoundError(f"profile {profile_id} not found")
        return profile

    def _prepare(
        self, body: Mapping[str, Any], profile_id: int, old: WireProfile | None
    ) -> WireProfile:
        return profiles.prepare_profile(
            body, profile_id=profile_id, previous=old, actor=self._actor, now=self._clock.now()
        )

    def _store(
        self, operation: Operation, old: WireProfile | None, new: WireProfile
    ) -> WriteResult:
        changes = events_for_change(operation, old, new)
        if operation == "update" and not changes:
            return WriteResult(old, (), 0)
        now = epoch(self._clock.now())
        profile_id = int(new["ProfileId"])
        if operation == "delete":
            profiles.delete_profile(self._conn, self._account, profile_id)
        else:
            profiles.save_profile(self._conn, self._account, new, now=now, previous=old)
        new_events = [
            event_store.NewEvent(
                event_id=new_event_id(self._rng),
                event_type=change.event_type,
                entity=change.entity,
                profile_id=profile_id,
                original_event_time=now,
                data=change.data,
                previous_data=change.previous_data,
                filter_values=change.filter_values,
            )
            for change in changes
        ]
        rowids = event_store.insert_events(self._conn, self._account, new_events)
        rows = self._fanout.deliveries(self._conn, self._account, zip(rowids, changes, strict=True))
        count = add_deliveries(self._conn, rows, now=now)
        written = tuple(WrittenEvent(e.event_id, e.event_type) for e in new_events)
        return WriteResult(None if operation == "delete" else new, written, count)


@dataclass(frozen=True, slots=True)
class ProfileJob:
    """One REST profile write as the group writer ships it to its process (it pickles): the
    ``ProfileWriter`` method ``operation`` called with ``args`` for ``account`` by ``actor``.

    ``now`` is taken when the request is handled, so a clock the caller controls (a test's, the
    emulator's ``--time-scale``) stamps the write. The process keeps one ``Fanout`` per connection
    and one random source for EventIds, never seeded (EventIds must not repeat after a restart).
    """

    account: str
    actor: str
    now: float  # Unix seconds (a float pickles ~20x faster than an aware datetime)
    operation: str  # create, replace, update, deactivate, reactivate or delete
    args: tuple[Any, ...]

    def __reduce__(self) -> tuple[type[ProfileJob], tuple[Any, ...]]:
        return (ProfileJob, (self.account, self.actor, self.now, self.operation, self.args))

    def __call__(self, conn: Store) -> WriteResult:
        writer = ProfileWriter(
            conn,
            self.account,
            actor=self.actor,
            clock=FakeClock(from_epoch(self.now)),  # stands still at ``now``
            rng=_EVENT_RNG,
            fanout=_fanout_of(conn),
        )
        result: WriteResult = getattr(writer, self.operation)(*self.args)
        return result


_EVENT_RNG = random.Random()
# One Fanout per connection (the writer process keeps one connection); the entry holds the
# connection, so that a new one never inherits another's entry by its id.
_FANOUTS: dict[int, tuple[Store, Fanout]] = {}
_MAX_FANOUTS = 8


def _fanout_of(conn: Store) -> Fanout:
    """This process's ``Fanout`` for writes through ``conn``."""
    entry = _FANOUTS.get(id(conn))
    if entry is None or entry[0] is not conn:
        if len(_FANOUTS) >= _MAX_FANOUTS:
            _FANOUTS.clear()
        entry = _FANOUTS[id(conn)] = (conn, Fanout())
    return entry[1]
