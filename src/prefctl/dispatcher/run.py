"""Running the dispatcher over a store: ``run(config)`` (blocking) and ``running(config)`` (async).

``prefctl dispatcher run`` forwards here; the emulator runs the same engine as a service
(``emulator/dispatcher_service.py``); ``prefctl replay`` and ``prefctl demo`` use ``running``.

- Without ``once`` the dispatcher runs until SIGINT/SIGTERM (``run``) or until its ``stop`` event is
  set, then records the answers already in and gives back the leases of unanswered requests.
- **[decision]** ``once`` delivers what is due and stops: it runs cycles (MaxConcurrentRequests
  each, Duration apart) until every request has its answer or has timed out and nothing is due
  any more. Retries scheduled for later stay queued; requests in the late-success window are
  abandoned.

    >>> totals = run(DispatcherConfig(store_path=Path("emulator.db"), once=True))
    >>> totals.delivered, totals.dead_lettered

The store is a SQLite file (a path) or a PostgreSQL database (a ``postgresql://`` URL), where any
number of dispatchers, on any machines, share the queue (docs/team-sandbox.md): there the
dispatcher is woken by the store when deliveries come due (``store/wakeups.py``), and reconnects
by itself when the server restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefctl.clock import Clock, SystemClock
from prefctl.dispatcher.engine import Engine, EngineTotals
from prefctl.dispatcher.observer import EngineObserver, ObserverContext, load_observers
from prefctl.dispatcher.rule_time import check_time_scale
from prefctl.dispatcher.transport import Transport
from prefctl.webhooks.signature import RAW, check_encoding

__all__ = ["DispatcherConfig", "new_event_loop", "run", "run_async", "running"]


@dataclass(frozen=True)
class DispatcherConfig:
    """One dispatcher run over the store at ``store_path``: a SQLite file, or a PostgreSQL
    database's ``postgresql://`` URL (a ``str``).

    ``account`` None delivers every account. ``clock``, ``transport`` (default: a new
    ``CurlTransport``) and ``rng`` are seams. ``time_scale`` divides every delivery-rule duration.
    ``observers`` are added to those of ``observer.OBSERVER_FACTORIES`` (``plugins=False``: only
    these); ``settings`` is handed to those factories (e.g. SMTP options).
    """

    store_path: Path | str
    account: str | None = None
    clock: Clock | None = field(default=None, compare=False)
    transport: Transport | None = field(default=None, compare=False)
    rng: random.Random | None = field(default=None, compare=False)
    once: bool = False
    time_scale: float = 1.0
    signature_encoding: str = RAW
    observers: Sequence[EngineObserver] = ()
    plugins: bool = True
    settings: Mapping[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise UsageError or ConfigError (exit 2) for a run that cannot work."""
        check_time_scale(self.time_scale)
        check_encoding(self.signature_encoding)
        from prefctl.store.db import is_postgres_location, require_store

        if not is_postgres_location(self.store_path):
            require_store(Path(self.store_path))


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (it is, with uvicorn[standard]), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def run(config: DispatcherConfig) -> EngineTotals:
    """Run the dispatcher in this thread until it is done (see the module docstring)."""
    config.validate()
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(run_async(config, handle_signals=True))


async def run_async(
    config: DispatcherConfig, *, stop: asyncio.Event | None = None, handle_signals: bool = False
) -> EngineTotals:
    """Run the dispatcher on the current loop until ``stop`` is set (or, with ``once``, until
    done). ``handle_signals`` turns SIGINT and SIGTERM into a clean stop (main thread only)."""
    config.validate()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    if handle_signals and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    try:
        async with _engine(config) as engine:
            return await engine.run(stop=stop, once=config.once)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)


@contextlib.asynccontextmanager
async def running(config: DispatcherConfig) -> AsyncIterator[Engine]:
    """The dispatcher running in the background on the current loop for the ``async with``
    block (``once`` is ignored); leaving the block stops it cleanly."""
    config.validate()
    stop = asyncio.Event()
    async with _engine(config) as engine:
        await engine.start()
        task = asyncio.create_task(engine.run(stop=stop), name="prefctl-dispatcher")
        try:
            yield engine
        finally:
            stop.set()
            await task


@contextlib.asynccontextmanager
async def _engine(config: DispatcherConfig) -> AsyncIterator[Engine]:
    from prefctl.store.db import connect, in_use, is_postgres_location
    from prefctl.store.migrations import migrate
    from prefctl.store.wakeups import listen_for_due

    location = config.store_path
    postgres = is_postgres_location(location)
    # emulator reset refuses while the dispatcher runs (a SQLite file: a lock beside it)
    with contextlib.nullcontext() if postgres else in_use(location):
        conn = connect(location)
        transport = config.transport
        owned_transport = transport is None
        closers: list[Callable[[], Any]] = []
        try:
            migrate(conn)
            if transport is None:
                from prefctl.dispatcher.curl import CurlTransport

                transport = CurlTransport()
            clock = config.clock or SystemClock()
            observers = list(config.observers)
            if config.plugins:
                context = ObserverContext(
                    config.store_path, conn, clock, config.time_scale, config.settings
                )
                plugins = load_observers(context)
                closers += [close for o in plugins if callable(close := getattr(o, "close", None))]
                observers += plugins
            engine = Engine(
                conn,
                transport=transport,
                clock=clock,
                rng=config.rng or random.Random(),
                account=config.account,
                time_scale=config.time_scale,
                observers=observers,
                store_thread=True,
                signature_encoding=config.signature_encoding,
            )
            loop = asyncio.get_running_loop()

            def wake() -> None:  # on the listener's thread
                loop.call_soon_threadsafe(engine.wake)

            listener = listen_for_due(location, wake)
            if listener is not None:
                closers.append(listener.close)
            yield engine
        finally:
            for close in closers:
                close()
            if owned_transport and transport is not None:
                await transport.aclose()
            conn.close()
