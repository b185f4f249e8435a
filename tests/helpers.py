"""Shared test helpers: run the CLI in-process, find free ports, wait for servers."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefctl.receiver.verdict import Verdict


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


def run_cli(*args: str | os.PathLike[str], stdin: str | None = None) -> CliResult:
    """Run ``prefctl ARGS`` in this process and capture what it prints and its exit code."""
    from prefctl.cli.app import run

    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.StringIO(stdin or "")
    sys.stdout, sys.stderr = out, err
    try:
        with _logging_as_in_a_new_process():
            code = run([str(a) for a in args])
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return CliResult(code, out.getvalue(), err.getvalue())


@contextmanager
def _logging_as_in_a_new_process() -> Iterator[None]:
    """Undo what ``-v`` set up when the run ends, as the end of a process would: its log handler
    writes to the current stderr, so it would log into the output of the next runs."""
    import logging

    names = ["", "prefctl", "httpx", "httpcore", "uvicorn", "uvicorn.error", "uvicorn.access"]
    levels = {name: logging.getLogger(name).level for name in names}
    handlers = list(logging.getLogger().handlers)
    try:
        yield
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


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
    return _run_on_terminal(args, stdout_on_terminal=False)


def run_in_terminal(
    *args: str,
    answers: Sequence[tuple[str, str | Callable[[], str]]] = (),
    hidden: bool = False,
    timeout: float = 60.0,
) -> CliResult:
    """Run ``python -m prefctl ARGS`` as typed in an interactive shell: stdin, stdout and stderr
    are one pseudo-terminal, its controlling terminal (Ctrl-C typed as ``"\x03"`` interrupts it).
    What the terminal showed is ``.stderr`` (and ``.output``); ``.stdout`` is empty.

    ``answers``: (text, keys) pairs; once ``text`` has appeared (after the previous one), ``keys``
    are typed as they are (end a line with ``"\n"``); a callable is called then for the keys.
    ``hidden``: wait before typing until the terminal stops echoing (a password prompt).
    """
    return _run_on_terminal(
        args, stdout_on_terminal=True, answers=answers, hidden=hidden, timeout=timeout
    )


def _run_on_terminal(
    args: Sequence[str],
    *,
    stdout_on_terminal: bool,
    answers: Sequence[tuple[str, str | Callable[[], str]]] = (),
    hidden: bool = False,
    timeout: float = 60.0,
) -> CliResult:
    import fcntl
    import termios
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

    def take_terminal() -> None:  # in the child, a session leader: the pty is its terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    def shown() -> str:
        return b"".join(chunks).decode("utf-8", "replace")

    def appeared(text: str, start: int) -> int:  # where ``text`` ends, once it is shown
        deadline = time.monotonic() + timeout
        while (at := shown().find(text, start)) < 0:
            if process.poll() is not None:
                reader.join(timeout=5)  # whatever it printed before it ended
                if (at := shown().find(text, start)) >= 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never appeared in: {shown()}")
            time.sleep(0.02)
        return at + len(text)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    io = slave if stdout_on_terminal else subprocess.PIPE
    try:
        process = subprocess.Popen(
            command, stdin=slave if stdout_on_terminal else subprocess.DEVNULL, stdout=io,
            stderr=slave, env={**os.environ, "TERM": "xterm"}, start_new_session=True,
            preexec_fn=take_terminal if stdout_on_terminal else None,
        )  # fmt: skip
    finally:
        os.close(slave)
    try:
        seen = 0
        for text, keys in answers:
            seen = appeared(text, seen)
            if hidden:
                wait_until(lambda: not termios.tcgetattr(master)[3] & termios.ECHO)
            os.write(master, (keys() if callable(keys) else keys).encode())
        stdout, _ = process.communicate(timeout=timeout)
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        reader.join(timeout=5)
        os.close(master)
    return CliResult(process.returncode, (stdout or b"").decode("utf-8"), shown())


def run_at_once(code: str, argument: str, processes: int) -> list[tuple[str, str]]:
    """Run ``python -c CODE`` in ``processes`` processes that start their work at the same
    moment: each, once its interpreter is up, says so and waits for the word to go, which all
    get together once every one is waiting (``sys.argv[1]`` is ``argument``). Asserts that every
    one exits 0; returns their (stdout, stderr)."""
    prelude = "import sys, time\nsys.stdout.write('-')\nsys.stdout.flush()\nsys.stdin.read(1)\n"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", prelude + code, argument],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.read(1) == "-", "a process ended before it was ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0] * processes, [err for _, err in outputs]
    return outputs


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(
    predicate: Callable[[], object],
    timeout: float = 10.0,
    interval: float = 0.02,
    *,
    what: str = "condition not met",
) -> None:
    """Poll ``predicate`` until it is truthy (bounded), for conditions with no event to wait on;
    else fail with ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"{what} within {timeout} s")


def sorted_event_ids(verdicts: Iterable[Verdict]) -> list[str]:
    """The EventIds of ``verdicts``, sorted; every one of them must carry an EventId."""
    ids = []
    for verdict in verdicts:
        assert verdict.event_id is not None, verdict
        ids.append(verdict.event_id)
    return sorted(ids)
