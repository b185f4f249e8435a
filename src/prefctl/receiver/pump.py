"""The consumer side of the verdict stream: batches of verdicts, off the request path.

The ASGI handler only appends each finished ``Verdict`` to a deque (``push``). The first verdict
after a delivery sets a timer on the same event loop (``VerdictPump.run`` ties the pump to the
loop): a batch builds up for a moment, then each verdict is completed with the ``Tracker``
(duplicate, attempt, out of order, latency), authentic events are counted for ``--exit-after``,
and the batch goes to each sink. A request thus costs an append and a check, not a task switch.

Why the loop and not a thread: a second thread running Python code makes the event loop wait for the
GIL every time it comes back from a socket call, which measurably slowed the receiver. Sinks
therefore run on the loop and must be quick; anything that can block (stdout, a file) goes through
a ``BackgroundWriter``, a thread that only performs the writes (which release the GIL). A burst of
10,000 requests thus costs a few large writes rather than 10,000 small ones.

A sink or writer that fails (a closed stdout, a full disk) stops the receiver; ``serve()``
re-raises the error once the server has shut down.
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from prefctl.receiver.tracker import Tracker
from prefctl.receiver.verdict import Verdict

__all__ = ["BackgroundWriter", "Sink", "VerdictPump"]

Sink = Callable[[Sequence[Verdict]], None]

BATCH_INTERVAL_SECONDS = 0.02  # under load, let a batch build up for this long


class VerdictPump:
    """Moves verdicts from the request handlers to the sinks, in batches, as an asyncio task."""

    def __init__(
        self,
        sinks: Sequence[Sink],
        *,
        tracker: Tracker | None = None,
        exit_after: int | None = None,
        on_exit_after: Callable[[], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        batch_interval: float = BATCH_INTERVAL_SECONDS,
    ) -> None:
        self.sinks = list(sinks)
        self.tracker = tracker or Tracker()
        self.exit_after = exit_after
        self.on_exit_after = on_exit_after
        self.on_error = on_error
        self.batch_interval = batch_interval
        self.events = 0
        self.requests = 0
        self._queue: collections.deque[Verdict] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._failed = False

    def push(self, verdict: Verdict) -> None:
        """Queue a finished verdict (on the event loop; cheap)."""
        self._queue.append(verdict)
        if self._timer is None and self._loop is not None:
            # The first verdict since the last batch: deliver them all a moment from now.
            self._timer = self._loop.call_later(self.batch_interval, self._on_timer)

    @property
    def exit_reached(self) -> bool:
        return self.exit_after is not None and self.events >= self.exit_after

    async def run(self) -> None:
        """Deliver batches until cancelled; ``flush()`` delivers what is left.

        An idle receiver has no timer pending; under load a batch builds up for
        ``batch_interval`` after its first verdict.
        """
        loop = asyncio.get_running_loop()
        self._loop = loop
        if self._queue:
            self._timer = loop.call_later(self.batch_interval, self._on_timer)
        try:
            await loop.create_future()  # never set: the task runs until it is cancelled
        finally:
            self._loop = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Deliver everything queued now."""
        queue_ = self._queue
        while queue_:
            batch = list(queue_)
            queue_.clear()
            self._deliver(batch)

    def _deliver(self, batch: list[Verdict]) -> None:
        reached_before = self.exit_reached
        observe = self.tracker.observe
        self.events += sum([observe(verdict) for verdict in batch])
        self.requests += len(batch)
        if not self._failed:
            try:
                for sink in self.sinks:
                    sink(batch)
            except Exception as exc:  # handed to serve(), which re-raises it in the caller
                self._failed = True
                if self.on_error is not None:
                    self.on_error(exc)
        if not reached_before and self.exit_reached and self.on_exit_after is not None:
            self.on_exit_after()


class BackgroundWriter:
    """Performs blocking writes on its own thread, in order, so that the event loop never waits.

    ``write(chunk)`` queues a chunk for ``target(chunk)`` (e.g. a file's write-and-flush); the
    first exception stops the writer and goes to ``on_error``. ``close(timeout)`` writes what is
    queued, waiting at most ``timeout`` seconds for a reader that does not read.

    With ``max_pending_bytes``, what waits to be written is bounded: a chunk that would take the
    queue past it is **dropped** (unless the queue is empty) and its lines counted in ``dropped``;
    before the next chunk that is written, ``on_dropped(count)`` runs on the writer's thread, so
    that the output can say how many lines are missing there. ``backlogged`` tells a producer
    that the chunk it is about to make would be dropped, so that it need not make it.
    """

    def __init__(
        self,
        target: Callable[[Any], None],
        *,
        name: str = "prefctl-writer",
        on_error: Callable[[BaseException], None] | None = None,
        max_pending_bytes: int | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self._target = target
        self.on_error = on_error
        self.max_pending_bytes = max_pending_bytes
        self.on_dropped = on_dropped
        self.error: BaseException | None = None
        self.dropped = 0  # lines dropped in all
        self._unreported = 0  # lines dropped since the last chunk queued
        self._pending_bytes = 0
        self._lock = threading.Lock()
        self._chunks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def backlogged(self) -> bool:
        """Whether the queue is full: the next chunk (but an empty queue's) would be dropped."""
        limit = self.max_pending_bytes
        return limit is not None and self._pending_bytes >= limit

    def skip(self, lines: int) -> None:
        """Count ``lines`` that are not written because the reader is behind."""
        self.dropped += lines
        self._unreported += lines

    def write(self, chunk: Any, *, size: int = 0, lines: int = 1) -> bool:
        """Queue ``chunk`` (``size`` bytes, ``lines`` lines); False when it was dropped."""
        if self.error is not None:
            return False
        limit = self.max_pending_bytes
        if limit is not None and self._pending_bytes and self._pending_bytes + size > limit:
            self.skip(lines)
            return False
        if self._unreported:
            self._chunks.put(_Dropped(self._unreported))
            self._unreported = 0
        with self._lock:
            self._pending_bytes += size
        self._chunks.put((chunk, size))
        return True

    def close(self, timeout: float | None = None) -> bool:
        """Write what is queued and stop; False when that took longer than ``timeout`` seconds
        (a reader that does not read): the thread is then left behind, blocked in a write."""
        self._chunks.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            item = self._chunks.get()
            if item is _STOP:
                return
            if self.error is not None:
                continue
            try:
                if isinstance(item, _Dropped):
                    if self.on_dropped is not None:
                        self.on_dropped(item.lines)
                    continue
                chunk, size = item
                self._target(chunk)
                with self._lock:
                    self._pending_bytes -= size
            except Exception as exc:  # reported to the receiver, which stops and re-raises it
                self.error = exc
                if self.on_error is not None:
                    self.on_error(exc)


class _Dropped:
    __slots__ = ("lines",)

    def __init__(self, lines: int) -> None:
        self.lines = lines


_STOP = object()
