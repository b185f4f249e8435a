"""Shared test helpers: run the CLI in-process, find free ports, wait for servers."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def ndjson(self) -> list[Any]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(*args: str, stdin: str | None = None) -> CliResult:
    """Run ``prefctl ARGS`` in this process and capture what it prints and its exit code."""
    from prefctl.cli.app import run

    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.StringIO(stdin or "")
    sys.stdout, sys.stderr = out, err
    try:
        code = run([str(a) for a in args])
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return CliResult(code, out.getvalue(), err.getvalue())


def run_process(stdout: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m prefctl ARGS`` in a process whose stdout is ``"full"`` (/dev/full),
    ``"closed"`` (as with ``>&-``) or ``"broken-pipe"`` (a pipe whose reader has gone)."""
    command = [sys.executable, "-m", "prefctl", *args]
    options: dict[str, Any] = {"stderr": subprocess.PIPE, "text": True, "timeout": 60}
    if stdout == "closed":
        return subprocess.run(command, preexec_fn=lambda: os.close(1), **options)
    if stdout == "broken-pipe":
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            return subprocess.run(command, stdout=write_end, **options)
        finally:
            os.close(write_end)
    with open("/dev/full", "w") as full:
        return subprocess.run(command, stdout=full, **options)


def run_with_terminal_stderr(*args: str) -> CliResult:
    """Run ``python -m prefctl ARGS`` as from an interactive shell with ``> file``: stdout is a
    pipe and stderr a pseudo-terminal, so spinners and progress bars are live."""
    import threading

    command = [sys.executable, "-m", "prefctl", *args]
    master, slave = os.openpty()
    chunks: list[bytes] = []

    def drain() -> None:  # a terminal's buffer is small: read it while the command runs
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the command has ended and closed its side
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        env = {**os.environ, "TERM": "xterm"}
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env,
            timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(slave)
    reader.join(timeout=5)
    os.close(master)
    stderr = b"".join(chunks).decode("utf-8", "replace")
    return CliResult(done.returncode, done.stdout.decode("utf-8"), stderr)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(
    predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02
) -> None:
    """Poll ``predicate`` until it is true (bounded), for conditions with no event to wait on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")
