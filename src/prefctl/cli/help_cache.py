"""``--help`` answered from a cache: the text Typer rendered last time for the same request.

Rendering help costs Typer's help module (Rich's Markdown, markdown-it) and its parameter
validators (pydantic) on top of every command's options: most of a second on a busy machine,
against a few milliseconds to read the text back. The key holds everything the text depends on:
prefctl's version and code (the modification times of its CLI modules), the arguments, the
output's width and whether it is a terminal, and the environment (colour switches, prefctl's
variables); anything else is a miss, rendered by Typer and then stored. A cache that cannot be read
or written is a miss, never an error.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

# What else help depends on: Rich's and Typer's colour, terminal and width switches, and HOME.
_ENV = frozenset(
    [
        "NO_COLOR",
        "FORCE_COLOR",
        "TTY_COMPATIBLE",
        "TERM",
        "COLORTERM",
        "COLUMNS",
        "LINES",
        "TERMINAL_WIDTH",
        "HOME",
        "_TYPER_FORCE_DISABLE_TERMINAL",
        "GITHUB_ACTIONS",
        "PY_COLORS",
    ]
)


def asks_for_help(argv: Sequence[str]) -> bool:
    return ("--help" in argv or "-h" in argv) and "--" not in argv


def _key(argv: Sequence[str], stdout: TextIO) -> str:
    from prefctl import __version__

    cli = Path(__file__).parent
    code = [f"{p.name}:{p.stat().st_mtime_ns}" for p in sorted(cli.glob("*.py"))]
    try:
        terminal = stdout.isatty()
        size = str(os.get_terminal_size(stdout.fileno())) if terminal else ""
    except (OSError, ValueError, AttributeError):
        terminal, size = False, ""
    env = sorted(
        (name, value)
        for name, value in os.environ.items()
        if name in _ENV or name.startswith(("PREFCTL_", "XDG_"))
    )
    parts = [__version__, sys.version, *code, "\0".join(argv), str(terminal), size, repr(env)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _path(key: str) -> Path:
    return cache_root() / "help" / f"{key}.txt"


def cache_root() -> Path:
    """``prefctl.auth.cache.cache_dir()``, without importing the configuration module and the
    token cache that a hit does not need (a test keeps the two equal)."""
    if os.environ.get("PREFCTL_CACHE_DIR"):
        return Path(os.environ["PREFCTL_CACHE_DIR"]).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("prefctl"))


def serve(argv: Sequence[str]) -> bool:
    """Print the cached help for ``argv``; False on a miss (nothing printed)."""
    if sys.stdout is None:
        return False
    try:
        text = _path(_key(argv, sys.stdout)).read_text(encoding="utf-8")
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError):
        return False
    return True


class _Tee:
    """stdout as it is, keeping a copy of what is written (Rich asks it for its size, too)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.copy: list[str] = []

    def write(self, text: str | bytes) -> int:
        if isinstance(text, bytes):  # click's echo of bytes to a stream without a buffer
            text = text.decode(getattr(self.stream, "encoding", None) or "utf-8")
        self.copy.append(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":  # bytes written there would miss the copy: text only
            raise AttributeError(name)
        return getattr(self.stream, name)


def run_and_store(argv: list[str], run: Any) -> int:
    """``run(argv)`` with stdout copied; the copy is stored when it succeeded and wrote help."""
    stdout = sys.stdout
    if stdout is None:
        return int(run(argv))
    key = _key(argv, stdout)
    tee = _Tee(stdout)
    sys.stdout = tee
    try:
        code = int(run(argv))
    finally:
        sys.stdout = stdout
    text = "".join(tee.copy)
    if code == 0 and text:
        from prefctl.errors import PrefctlError

        try:
            from prefctl.private_files import make_private_dir, write_private

            path = _path(key)
            make_private_dir(path.parent, "the cache folder")
            write_private(path, text.encode("utf-8"))
        except (OSError, ValueError, PrefctlError):  # a cache that cannot be written: a miss
            pass
    return code
