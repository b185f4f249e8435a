"""prefctl's private files: folders created 0700, files written atomically 0600, and locks for
files shared by concurrent prefctl commands (a read-modify-write, a store in use, a recording).

Everything prefctl writes that may hold a secret (profiles.toml, the token cache, keys, the pid
file) goes through here (docs/operations.md: config and cache files are 0600).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from prefctl.errors import ConfigError, PrefctlError

if TYPE_CHECKING:
    import ssl

__all__ = [
    "lock_open_file",
    "locked",
    "make_private_dir",
    "os_reason",
    "replacing_private",
    "write_private",
]

# A lock is held for a file write (profiles.toml, a CA) or a reset: a holder that keeps it longer
# is stuck, and waiting for ever would hang the command instead of saying so.
LOCK_TIMEOUT_SECONDS = 30.0
_LOCK_POLL_SECONDS = 0.02


def os_reason(exc: BaseException) -> str:
    """Why a file could not be read or used, in words: the OS's for an ``OSError`` ("permission
    denied"), OpenSSL's made readable for a certificate or key it refused, "it is not UTF-8 text"
    for bytes that do not decode; else the exception's text. Never ``[Errno N]`` or ``_ssl.c``."""
    import ssl

    if isinstance(exc, ssl.SSLError):
        return _tls_reason(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    if isinstance(exc, UnicodeDecodeError):
        byte = exc.object[exc.start : exc.start + 1].hex()
        return f"it is not UTF-8 text (byte 0x{byte} at position {exc.start})"
    return str(exc)


def _tls_reason(exc: ssl.SSLError) -> str:
    import ssl

    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the server's TLS certificate is not trusted ({exc.verify_message})"
    text = f"{exc.reason or ''} {exc.strerror or exc}"
    if "KEY_VALUES_MISMATCH" in text:
        return "the private key does not belong to the certificate"
    if "PEM" in text or "NO_START_LINE" in text or "NO_CERTIFICATE" in text:
        return "it is not a PEM certificate and its unencrypted private key"
    if "BAD_DECRYPT" in text or "BAD_PASSWORD" in text:
        return "the private key is encrypted"
    # "[SSL: WHAT_WENT_WRONG] what went wrong (_ssl.c:3905)" → "what went wrong"
    words = re.sub(r"^\[[^]]*\]\s*|\s*\(_ssl\.c:\d+\)$", "", str(exc.strerror or exc))
    return words or "OpenSSL refused it"


def make_private_dir(directory: Path, what: str, *, hint: str | None = None) -> None:
    """Create ``directory`` and each missing parent with mode 0700; folders that exist (``$HOME``)
    are left as they are. ConfigError naming the path when a file stands in the way or the folder
    cannot be created. (``Path.mkdir(parents=True, mode=0o700)`` would make the parents 0755.)"""
    missing: list[Path] = []
    path = directory
    try:
        while not path.is_dir():
            if (path.exists() or path.is_symlink()) and not path.is_dir():  # not made meanwhile
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
    with replacing_private(path) as fh:
        fh.write(data)


@contextmanager
def replacing_private(path: Path) -> Iterator[BinaryIO]:
    """A new file (0600) that replaces ``path`` atomically when the block ends well; if it
    raises, ``path`` is left as it was. Readers, and other writers of ``path``, never see a
    partial file: each writer's file is whole, the last one to finish wins."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def locked(
    path: Path,
    *,
    shared: bool = False,
    timeout: float = LOCK_TIMEOUT_SECONDS,
    busy: Callable[[], PrefctlError] | None = None,
) -> Iterator[None]:
    """A lock on ``path`` for the block: ``flock`` on a sibling lock file (``.profiles.toml.lock``,
    0600), released when the block ends, and by the OS if the process dies. Exclusive for a
    read-modify-write of a file shared by concurrent prefctl commands; ``shared`` for using a file
    that an exclusive holder may remove (the store, which ``emulator reset`` deletes).

    Waits at most ``timeout`` seconds (0: not at all) for a holder to let go, then raises
    ``busy()``, or a ConfigError naming the file. Where there is no ``fcntl`` (Windows) nothing
    is locked.
    """
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
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, mode)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise (busy() if busy is not None else _busy(path, timeout)) from None
                time.sleep(_LOCK_POLL_SECONDS)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def lock_open_file(fd: int) -> bool:
    """Lock the open file ``fd`` itself, exclusively, for as long as it stays open (closing it
    releases the lock); False at once when another process holds it. True where there is no
    ``fcntl``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _busy(path: Path, timeout: float) -> ConfigError:
    return ConfigError(
        f"{path} is locked by another prefctl command (waited {timeout:g} s)",
        hint="let it finish and try again",
    )
