"""``prefctl_receiver``: ``prefctl receive`` on a free port for one test (see ``prefctl.testing``).

The receiver runs in-process (``receiver.serve.start_in_thread``) and verifies signatures with the
session emulator's credentials. It records what it receives in a temporary file, which also keeps
each request's body: ``events`` are the bodies of the verified events, in arrival order.
``fail_next`` adds a step to the receiver's fault plan at run time (``RunningReceiver.inject_fault``):
the receiver starts with an empty plan so that it can.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from prefctl.errors import UsageError
from prefctl.receiver.faults import FaultPlan, FaultStep
from prefctl.receiver.serve import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.receiver.verdict import Kind, SignatureResult, Verdict
from prefctl.testing._emulator import HOST, PrefctlEmulator
from prefctl.webhooks.signature import SigningCredentials

__all__ = ["PrefctlReceiver", "start_receiver"]

RECORDING_FILE = "received.ndjson"


class PrefctlReceiver:
    """A running receiver (the value of ``prefctl_receiver``); subscribe its ``url``."""

    def __init__(self, running: RunningReceiver, recording: Path) -> None:
        self._running = running
        self.url = running.webhook_url
        self.recording = recording
        self._events: list[dict[str, Any]] = []
        self._handshakes = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<PrefctlReceiver {self.url}>"

    @property
    def events(self) -> list[dict[str, Any]]:
        """The verified event envelopes received so far, in arrival order (handshakes excluded).

        Every delivery counts, whatever the receiver answered: an event answered 503 by
        ``fail_next`` and then retried appears once per attempt, with the same EventId.
        """
        with self._lock:
            self._take(timeout=0.0)
            return list(self._events)

    def wait_for(
        self, event_type: str, *, count: int = 1, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """The first ``count`` verified events of ``event_type``, waiting up to ``timeout``
        seconds for them; ``TimeoutError`` naming what did arrive otherwise."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = [e for e in self._events if e.get("EventType") == event_type]
                if len(found) >= count:
                    return found[:count]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"waited {timeout:g} s for {count} × {event_type} at {self.url}; "
                        f"arrived: {self._arrived()}"
                    )
                self._take(timeout=left)

    def fail_next(self, n: int, status: int = 503) -> None:
        """Answer the next ``n`` verified events with ``status`` (handshakes are still answered).
        Calls add up: ``fail_next(2)`` then ``fail_next(1, 500)`` fails three events."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UsageError(f"fail_next needs a number of events ≥ 1, not {n!r}")
        if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
            raise UsageError(f"fail_next needs an HTTP status from 200 to 599, not {status!r}")
        self._running.inject_fault(FaultStep(count=n, status=status, name="fail_next"))

    def close(self) -> None:
        self._running.stop()

    def _take(self, timeout: float) -> None:
        """Move the verdicts that arrived (waiting up to ``timeout`` for the first) into events."""
        import queue

        verdicts = self._running.verdicts
        try:
            self._keep(verdicts.get(timeout=timeout) if timeout > 0 else verdicts.get_nowait())
            while True:
                self._keep(verdicts.get_nowait())
        except queue.Empty:
            return

    def _keep(self, verdict: Verdict) -> None:
        if verdict.kind == Kind.HANDSHAKE:
            self._handshakes += 1
        elif verdict.kind == Kind.EVENT and verdict.signature == SignatureResult.VALID:
            body = verdict.body
            if body is not None:
                self._events.append(json.loads(body))

    def _arrived(self) -> str:
        counts = Counter(str(e.get("EventType")) for e in self._events)
        parts = [f"{n} × {event_type}" for event_type, n in counts.items()]
        if self._handshakes:
            parts.append(f"{self._handshakes} × handshake")
        return ", ".join(parts) or "nothing"


def start_receiver(emulator: PrefctlEmulator, workdir: Path) -> PrefctlReceiver:
    """Start a receiver that verifies with ``emulator``'s account; ``PrefctlError`` (one line)
    when it cannot start."""
    recording = workdir / RECORDING_FILE
    running = start_in_thread(
        ReceiverConfig(
            host=HOST,
            port=0,
            credentials=SigningCredentials(
                emulator.service_client_id, emulator.signature_user_id, emulator.hashkey
            ),
            faults=FaultPlan(),  # empty: ``fail_next`` adds to it at run time
            record=recording,
        )
    )
    return PrefctlReceiver(running, recording)
