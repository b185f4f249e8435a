"""The one error tree of prefctl.

Core code raises these; only ``prefctl.cli`` turns them into a one-line message on stderr and the
process exit code. Each error carries a ``hint`` that tells the user what to do next.

    PrefctlError                exit 1  the operation failed (API error, check failed, wait not met)
    ├── UsageError              exit 2  bad flags, arguments or input files
    │   ├── ConfigError         exit 2  missing, unreadable or invalid configuration
    │   └── DiskFullError       exit 2  the disk is full: the write was not stored
    ├── AuthError               exit 3  authentication or permission refused
    ├── NotFoundError           exit 4  the thing asked for does not exist
    └── UnreachableError        exit 5  the service could not be reached or timed out

Messages never contain secrets: callers pass names (``client_secret_env``), never values.
"""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_NOT_FOUND = 4
EXIT_UNREACHABLE = 5


class PrefctlError(Exception):
    """An expected failure, shown to the user as one line with an optional hint."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(PrefctlError):
    """Bad flags, arguments or input: the command cannot run as asked."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """Configuration that is missing, unreadable or invalid."""


class DiskFullError(UsageError):
    """A write found the disk full (SQLite's "database or disk is full", ENOSPC): nothing of it
    was stored, and what was stored before is intact. The emulator answers it with 507."""


class AuthError(PrefctlError):
    """Authentication or authorization was refused."""

    exit_code = EXIT_AUTH


class NotFoundError(PrefctlError):
    """The resource asked for does not exist."""

    exit_code = EXIT_NOT_FOUND


class UnreachableError(PrefctlError):
    """The service could not be reached, or did not answer in time."""

    exit_code = EXIT_UNREACHABLE


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` when a name in ``known`` is close to ``given`` (a typo, another
    case), else ``""``: to end a message about a name prefctl does not know."""
    import difflib

    names = [name for name in known if name]
    by_case = [name for name in names if name.lower() == given.lower()]
    close = by_case or difflib.get_close_matches(given, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
