"""The emulator's group commit: several writes per transaction, each all or nothing, in the
writer process."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from prefctl.emulator.app import EmulatorContext
from prefctl.emulator.group_writer import GroupWriter, WriterProcessError
from prefctl.store.db import open_store
from prefctl.store.errors import StoreError
from tests.helpers import wait_until


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[EmulatorContext]:
    path = tmp_path / "store.db"
    with open_store(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT NOT NULL)")
    ctx = EmulatorContext(store_path=path, base_url="http://127.0.0.1:1")
    yield ctx
    ctx.close()


# Writes run in another process, so they are module-level callables that pickle.
@dataclass(frozen=True)
class _Insert:
    text: str | None  # None fails NOT NULL

    def __call__(self, conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO notes VALUES (?)", (self.text,))
        return int(conn.execute("SELECT count(*) FROM notes").fetchone()[0])


@dataclass(frozen=True)
class _Slow:
    """A write that holds the writer process ``seconds``, once it has created ``started``."""

    seconds: float
    started: Path

    def __call__(self, conn: sqlite3.Connection) -> int:
        self.started.touch()
        time.sleep(self.seconds)  # the behaviour under test: a long write
        return 0


def _slow(ctx: EmulatorContext, seconds: float) -> _Slow:
    return _Slow(seconds, Path(ctx.store_path).parent / "slow-write-started")


async def _writer_is_in(slow: _Slow) -> None:
    """Wait until the writer process runs ``slow``."""
    await asyncio.to_thread(wait_until, slow.started.exists)


@dataclass(frozen=True)
class _Exit:
    def __call__(self, conn: sqlite3.Connection) -> None:
        import os

        os._exit(3)


@dataclass(frozen=True)
class _Hang:
    """Closes the pipe of its answers and hangs, as a stuck writer process would."""

    def __call__(self, conn: sqlite3.Connection) -> None:
        import os

        os.close(1)
        time.sleep(30)


@dataclass(frozen=True)
class _InsertThenHang:
    """Inserts a row, then hangs inside the transaction, as a paused writer process would."""

    started: Path

    def __call__(self, conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO notes VALUES ('never')")
        self.started.touch()
        time.sleep(30)  # the behaviour under test: a writer stuck mid-transaction
        return 0


def _notes(ctx: EmulatorContext) -> list[str]:
    with open_store(ctx.store_path) as conn:
        return [row[0] for row in conn.execute("SELECT text FROM notes ORDER BY rowid")]


def test_group_writer_failing_write_in_a_batch_loses_only_itself(ctx: EmulatorContext) -> None:
    writer = GroupWriter(ctx.store_path)

    async def run() -> list[object]:
        # While the writer process is held in a first write, the next three queue up behind it
        # and are sent together: one transaction for the three.
        held = _slow(ctx, 0.3)
        slow = asyncio.ensure_future(writer.run(held))
        await _writer_is_in(held)
        tasks = [asyncio.ensure_future(writer.run(_Insert(t))) for t in ("a", None, "c")]
        await slow
        return await asyncio.gather(*tasks, return_exceptions=True)

    try:
        first, failed, third = asyncio.run(run())
    finally:
        writer.stop()
    assert isinstance(failed, StoreError)
    assert "NOT NULL constraint failed" in failed.reason
    assert (first, third) == (1, 2)
    assert _notes(ctx) == ["a", "c"]


def test_group_writer_answers_after_commit_and_restarts_after_stop(ctx: EmulatorContext) -> None:
    writer = GroupWriter(ctx.store_path)

    async def write(text: str) -> int:
        return await writer.run(_Insert(text))

    assert asyncio.run(write("one")) == 1
    assert _notes(ctx) == ["one"]  # another connection sees it: committed
    writer.stop()
    assert asyncio.run(write("two")) == 2
    writer.stop()
    assert _notes(ctx) == ["one", "two"]


def test_group_writer_fails_the_writes_of_a_dead_process_and_starts_a_new_one(
    ctx: EmulatorContext,
) -> None:
    writer = GroupWriter(ctx.store_path)

    async def run() -> tuple[object, int]:
        lost = await asyncio.gather(writer.run(_Exit()), return_exceptions=True)
        return lost[0], await writer.run(_Insert("after"))

    try:
        lost, count = asyncio.run(run())
    finally:
        writer.stop()
    assert isinstance(lost, WriterProcessError)
    assert "exit code 3" in str(lost)
    assert count == 1
    assert _notes(ctx) == ["after"]


def test_group_writer_refuses_a_write_that_does_not_pickle(ctx: EmulatorContext) -> None:
    writer = GroupWriter(ctx.store_path)

    async def run() -> None:
        await writer.run(lambda conn: 1)

    with pytest.raises((AttributeError, TypeError, Exception)):  # pickle's own error
        asyncio.run(run())
    writer.stop()


def test_group_writer_stop_finishes_the_batch_in_flight_and_fails_the_waiting_writes(
    ctx: EmulatorContext,
) -> None:
    writer = GroupWriter(ctx.store_path)

    async def run() -> tuple[object, object]:
        held = _slow(ctx, 0.5)
        in_flight = asyncio.ensure_future(writer.run(held))
        await _writer_is_in(held)
        waiting = asyncio.ensure_future(writer.run(_Insert("late")))
        await asyncio.sleep(0)  # one step of the loop: the late write queues behind the batch
        await asyncio.to_thread(writer.stop)
        return await asyncio.wait_for(
            asyncio.gather(in_flight, waiting, return_exceptions=True), timeout=10
        )

    answered, failed = asyncio.run(run())
    assert answered == 0
    assert isinstance(failed, WriterProcessError)
    assert _notes(ctx) == []


def test_group_writer_stop_kills_a_process_stuck_in_its_write_after_the_wait_and_stores_nothing(
    ctx: EmulatorContext,
) -> None:
    # The emulator's stop waits 10 s for the writer to end; here 0.2 s. Had the stop waited for
    # the write to end by itself (30 s), its row would be committed.
    writer = GroupWriter(ctx.store_path)
    stuck = _InsertThenHang(Path(ctx.store_path).parent / "stuck-write-started")

    async def run() -> None:
        write = asyncio.ensure_future(writer.run(stuck))
        await asyncio.to_thread(wait_until, stuck.started.exists)
        await asyncio.to_thread(writer.stop, 0.2)
        write.cancel()
        await asyncio.gather(write, return_exceptions=True)

    asyncio.run(run())
    assert _notes(ctx) == []


def test_group_writer_stuck_process_fails_its_writes_without_stalling_the_loop(
    ctx: EmulatorContext,
) -> None:
    writer = GroupWriter(ctx.store_path)

    async def run() -> tuple[object, float, int]:
        loop = asyncio.get_running_loop()
        gaps: list[float] = []

        async def tick() -> None:  # what every other request sees of the loop meanwhile
            last = loop.time()
            while True:
                await asyncio.sleep(0.01)
                gaps.append(loop.time() - last)
                last = loop.time()

        ticker = asyncio.ensure_future(tick())
        lost = await asyncio.gather(writer.run(_Hang()), return_exceptions=True)
        ticker.cancel()
        return lost[0], max(gaps), await writer.run(_Insert("after"))

    try:
        lost, longest_gap, count = asyncio.run(run())
    finally:
        writer.stop()
    assert isinstance(lost, WriterProcessError)
    assert "exit code -9" in str(lost)  # killed after a second
    assert longest_gap < 0.5  # the loop went on (it used to stop for that second)
    assert count == 1
