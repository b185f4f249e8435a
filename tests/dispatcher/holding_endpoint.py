"""A real slow webhook endpoint on 127.0.0.1: it holds every POST until the test releases it.

It counts the requests it holds now and the most it ever held at once (and notes when the first
came), as a receiver would see them (one per connection: HTTP/1.1 keep-alive, no pipelining), so a test can wait for a number of
requests to be in flight, check the peak, and then let them go, with no sleeps::

    with HoldingEndpoint() as endpoint:
        ...                                   # the dispatcher sends to endpoint.url
        endpoint.wait_holding(50)
        endpoint.release()                    # answered 200; later requests are held again

``HoldingEndpoint(hold_seconds=1.0)`` answers each request by itself that long after it came (a
slow endpoint), counting the same way; ``status`` is the answer's HTTP status (default 200).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["HoldingEndpoint"]

_ANSWER = "HTTP/1.1 {status} Answer\r\nContent-Length: 0\r\n\r\n"


class HoldingEndpoint:
    """An asyncio HTTP/1.1 server on its own thread and loop (see the module docstring)."""

    def __init__(self, *, hold_seconds: float | None = None, status: int = 200) -> None:
        self.hold_seconds = hold_seconds
        self._answer = _ANSWER.format(status=status).encode("ascii")
        self.holding = 0
        self.peak = 0
        self.answered = 0
        self.first_request_at: float | None = None  # time.time() when the first request came
        self._loop = asyncio.new_event_loop()
        self._held: list[asyncio.Event] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="holding-endpoint", daemon=True)
        self._server: asyncio.Server | None = None
        self.url = ""

    def __enter__(self) -> HoldingEndpoint:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the holding endpoint did not start")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def release(self) -> None:
        """Answer 200 to every request held now."""
        self._loop.call_soon_threadsafe(self._release)

    def wait_holding(self, count: int, timeout: float = 30.0) -> None:
        """Wait until exactly ``count`` requests are held at once (polled every 10 ms)."""
        self.wait_for(lambda: self.holding == count, f"{count} requests held", timeout)

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        """Wait until ``condition()`` holds (polled every 10 ms); fail saying ``what``."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"not {what} within {timeout} s (holding {self.holding})")
            time.sleep(0.01)

    # -- the server's thread -------------------------------------------------------------------
    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._connection, "127.0.0.1", 0, backlog=1024)
        )
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/webhooks"
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _stop(self) -> None:
        self._release()
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    def _release(self) -> None:
        held, self._held = self._held, []
        for event in held:
            event.set()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                released = asyncio.Event()
                if self.first_request_at is None:
                    self.first_request_at = time.time()
                self.holding += 1
                self.peak = max(self.peak, self.holding)
                try:
                    if self.hold_seconds is None:
                        self._held.append(released)
                        await released.wait()
                    else:
                        await asyncio.sleep(self.hold_seconds)  # the endpoint's own latency
                finally:
                    self.holding -= 1
                writer.write(self._answer)
                await writer.drain()
                self.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
