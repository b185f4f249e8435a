"""``BackgroundWriter``: bounded, in order, and never a reason to hang at the stop."""

from __future__ import annotations

import threading

from prefctl.receiver.pump import BackgroundWriter
from tests.helpers import wait_until


def test_background_writer_drops_past_its_bound_and_reports_before_the_next_chunk() -> None:
    stuck = threading.Event()
    written: list[str] = []

    def target(chunk: str) -> None:
        stuck.wait(10)  # a reader that does not read, until released
        written.append(chunk)

    writer = BackgroundWriter(
        target, max_pending_bytes=10, on_dropped=lambda n: written.append(f"dropped {n}")
    )
    assert writer.write("a" * 6, size=6)
    assert writer.write("b" * 4, size=4)
    assert writer.backlogged
    assert not writer.write("c", size=1, lines=3)
    writer.skip(2)
    stuck.set()
    assert writer.close(10)
    assert written == ["aaaaaa", "bbbb"]
    assert writer.dropped == 5


def test_background_writer_close_gives_up_on_a_write_that_never_ends() -> None:
    release = threading.Event()

    def write_until_released(chunk: str) -> None:
        release.wait(10)

    writer = BackgroundWriter(write_until_released)
    writer.write("x", size=1)
    try:
        assert writer.close(0.2) is False  # bounded: the caller decides what to do next
    finally:
        release.set()


def test_background_writer_notice_comes_right_before_the_next_line_written() -> None:
    written: list[str] = []
    gate = threading.Event()

    def write_after_the_gate(chunk: str) -> None:
        gate.wait(10)
        written.append(chunk)

    writer = BackgroundWriter(
        write_after_the_gate,
        max_pending_bytes=1,
        on_dropped=lambda n: written.append(f"dropped {n}"),
    )
    writer.write("first", size=1)
    writer.write("lost", size=1)
    gate.set()
    wait_until(lambda: not writer.backlogged)  # the first chunk is written
    writer.write("next", size=1)
    assert writer.close(10)
    assert written == ["first", "dropped 1", "next"]
