"""Time as a parameter.

Everything that waits or compares times takes a ``Clock``: the token cache, signature
verification, the dispatcher, the emulator and alerts. ``SystemClock`` is the real one;
``FakeClock`` is for tests and the simulator: its ``sleep`` advances time instantly.

    >>> clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    >>> clock.advance(90)
    >>> clock.now().isoformat()
    '2026-01-01T00:01:30+00:00'
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """What prefctl needs to know about time."""

    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for measuring intervals."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (instantly on a fake clock)."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        import asyncio  # kept off the start-up path of a cached `token get`

        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that moves only when told to, or when something sleeps on it."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start time")
        self._now = start.astimezone(UTC)
        self._monotonic = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``."""
        if seconds < 0:
            raise ValueError("time does not go back")
        # Round up to whole microseconds (datetime's resolution): a positive sleep shorter than
        # one microsecond must still move time, or a loop sleeping until a deadline spins forever.
        micros = math.ceil(seconds * 1_000_000)
        self._now += timedelta(microseconds=micros)
        self._monotonic += micros / 1_000_000

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (not earlier than now)."""
        self.advance((when.astimezone(UTC) - self._now).total_seconds())

    async def sleep(self, seconds: float) -> None:
        import asyncio

        self.advance(max(0.0, seconds))
        # Let other tasks run, as a real sleep would.
        await asyncio.sleep(0)


def utc_timestamp(moment: datetime) -> str:
    """RFC 3339 UTC with milliseconds, the wire format: ``2026-11-21T19:20:30.123Z``."""
    # isoformat cuts to milliseconds the way ``microsecond // 1000`` does, faster than strftime.
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_moment(text: str, *, now: datetime, flag: str) -> datetime:
    """A ``--since``/``--until`` value: an RFC 3339 time with a zone (``2026-11-21T19:20:30Z``),
    or an age such as ``90s``, ``15m``, ``2h``, ``3d`` before ``now``; UsageError otherwise."""
    from prefctl.errors import UsageError

    age = _AGE.match(text)
    if age:
        return now - timedelta(seconds=float(age.group(1)) * _AGE_UNITS[age.group(2)])
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise UsageError(
            f"{flag} '{text}' is neither an RFC 3339 time with a zone nor an age",
            hint="e.g. 2026-11-21T19:20:30Z, or 90s, 15m, 2h, 3d",
        )
    return moment


def format_duration(seconds: float) -> str:
    """A duration as every table of prefctl writes it: ``4h 12m 30s``, to the second, units
    with no value left out (``2h 5s``); under 10 s to the tenth (``2.5s``). JSON keeps seconds."""
    if seconds < 10:
        return f"{seconds:.1f}".rstrip("0").rstrip(".") + "s"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return " ".join(parts) or "0s"
