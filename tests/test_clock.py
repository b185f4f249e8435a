from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from prefctl.clock import FakeClock, utc_timestamp


def test_fake_clock_sleep_advances_instantly() -> None:
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    asyncio.run(clock.sleep(90))
    assert utc_timestamp(clock.now()) == "2026-01-01T00:01:30.000Z"
    assert clock.monotonic() == 90


def test_fake_clock_a_sleep_shorter_than_a_microsecond_still_moves_time() -> None:
    clock = FakeClock()
    before = clock.now()
    clock.advance(3e-7)
    assert clock.now() > before


def test_fake_clock_refuses_to_go_back() -> None:
    with pytest.raises(ValueError, match="does not go back"):
        FakeClock().advance(-1)
