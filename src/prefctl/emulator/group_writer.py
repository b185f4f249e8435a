"""The emulator's profile writes in a writer process, several to a transaction (group commit).

Async routes hand a write to ``GroupWriter.run`` and await its result. The write is a picklable
callable ``work(conn)`` (``emulator.writes.ProfileJob`` for profile writes); it runs in the
emulator's writer process (``emulator.write_process``), which takes whatever writes have queued
(at most ``MAX_BATCH``) into one transaction, each in its own savepoint, and commits once::

    writer = group_writer(ctx)       # one per EmulatorContext (emulator.context)
    result = await writer.run(ProfileJob(account, actor, now, "update", (42, change)))

Each write stays all-or-nothing on its own: one that raises is rolled back to its savepoint and
gets its exception, while the others of the batch commit. A result is handed back only after the
commit, so an answer never reports a write that could still be lost; when the commit itself fails,
every write of the batch gets that error.

Why a process: the event loop and a writer thread take turns on the GIL, so one process served
PATCHes on about one core of two (docs/performance.md). The process starts with the server
(``start``; its ~0.25 s of imports then overlap the server's own start-up, where the first write
used to wait for them) and is talked to from the event loop itself, over pipes: a batch
is sent when the previous one has been answered, so the writes queued meanwhile go together.
One event loop at a time: the writer serves the loop it was started on until it is stopped.

``stop`` ends the process once its batch is done; the API's lifespan calls it, and a later ``run``
starts a new one. If the process dies, the writes waiting for it fail and the next write starts
a new one.
"""

from __future__ import annotations

import asyncio
import collections
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from prefctl.emulator.write_process import (
    FrameReader,
    child_environment,
    encode,
    store_argument,
)

__all__ = ["MAX_BATCH", "GroupWriter", "WriterProcessError"]

T = TypeVar("T")

# Writes per transaction at most: enough to amortize a commit, few enough that a batch holds the
# store's write lock for milliseconds, not seconds.
MAX_BATCH = 32
_READ_SIZE = 1 << 16


class WriterProcessError(RuntimeError):
    """The writer process stopped before it answered: the write's outcome is unknown."""


@dataclass(slots=True)
class _Job:
    payload: bytes
    future: asyncio.Future[Any]


class _Child:
    """One writer process and the event loop that reads its answers."""

    def __init__(self, store_path: str, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        argument, env = store_argument(store_path)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "prefctl.emulator.write_process", argument],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**child_environment(), **env},
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.stdin = self.process.stdin.fileno()
        self.stdout = self.process.stdout.fileno()
        os.set_blocking(self.stdout, False)
        # Written from the event loop: a frame the pipe cannot take at once waits for it to be
        # writable (``_write``) instead of blocking the loop while the child is busy or stuck.
        os.set_blocking(self.stdin, False)
        self.unsent = memoryview(b"")
        self.writing = False
        self.reader = FrameReader()
        self.sent: collections.deque[list[_Job]] = collections.deque()  # answered in order
        self.attached = True


class GroupWriter:
    """One writer process for a context's store (see the module docstring)."""

    def __init__(self, store_path: str | os.PathLike[str], *, max_batch: int = MAX_BATCH) -> None:
        self._store_path = str(store_path)
        self._max_batch = max_batch
        self._waiting: collections.deque[_Job] = collections.deque()
        self._child: _Child | None = None
        self._lock = threading.Lock()  # start and stop may come from other threads

    async def run(self, work: Callable[[Any], T]) -> T:
        """Run ``work(conn)`` inside a write transaction in the writer process; its result once
        committed, or what it raised (nothing of it is then written). ``work`` must pickle."""
        loop = asyncio.get_running_loop()
        payload = pickle.dumps(work, protocol=pickle.HIGHEST_PROTOCOL)
        child = self._child_for(loop)
        future: asyncio.Future[T] = loop.create_future()
        self._waiting.append(_Job(payload, future))
        if not child.sent:
            self._send(child)
        return await future

    def start(self) -> None:
        """Start the writer process now for the running event loop, rather than with the first
        write (the API's lifespan does: the process's ~0.25 s of start-up and imports then
        overlap the server's own)."""
        self._child_for(asyncio.get_running_loop())

    def stop(self, timeout: float = 10.0) -> None:
        """End the writer process once it has answered its batch (a later ``run`` starts a new
        one). Call it when no write is waiting: the API's lifespan does, after the server stops."""
        with self._lock:
            child, self._child = self._child, None
        if child is None:
            return
        assert child.process.stdin is not None
        try:
            child.process.stdin.close()  # the child ends at the end of its input
        except OSError:
            pass
        try:
            child.process.wait(timeout)
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()
        if child.loop.is_closed():
            self._detach(child)
            return
        try:
            child.loop.call_soon_threadsafe(self._detach, child)
        except RuntimeError:  # the loop closed meanwhile
            self._detach(child)

    # -- on the event loop -------------------------------------------------------------------------
    def _child_for(self, loop: asyncio.AbstractEventLoop) -> _Child:
        with self._lock:
            child = self._child
            if child is not None and child.loop is not loop:
                if not child.loop.is_closed():
                    raise RuntimeError("the group writer serves one event loop at a time")
                child = None
            if child is None or child.process.poll() is not None:
                child = self._child = _Child(self._store_path, loop)
                loop.add_reader(child.stdout, self._readable, child)
            return child

    def _send(self, child: _Child) -> None:
        count = min(len(self._waiting), self._max_batch)
        batch = [self._waiting.popleft() for _ in range(count)]
        child.unsent = memoryview(encode([job.payload for job in batch]))
        child.sent.append(batch)
        self._write(child)

    def _write(self, child: _Child) -> None:
        try:
            while child.unsent:
                child.unsent = child.unsent[os.write(child.stdin, child.unsent) :]
        except BlockingIOError:
            if not child.writing:
                child.writing = True
                child.loop.add_writer(child.stdin, self._write, child)
            return
        except OSError:
            self._lost(child)
            return
        if child.writing:
            child.writing = False
            child.loop.remove_writer(child.stdin)

    def _readable(self, child: _Child) -> None:
        try:
            data = os.read(child.stdout, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost(child)
            return
        for outcomes in child.reader.feed(data):
            batch = child.sent.popleft()
            for job, (ok, value) in zip(batch, outcomes, strict=True):
                if job.future.done():  # cancelled: the client went away
                    continue
                if ok:
                    job.future.set_result(value)
                else:
                    job.future.set_exception(value)
        if self._waiting and not child.sent and self._child is child:
            self._send(child)

    def _lost(self, child: _Child) -> None:
        """The child's pipes closed: fail what it had not answered and what waited for it; the
        next write starts a new one."""
        self._detach(child)
        with self._lock:
            # Writes waiting for this child fail with it, unless a new child has taken over
            # (after ``stop`` none has: nothing would send them).
            current = self._child is child or self._child is None
            if self._child is child:
                self._child = None
        lost = [job for batch in child.sent for job in batch]
        child.sent.clear()
        if current:
            lost += self._waiting
            self._waiting.clear()
        # Its pipes close as it exits: its exit code is there at once, or soon; a stuck one is
        # killed after a second. The event loop never waits for it: a thread does, and the
        # writes it had fail once it is reaped (the error then says how it ended).
        code = child.process.poll()
        if code is not None:
            _fail(lost, code)
            return

        def reap() -> None:
            ended = _reap(child.process)
            try:
                child.loop.call_soon_threadsafe(_fail, lost, ended)
            except RuntimeError:  # the loop closed meanwhile: nobody waits for these writes
                pass

        threading.Thread(target=reap, name="prefctl-writer-reaper", daemon=True).start()

    def _detach(self, child: _Child) -> None:
        if not child.attached:
            return
        child.attached = False
        try:
            child.loop.remove_reader(child.stdout)
            if child.writing:
                child.writing = False
                child.loop.remove_writer(child.stdin)
        except (ValueError, OSError, RuntimeError):
            pass
        assert child.process.stdout is not None
        child.process.stdout.close()


def _reap(process: subprocess.Popen[bytes]) -> int:
    """Wait for a writer process whose pipes closed (off the event loop); kill it if stuck."""
    try:
        return process.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _fail(lost: list[_Job], code: int) -> None:
    error = WriterProcessError(
        f"the emulator's writer process stopped (exit code {code}); "
        "the write may not have been stored"
    )
    for job in lost:
        if not job.future.done():
            job.future.set_exception(error)
