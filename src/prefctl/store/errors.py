"""The store's failures in prefctl's words: what callers catch instead of the driver's errors.

The store translates the database driver's errors (``connection.store_error``) where they leave
it, so nothing outside ``store/`` names the driver. Each carries ``reason``: the driver's own
words, for a log line.

    PrefctlError
    ├── StoreError                    exit 1  the store failed (an error the store did not expect)
    │   ├── StoreBusyError            exit 1  another process held the write lock too long
    │   └── StoreDamagedError         exit 2  the store file is damaged (restore or reset it)
    └── UsageError
        └── DiskFullError
            └── StoreDiskFullError    exit 2  the store's disk is full: nothing was written
"""

from __future__ import annotations

from prefctl.errors import EXIT_USAGE, DiskFullError, PrefctlError

__all__ = ["StoreBusyError", "StoreDamagedError", "StoreDiskFullError", "StoreError"]


class StoreError(PrefctlError):
    """The store failed; ``reason`` is the driver's message."""

    def __init__(self, message: str, *, hint: str | None = None, reason: str = "") -> None:
        super().__init__(message, hint=hint)
        self.reason = reason or message


class StoreBusyError(StoreError):
    """Another connection held a lock on the store for the whole busy timeout."""


class StoreDamagedError(StoreError):
    """The store file is damaged (overwritten, truncated, not a store): not a bug of prefctl."""

    exit_code = EXIT_USAGE


class StoreDiskFullError(DiskFullError, StoreError):
    """A write to the store found its disk full: nothing of it was stored."""
