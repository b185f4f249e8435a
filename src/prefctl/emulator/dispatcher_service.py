"""The dispatcher inside the emulator: a background service for the server's lifetime.

``register(app, ctx)`` (called by ``emulator/app.py``) adds the service; when the
server starts, the engine starts on a thread of its own with its own event loop, so that
deliveries never wait for the REST API and the API never waits for deliveries. It delivers every
account of the emulator's store with ``ctx.time_scale`` (every delivery-rule duration divided; wire
timestamps stay real) and the observers of ``observer.OBSERVER_FACTORIES``. When the server stops,
the engine records the answers already in and gives back the leases of unanswered requests.

If the engine fails unexpectedly it is logged and started again a second later: a dispatcher that
stopped silently would lose no event (leases) but deliver none either.

``ctx.settings["dispatcher"] = False`` leaves the dispatcher out (tests of other features).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING

from prefctl.clock import Clock
from prefctl.dispatcher.run import DispatcherConfig, new_event_loop, run_async

if TYPE_CHECKING:
    from fastapi import FastAPI

    from prefctl.emulator.context import EmulatorContext

__all__ = ["SETTING", "EmbeddedDispatcher", "register"]

log = logging.getLogger(__name__)

SETTING = "dispatcher"
RESTART_DELAY_SECONDS = 1.0
STOP_TIMEOUT_SECONDS = 10.0


def register(app: FastAPI, ctx: EmulatorContext) -> None:
    """Add the dispatcher to the emulator's services (unless ``ctx.settings`` turns it off)."""
    if ctx.settings.get(SETTING, True) is False:
        return
    ctx.services.append(_service)


@contextlib.asynccontextmanager
async def _service(ctx: EmulatorContext) -> AsyncIterator[None]:
    dispatcher = EmbeddedDispatcher(ctx)
    dispatcher.start()
    try:
        yield
    finally:
        await asyncio.to_thread(dispatcher.stop)


class _RealTimeWaits:
    """The emulator's clock for times, real time for waits: a test that drives a FakeClock moves
    what is due, while the dispatcher's cycles still wait on the wall clock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def now(self) -> datetime:
        return self._clock.now()

    def monotonic(self) -> float:
        return self._clock.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class EmbeddedDispatcher:
    """The engine on a thread of its own, for one emulator."""

    def __init__(self, ctx: EmulatorContext) -> None:
        self.ctx = ctx
        # Derived from the emulator's random source: a seeded emulator repeats its jitter.
        self._rng = random.Random(ctx.rng.getrandbits(64))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prefctl-dispatcher", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._started.wait(STOP_TIMEOUT_SECONDS)

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(STOP_TIMEOUT_SECONDS)
        if self._thread.is_alive():
            log.warning("the dispatcher did not stop within %g s", STOP_TIMEOUT_SECONDS)

    def _run(self) -> None:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        self._started.set()
        ctx = self.ctx
        config = DispatcherConfig(
            store_path=ctx.store_path,
            clock=_RealTimeWaits(ctx.clock),
            rng=self._rng,
            time_scale=ctx.time_scale,
            settings=ctx.settings,
        )
        while not stop.is_set():
            try:
                await run_async(config, stop=stop)
            except Exception:  # keep delivering: log the failure with its trace and start again
                log.exception("the dispatcher failed; starting it again")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RESTART_DELAY_SECONDS)
