"""prefctl's private files: folders created 0700, files written atomically 0600, and an exclusive
lock for a read-modify-write of a file shared by concurrent prefctl commands.

Everything prefctl writes that may hold a secret (profiles.toml, the token cache, keys, the pid
file) goes through here (DESIGN §13: config and cache files are 0600).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prefctl.errors import ConfigError

__all__ = ["locked", "make_private_dir", "os_reason", "write_private"]


def os_reason(exc: BaseException) -> str:
    """The OS's words for an ``OSError`` ("permission denied"), else the exception's text."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)


def make_private_dir(directory: Path, what: str, *, hint: str | None = None) -> None:
    """Create ``directory`` and each missing parent with mode 0700; folders that exist (``$HOME``)
    are left as they are. ConfigError naming the path when a file stands in the way or the folder
    cannot be created. (``Path.mkdir(parents=True, mode=0o700)`` would make the parents 0755.)"""
    missing: list[Path] = []
    path = directory
    try:
        while not path.is_dir():
            if path.exists() or path.is_symlink():
                raise ConfigError(
                    f"cannot create {what} {directory}: {path} is not a folder", hint=hint
                )
            missing.append(path)
            path = path.parent
        for path in reversed(missing):
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:  # made meanwhile by another prefctl
                if not path.is_dir():
                    raise
    except OSError as exc:
        raise ConfigError(
            f"cannot create {what} {directory}: {os_reason(exc)}", hint=hint
        ) from None


def write_private(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data``, readable by the owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock for read-modify-write of ``path``: ``flock`` on a sibling lock file
    (``.profiles.toml.lock``, 0600), held until the block ends; released by the OS if the
    process dies. Where there is no ``fcntl`` (Windows) writes are not serialised."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    lock_path = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot lock {path}: {os_reason(exc)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
