"""Wake-ups of idle dispatchers when deliveries come due, on a PostgreSQL store.

A transaction that makes deliveries due (new ones queued, held ones released, finished ones
started over) sends ``NOTIFY prefctl_deliveries_due`` (``_dialect.notify_due``): PostgreSQL
delivers it when the transaction commits, once however many rows it queued. A dispatcher
listens on a connection of its own (``DueListener``) and is woken at once, instead of at its
account's next turn: on several machines, PATCH → delivered takes no longer than on SQLite.

A notification can be missed (the connection broke, the server restarted): the listener then
reconnects by itself and wakes the dispatcher once more on reconnecting, and the dispatcher
polls each account every Duration as it does on SQLite, so nothing waits for a notification.
On SQLite there is nothing to listen to (``listen_for_due`` gives None): the dispatcher polls.

    >>> listener = listen_for_due("postgresql://prefctl@db/prefctl", on_due=engine_wake)
    >>> ...
    >>> listener.close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from prefctl.store._dialect import DUE_CHANNEL

__all__ = ["DueListener", "listen_for_due"]

log = logging.getLogger(__name__)

# How often the listening thread looks up from waiting (to stop when asked).
POLL_SECONDS = 0.5
# How long it waits before reconnecting after its connection broke, doubling up to the maximum.
RECONNECT_FIRST_SECONDS = 0.2
RECONNECT_MAX_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 5


class DueListener:
    """Calls ``on_due()`` (from its own thread) whenever deliveries came due in the store at
    ``url``, and once after each (re)connection. ``close`` stops it."""

    def __init__(self, url: str, on_due: Callable[[], None]) -> None:
        self._url = url
        self._on_due = on_due
        self._stopped = threading.Event()
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="prefctl-wakeups", daemon=True)
        self._thread.start()

    def wait_listening(self, timeout: float) -> bool:
        """Whether the listener is listening (waits up to ``timeout`` seconds for it)."""
        return self._connected.wait(timeout)

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=POLL_SECONDS * 4)

    def _listen(self) -> None:
        import psycopg

        delay = RECONNECT_FIRST_SECONDS
        while not self._stopped.is_set():
            try:
                with psycopg.connect(
                    self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
                ) as conn:
                    conn.execute(f"LISTEN {DUE_CHANNEL}")
                    self._connected.set()
                    delay = RECONNECT_FIRST_SECONDS
                    self._on_due()  # what came due while it was not listening
                    while not self._stopped.is_set():
                        for _ in conn.notifies(timeout=POLL_SECONDS):
                            self._on_due()
            except psycopg.Error as exc:
                self._connected.clear()
                log.debug("wake-ups: %s; listening again in %.1f s", exc, delay)
                self._stopped.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX_SECONDS)


def listen_for_due(location: Path | str, on_due: Callable[[], None]) -> DueListener | None:
    """A listener for the store at ``location`` when it is PostgreSQL; None for SQLite (its
    dispatchers poll)."""
    from prefctl.store.db import is_postgres_location

    if not is_postgres_location(location):
        return None
    return DueListener(str(location), on_due)
