"""The emulator's group commit: several writes per transaction, each all or nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from prefctl.emulator.app import EmulatorContext
from prefctl.emulator.group_writer import GroupWriter
from prefctl.store.db import open_store


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[EmulatorContext]:
    path = tmp_path / "store.db"
    with open_store(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT NOT NULL)")
    ctx = EmulatorContext(store_path=path, base_url="http://127.0.0.1:1")
    yield ctx
    ctx.close()


def _insert(text: str | None) -> Callable[[sqlite3.Connection], int]:
    def work(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO notes VALUES (?)", (text,))  # NULL fails NOT NULL
        return int(conn.execute("SELECT count(*) FROM notes").fetchone()[0])

    return work


def _notes(ctx: EmulatorContext) -> list[str]:
    with open_store(ctx.store_path) as conn:
        return [row[0] for row in conn.execute("SELECT text FROM notes ORDER BY rowid")]


def test_group_writer_failing_write_in_a_batch_loses_only_itself(ctx: EmulatorContext) -> None:
    writer = GroupWriter(ctx)
    release = threading.Event()

    def blocker(conn: sqlite3.Connection) -> None:
        release.wait(10)

    async def run() -> list[object]:
        # While the writer thread is held in a first write, the next three queue up behind it
        # and are taken together: one transaction for the three.
        blocked = asyncio.ensure_future(writer.run(blocker))
        tasks = [asyncio.ensure_future(writer.run(_insert(t))) for t in ("a", None, "c")]
        await asyncio.sleep(0)  # every task has queued its write
        release.set()
        await blocked
        return await asyncio.gather(*tasks, return_exceptions=True)

    try:
        first, failed, third = asyncio.run(run())
    finally:
        release.set()
        writer.stop()
    assert isinstance(failed, sqlite3.IntegrityError)
    assert (first, third) == (1, 2)
    assert _notes(ctx) == ["a", "c"]


def test_group_writer_answers_after_commit_and_restarts_after_stop(ctx: EmulatorContext) -> None:
    writer = GroupWriter(ctx)

    async def write(text: str) -> int:
        return await writer.run(_insert(text))

    assert asyncio.run(write("one")) == 1
    assert _notes(ctx) == ["one"]  # another connection sees it: committed
    writer.stop()
    assert asyncio.run(write("two")) == 2
    writer.stop()
    assert _notes(ctx) == ["one", "two"]
