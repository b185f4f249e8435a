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
request must not mark a real event as a duplicate. Memory is bounded: the oldest EventIds and
ProfileIds are forgotten beyond ``limit`` entries each.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from prefctl.receiver.verdict import AUTHENTIC_SIGNATURES, Kind, Verdict

__all__ = ["DEFAULT_MEMORY", "Tracker"]

DEFAULT_MEMORY = 200_000
_PROFILE_ID_TYPES = (int, str)
_EVENT = Kind.EVENT
# latency_ms to a tenth of a millisecond, in integer arithmetic on the timedelta (round(x, 1) on a
# float goes through a decimal conversion, the costliest step of observe()).
_TENTH_MS = timedelta(microseconds=100)
_HALF_TENTH_MS = timedelta(microseconds=50)


class Tracker:
    """Remembers EventIds and the newest EventTime per ProfileId; used on the event loop only."""

    def __init__(self, limit: int = DEFAULT_MEMORY) -> None:
        self.limit = limit
        # EventId → attempts × 2 + acknowledged. Plain ints (and datetimes below) keep these
        # dicts out of the garbage collector's sight, however many events they hold.
        self._events: dict[str, int] = {}
        self._newest: dict[int | str, datetime] = {}

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
        event_id = verdict.event_id
        if event_id is not None:
            events = self._events
            seen = events.get(event_id)
            if seen is None:
                seen = 0
                if len(events) >= self.limit:
                    del events[next(iter(events))]  # dicts keep insertion order: the oldest
            attempts = (seen >> 1) + 1
            verdict.attempt = attempts
            if seen & 1:
                verdict.duplicate = True
                events[event_id] = attempts << 1 | 1
            else:
                events[event_id] = attempts << 1 | (verdict.status == 200)
        profile = verdict.profile_id
        if moment is not None and isinstance(profile, _PROFILE_ID_TYPES):
            newest_by_profile = self._newest
            newest = newest_by_profile.get(profile)
            if newest is None:
                if len(newest_by_profile) >= self.limit:
                    del newest_by_profile[next(iter(newest_by_profile))]
                newest_by_profile[profile] = moment
            elif moment < newest:
                verdict.out_of_order = True
            else:
                newest_by_profile[profile] = moment
        return True
