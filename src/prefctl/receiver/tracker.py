"""Duplicate, attempt, out-of-order and latency flags, computed off the hot path.

The spec promises at-least-once delivery in no particular order, so the receiver shows what a
handler would have to cope with:

- ``attempt``: how many times this EventId has arrived (1 for the first).
- ``duplicate``: the EventId was already *acknowledged* (answered 200) by this receiver, so a
  handler that processed it then would see it twice. A retry after a failed answer is attempt 2,
  not a duplicate.
- ``out_of_order``: its EventTime is older than the newest EventTime seen for the same ProfileId
  (the spec's ordering parameter).
- ``latency_ms``: time of arrival minus EventTime.

Only authentic events (signature valid, or not checked with ``--no-verify``) are tracked: a forged
request must not mark a real event as a duplicate. Memory is bounded in entries and in bytes: the
oldest EventIds and ProfileIds are forgotten beyond ``limit`` entries or ``memory_bytes`` (an
estimate: the string and its dict entry) each. An id longer than ``MAX_ID_CHARS`` — far beyond any
real one, a UUID has 36 — is remembered by a 16-byte digest, never whole, and the event's
``detail`` says so.
"""

from __future__ import annotations

import hashlib
import sys
from datetime import datetime, timedelta

from prefctl.receiver.verdict import AUTHENTIC_SIGNATURES, Kind, Verdict

__all__ = ["DEFAULT_MEMORY", "DEFAULT_MEMORY_BYTES", "MAX_ID_CHARS", "Tracker"]

DEFAULT_MEMORY = 200_000
DEFAULT_MEMORY_BYTES = 32 * 1024 * 1024  # per table (EventIds, ProfileIds)
MAX_ID_CHARS = 256
# What a remembered id costs beside its string: its slot in the dict's tables, its value.
_ENTRY_BYTES = 64
_LARGEST_PROFILE_INT = 2**64
_PROFILE_ID_TYPES = (int, str)
_EVENT = Kind.EVENT
# latency_ms to a tenth of a millisecond, in integer arithmetic on the timedelta (round(x, 1) on a
# float goes through a decimal conversion, the costliest step of observe()).
_TENTH_MS = timedelta(microseconds=100)
_HALF_TENTH_MS = timedelta(microseconds=50)


class Tracker:
    """Remembers EventIds and the newest EventTime per ProfileId; used on the event loop only."""

    def __init__(
        self, limit: int = DEFAULT_MEMORY, memory_bytes: int = DEFAULT_MEMORY_BYTES
    ) -> None:
        self.limit = limit
        self.memory_bytes = memory_bytes
        # EventId → attempts × 2 + acknowledged. Plain ints (and datetimes below) keep these
        # dicts out of the garbage collector's sight, however many events they hold. A key is
        # bytes (a digest) for an id over MAX_ID_CHARS: it can never equal a real id's string.
        self._events: dict[str | bytes, int] = {}
        self._events_bytes = 0
        self._newest: dict[int | str | bytes, datetime] = {}
        self._newest_bytes = 0

    @property
    def memory_used(self) -> int:
        """The estimated bytes held by the remembered EventIds and ProfileIds."""
        return self._events_bytes + self._newest_bytes

    def observe(self, verdict: Verdict) -> bool:
        """Fill in ``verdict``'s flags and remember it; returns whether it is an authentic event."""
        # Runs once per event, in the pump's batches: plain code, few calls.
        if verdict.kind != _EVENT or verdict.signature not in AUTHENTIC_SIGNATURES:
            return False
        moment: datetime | None = None
        text = verdict.event_time
        if text:
            # Only the display uses EventTime, so the leniency of fromisoformat (which also takes
            # some forms that are not RFC 3339) does no harm, and it is fast.
            try:
                moment = datetime.fromisoformat(text)
            except ValueError:
                pass
            else:
                if moment.tzinfo is None:
                    moment = None
                else:
                    verdict.latency_ms = (verdict.time - moment + _HALF_TENTH_MS) // _TENTH_MS / 10
        shown_id = verdict.event_id
        if shown_id is not None:
            event_id: str | bytes = shown_id
            if len(shown_id) > MAX_ID_CHARS:
                if verdict.detail is None:
                    verdict.detail = (
                        f"EventId of {len(shown_id)} characters (real ones have at most "
                        f"{MAX_ID_CHARS}): remembered by its digest"
                    )
                event_id = _digest(shown_id)
            events = self._events
            seen = events.get(event_id)
            if seen is None:
                seen = 0
                self._events_bytes += sys.getsizeof(event_id) + _ENTRY_BYTES
                while events and (
                    len(events) >= self.limit or self._events_bytes > self.memory_bytes
                ):
                    oldest = next(iter(events))  # dicts keep insertion order: the oldest
                    del events[oldest]
                    self._events_bytes -= sys.getsizeof(oldest) + _ENTRY_BYTES
            attempts = (seen >> 1) + 1
            verdict.attempt = attempts
            if seen & 1:
                verdict.duplicate = True
                events[event_id] = attempts << 1 | 1
            else:
                events[event_id] = attempts << 1 | (verdict.status == 200)
        profile = verdict.profile_id
        if moment is not None and isinstance(profile, _PROFILE_ID_TYPES):
            key: int | str | bytes = profile
            if isinstance(profile, str):
                if len(profile) > MAX_ID_CHARS:
                    key = _digest(profile)
            elif not -_LARGEST_PROFILE_INT < profile < _LARGEST_PROFILE_INT:
                return True  # an integer no service issues (and as large as the body allows)
            newest_by_profile = self._newest
            newest = newest_by_profile.get(key)
            if newest is None:
                self._newest_bytes += sys.getsizeof(key) + _ENTRY_BYTES
                while newest_by_profile and (
                    len(newest_by_profile) >= self.limit or self._newest_bytes > self.memory_bytes
                ):
                    oldest_profile = next(iter(newest_by_profile))
                    del newest_by_profile[oldest_profile]
                    self._newest_bytes -= sys.getsizeof(oldest_profile) + _ENTRY_BYTES
                newest_by_profile[key] = moment
            elif moment < newest:
                verdict.out_of_order = True
            else:
                newest_by_profile[key] = moment
        return True


def _digest(identifier: str) -> bytes:
    return hashlib.blake2b(identifier.encode("utf-8", "surrogatepass"), digest_size=16).digest()
