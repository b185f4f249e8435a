"""The emulator's profile writes on one thread, several to a transaction (group commit).

Async routes hand a write to ``GroupWriter.run`` and await its result. The writer thread takes
what has queued up (at most ``MAX_BATCH``), and under the emulator's writer lock runs each write in
its own savepoint of one transaction, then commits once::

    writer = group_writer(ctx)                          # one per EmulatorContext
    result = await writer.run(lambda conn: ProfileWriter(conn, …).update(42, change))

Each write stays all-or-nothing on its own: one that raises is rolled back to its savepoint and
gets its exception, while the others of the batch commit. A result is handed back only after the
commit, so an answer never reports a write that could still be lost; when the commit itself fails,
every write of the batch gets that error. Why: a commit and the thread hand-offs cost about as much
as the write itself (bench/api.py), and concurrent writes queue on one lock anyway.

``stop`` ends the thread once the queued writes are done; the API's lifespan calls it.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from prefctl.emulator.app import EmulatorContext
from prefctl.emulator.routes._common import WRITE_LOCK_KEY
from prefctl.store.db import transaction

__all__ = ["MAX_BATCH", "GroupWriter", "group_writer"]

T = TypeVar("T")

# Writes per transaction at most: enough to amortize a commit, few enough that a batch holds the
# store's write lock for milliseconds, not seconds.
MAX_BATCH = 32
_SHARED_KEY = "store.group_writer"


@dataclass(slots=True)
class _Job(Generic[T]):
    work: Callable[[sqlite3.Connection], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop


_STOP = object()


class GroupWriter:
    """One writer thread for a context's store (see the module docstring)."""

    def __init__(self, ctx: EmulatorContext, *, max_batch: int = MAX_BATCH) -> None:
        self._ctx = ctx
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(conn)`` inside a write transaction on the writer thread; its result once
        committed, or what it raised (nothing of it is then written)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._start()
        self._queue.put(_Job(work, future, loop))
        return await future

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the queued writes and end the thread (a later ``run`` starts it again)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(timeout)

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="prefctl-writer", daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            batch: list[_Job[Any]] = [item]
            stop = False
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)
            self._write(batch)
            if stop:
                return

    def _write(self, batch: list[_Job[Any]]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        lock: threading.Lock = self._ctx.shared(WRITE_LOCK_KEY, threading.Lock)
        try:
            conn = self._ctx.connection()
            with lock, transaction(conn):
                for job in batch:
                    try:
                        with transaction(conn):  # a savepoint: this write alone on failure
                            outcomes.append((True, job.work(conn)))
                    except Exception as exc:  # handed to the route awaiting this write
                        outcomes.append((False, exc))
        except Exception as exc:  # BEGIN or COMMIT failed: nothing of the batch is stored
            kept = [outcome if not outcome[0] else (False, exc) for outcome in outcomes]
            outcomes = kept + [(False, exc)] * (len(batch) - len(kept))
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job[Any], bool, Any]]] = {}
        for job, (ok, value) in zip(batch, outcomes, strict=True):
            by_loop.setdefault(job.loop, []).append((job, ok, value))
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, settled)
            except RuntimeError:  # the loop is closed: nobody awaits these answers any more
                pass


def _settle(settled: list[tuple[_Job[Any], bool, Any]]) -> None:
    for job, ok, value in settled:
        if job.future.done():  # cancelled: the client went away
            continue
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)


def group_writer(ctx: EmulatorContext) -> GroupWriter:
    """The context's one ``GroupWriter`` (made on first use)."""
    return ctx.shared(_SHARED_KEY, lambda: GroupWriter(ctx))
