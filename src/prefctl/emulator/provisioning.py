"""Subscription provisioning in the emulator: the handshake runner as a background service.

Called by ``app.create_app``: ``register`` makes the context's one ``HandshakeRunner`` and appends
it to ``ctx.services``, so it runs for the server's lifetime, resumes unfinished provisioning at
start-up and stops with the server. The subscription routes reach it with ``handshake_runner(ctx)``
and call ``notify`` after a create, a Url change, a delete or a validation GET. (The routers
themselves are included by ``prefctl.emulator.api``.)

Every handshake duration goes through ``ctx.scaled`` (``--time-scale``); codes and validation
tokens come from ``random.SystemRandom``, since a token alone validates a subscription.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from prefctl import __version__
from prefctl.dispatcher.handshake import HandshakeRunner, HandshakeTimings
from prefctl.emulator.context import EmulatorContext

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["handshake_runner", "register"]


def handshake_runner(ctx: EmulatorContext) -> HandshakeRunner:
    """The context's handshake runner (made on first use)."""
    runner = ctx.handshake_runner
    if runner is None:
        with ctx.lock:
            if ctx.handshake_runner is None:
                ctx.handshake_runner = HandshakeRunner(
                    ctx.connection,
                    clock=ctx.clock,
                    rng=random.SystemRandom(),
                    api_url=ctx.api_url,
                    timings=HandshakeTimings.scaled(ctx.scaled),
                    user_agent=f"prefctl-emulator/{__version__}",
                )
            runner = ctx.handshake_runner
    return runner


def register(app: FastAPI, ctx: EmulatorContext) -> None:
    """Run the handshake runner for as long as the emulator serves."""

    @asynccontextmanager
    async def service(context: EmulatorContext) -> AsyncIterator[None]:
        async with handshake_runner(context).running():
            yield

    ctx.services.append(service)
