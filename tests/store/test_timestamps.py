from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefctl.clock import utc_timestamp
from prefctl.store.timestamps import epoch, from_epoch, wire_time


@given(st.floats(min_value=0, max_value=4_102_444_800))  # 1970 … 2100
def test_wire_time_formats_as_the_clock_does(seconds: float) -> None:
    assert wire_time(seconds) == utc_timestamp(from_epoch(seconds))


def test_epoch_round_trips_aware_times_and_refuses_naive_ones() -> None:
    moment = datetime(2026, 11, 21, 19, 20, 30, 123456, tzinfo=UTC)
    assert from_epoch(epoch(moment)) == moment
    assert wire_time(epoch(moment)) == "2026-11-21T19:20:30.123Z"
    with pytest.raises(ValueError, match="timezone-aware"):
        epoch(datetime(2026, 1, 1))
