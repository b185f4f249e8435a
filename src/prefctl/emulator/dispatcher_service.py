"""The dispatcher inside the emulator: a background service for the server's lifetime.

``register(app, ctx)`` (called by ``emulator/app.py``) adds the service; when the
server starts, the engine starts on a thread of its own with its own event loop, so that
deliveries never wait for the REST API and the API never waits for deliveries. It delivers every
account of the emulator's store with ``ctx.time_scale`` (every delivery-rule duration divided; wire
timestamps stay real) and the observers of ``observer.OBSERVER_FACTORIES``. When the server stops,
the engine records the answers already in and gives back the leases of unanswered requests.

If the engine fails unexpectedly it is logged and started again a second later: a dispatcher that
stopped silently would lose no event (leases) but deliver none either. A damaged store is no such
failure: the dispatcher writes nothing more to it, ``/healthz`` answers 503, and the store is
checked (read only) again after 1, 2, 4… seconds, at most a minute apart; the log says so once a
minute at most, with the path and the reason, and the engine starts again once the store is sound.

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
from prefctl.store.db import damage_found, is_damaged

if TYPE_CHECKING:
    from fastapi import FastAPI

    from prefctl.emulator.context import EmulatorContext

__all__ = ["SETTING", "EmbeddedDispatcher", "register"]

log = logging.getLogger(__name__)

SETTING = "dispatcher"
RESTART_DELAY_SECONDS = 1.0
# A damaged store: the longest wait between two checks of it, and between two log lines.
DAMAGED_RECHECK_SECONDS = 60.0
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
            signature_encoding=ctx.signature_encoding,
            settings=ctx.settings,
        )
        while not stop.is_set():
            try:
                await run_async(config, stop=stop)
            except Exception as exc:
                if is_damaged(exc):
                    await self._wait_for_a_sound_store(exc, stop)
                    continue
                # keep delivering: log the failure with its trace and start again
                log.exception("the dispatcher failed; starting it again")
                await _wait(stop, RESTART_DELAY_SECONDS)

    async def _wait_for_a_sound_store(self, exc: Exception, stop: asyncio.Event) -> None:
        """Back off while the store is damaged: nothing is written to it meanwhile; it is checked
        (read only) with growing pauses, and the log says why once a minute at most."""
        ctx = self.ctx
        reason = f"the store {ctx.store_path} is damaged: {exc}"
        if ctx.store_fault is None:
            ctx.store_fault = reason
        delay, logged_at = RESTART_DELAY_SECONDS, None
        while not stop.is_set():
            now = ctx.clock.monotonic()
            if logged_at is None or now - logged_at >= DAMAGED_RECHECK_SECONDS:
                log.error("the dispatcher is waiting: %s (checked again every minute)", reason)
                logged_at = now
            if await _wait(stop, delay):
                return
            problem = await asyncio.to_thread(damage_found, ctx.store_path)
            if problem is None:
                log.warning(
                    "the store %s reads as sound again: the dispatcher starts", ctx.store_path
                )
                return
            log.debug("the store is still damaged; next check in %g s", delay)
            reason = f"the store {ctx.store_path} is damaged: {problem}"
            delay = min(delay * 2, DAMAGED_RECHECK_SECONDS)


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stop`` is set; whether it was set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
