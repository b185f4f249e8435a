"""The emulator's writer process: profile writes on a core of their own.

The event loop and a writer *thread* take turns on the GIL, so one emulator process never used
much more than one core for PATCHes (docs/performance.md). ``emulator.group_writer`` therefore
runs ``python -m prefctl.emulator.write_process STORE`` and talks to it over its stdin and stdout
in frames: a 4-byte big-endian length, then a pickle (both ends are this package; nothing else
writes to these pipes).

Each frame the child reads is one batch: a list of pickled jobs, each a callable ``job(conn)``. It
runs them in one transaction, each in its own savepoint, commits, and answers one frame: a list of
``(ok, value)`` in the batch's order, the job's result or the exception it raised (one that cannot
be pickled comes back as a ``RuntimeError`` naming it). A job that raises is rolled back alone; a
failed BEGIN or COMMIT fails every job of its batch, and so does a job after which SQLite has
rolled the whole transaction back itself (a full disk: ``DiskFullError``). End of input ends the
child. SIGINT is ignored: a terminal's Ctrl-C reaches the whole process group, and the parent
stops the child itself once its own writes are done.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from prefctl.store import Store

__all__ = ["FrameReader", "child_environment", "encode", "main", "read_frame", "run_batch"]

_HEADER = struct.Struct(">I")

Outcome = tuple[bool, Any]


def child_environment() -> dict[str, str]:
    """The environment of a child ``python -m prefctl…`` process: this one's, with ``sys.path``
    as ``PYTHONPATH``, so that it imports what is pickled to it by reference from where this
    process does."""
    import os

    path = os.pathsep.join(entry for entry in sys.path if entry)
    return {**os.environ, "PYTHONPATH": path}


# The store of a writer process whose command line says ``-``: a PostgreSQL URL may carry a
# password, and a command line is readable by every user of the machine (``ps``); the
# environment is the process owner's only.
STORE_ENV = "PREFCTL_WRITER_STORE"


def store_argument(store: str) -> tuple[str, dict[str, str]]:
    """The writer process's argument for ``store`` and what to add to its environment: a SQLite
    path on the command line (``ps`` shows which file), a PostgreSQL URL in ``STORE_ENV``."""
    from prefctl.store.postgres import is_postgres_location

    if is_postgres_location(store):
        return "-", {STORE_ENV: store}
    return store, {}


def encode(value: object) -> bytes:
    """One frame holding ``value``."""
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def read_frame(stream: IO[bytes]) -> Any | None:
    """The next frame's value from a blocking stream; None at the end of the stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)  # noqa: S301 (our own process writes these frames)


class FrameReader:
    """Frames out of bytes as they arrive (the parent reads without blocking)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            frames.append(pickle.loads(self._buffer[_HEADER.size : end]))  # noqa: S301
            del self._buffer[:end]
        return frames


def run_batch(conn: Store, jobs: Sequence[bytes]) -> list[Outcome]:
    """Run pickled ``jobs`` in one transaction, each in its own savepoint (module docstring)."""
    from prefctl.store.db import transaction

    outcomes: list[Outcome] = []
    try:
        with transaction(conn):
            for payload in jobs:
                try:
                    job: Callable[[Store], Any] = pickle.loads(payload)  # noqa: S301
                    with transaction(conn):  # a savepoint: this write alone on failure
                        outcomes.append((True, job(conn)))
                except Exception as exc:  # handed back to the route awaiting this write
                    if not conn.in_transaction:
                        # SQLite rolled the whole batch back (a full disk): none of it is
                        # stored, and a next job would run, and commit, on its own.
                        raise
                    outcomes.append((False, exc))
    except Exception as exc:  # BEGIN or COMMIT failed: nothing of the batch is stored
        kept = [outcome if not outcome[0] else (False, exc) for outcome in outcomes]
        outcomes = kept + [(False, exc)] * (len(jobs) - len(kept))
    return outcomes


def _answer(outcomes: list[Outcome]) -> bytes:
    try:
        return encode(outcomes)
    except Exception:
        return encode([_portable(outcome) for outcome in outcomes])


def _portable(outcome: Outcome) -> Outcome:
    try:
        pickle.loads(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))  # noqa: S301
    except Exception:
        value = outcome[1]
        return (False, RuntimeError(f"the writer process could not send back {value!r}"))
    return outcome


def _preload() -> None:
    """Import what the jobs run before the first one arrives: the profile writes, and the bulk
    import's steps with the pydantic model that validates their records (~0.25 s in all).

    The emulator does not wait for this process, which starts with its API server
    (``GroupWriter.start``), so the time is spent then rather than by the first write a client
    waits for (bench/first_write.py: 131 ms for the first profile created, 284 ms for the first
    import, before; 7 and 9 ms now).
    """
    import prefctl.emulator.writes
    import prefctl.models._base
    import prefctl.models.problem
    import prefctl.models.profile
    import prefctl.store.imports  # noqa: F401


def main(argv: Sequence[str]) -> int:
    """Serve batches for the store at ``argv[0]`` until stdin ends."""
    from prefctl.store.db import connect, is_postgres_location

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stdout carries frames only
    store = os.environ.pop(STORE_ENV, "") if argv[0] == "-" else argv[0]
    conn = connect(store if is_postgres_location(store) else Path(store))
    _preload()
    try:
        while (jobs := read_frame(source)) is not None:
            sink.write(_answer(run_batch(conn, jobs)))
            sink.flush()
    except BrokenPipeError:
        pass  # the parent is gone
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
