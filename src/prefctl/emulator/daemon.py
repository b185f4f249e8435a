"""The emulator as a background process: the pid file, ``status``, ``stop`` and ``--detach``.

A serving emulator records itself in ``<data dir>/emulator.pid`` (JSON: pid, URLs, start time) and
removes the file when it stops. ``status`` trusts the file only when that process is alive and its
``/healthz`` answers with the same pid; ``stop`` sends SIGTERM only to such a process (or, when it
does not answer, to one whose command line is the emulator's), then waits for it to exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from prefctl.config import ENV_STORE, paths
from prefctl.errors import (
    AuthError,
    NotFoundError,
    PrefctlError,
    UnreachableError,
    UsageError,
)
from prefctl.private_files import locked, make_private_dir, write_private

if TYPE_CHECKING:
    from prefctl.emulator.startup import EmulatorConfig

PROBE_TIMEOUT_SECONDS = 2.0
DETACH_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0
_POLL_SECONDS = 0.05
_ERRORS_BY_EXIT_CODE: dict[int, type[PrefctlError]] = {
    2: UsageError,
    3: AuthError,
    4: NotFoundError,
    5: UnreachableError,
}


@dataclass(frozen=True)
class PidRecord:
    """What ``emulator.pid`` holds about the emulator serving from a data dir."""

    pid: int
    url: str
    auth_url: str
    api_url: str
    data_dir: str
    started_at: str
    ca_bundle: str | None = None
    profile: str | None = "local"
    # The PostgreSQL database served, without its password (None: the data dir's SQLite file).
    store: str | None = None

    def ready_record(self) -> dict[str, Any]:
        return {
            "type": "ready",
            "url": self.url,
            "auth_url": self.auth_url,
            "api_url": self.api_url,
            "data_dir": self.data_dir,
            "profile": self.profile,
            "pid": self.pid,
        }


@dataclass(frozen=True)
class EmulatorStatus:
    """Whether an emulator serves from ``data_dir``: running, stopped, or alive but unresponsive."""

    state: Literal["running", "stopped", "unresponsive"]
    data_dir: Path
    pid: int | None = None
    url: str | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"

    def as_dict(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "state": self.state,
            "url": self.url,
            "pid": self.pid,
            "data_dir": str(self.data_dir),
        }


# -- the pid file ----------------------------------------------------------------------------------
def write_pid_file(data_dir: Path, record: PidRecord) -> None:
    write_private(paths.pid_path(data_dir), (json.dumps(asdict(record)) + "\n").encode("utf-8"))


def read_pid_file(data_dir: Path) -> PidRecord | None:
    """The record, or None when there is none or it is unreadable (treated as stale)."""
    try:
        data = json.loads(paths.pid_path(data_dir).read_text(encoding="utf-8"))
        return PidRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def remove_pid_file(data_dir: Path, pid: int) -> None:
    """Remove the pid file if it records ``pid`` (never another emulator's)."""
    record = read_pid_file(data_dir)
    if record is not None and record.pid == pid:
        paths.pid_path(data_dir).unlink(missing_ok=True)


# -- status and stop -------------------------------------------------------------------------------
def status(data_dir: Path, *, timeout: float = PROBE_TIMEOUT_SECONDS) -> EmulatorStatus:
    """Whether an emulator serves from ``data_dir``; a stale pid file is removed."""
    record = read_pid_file(data_dir)
    if record is None:
        return EmulatorStatus("stopped", data_dir)
    if _alive(record.pid) and _answers(record, timeout):
        return EmulatorStatus("running", data_dir, record.pid, record.url)
    if not _alive(record.pid) or _looks_like_emulator(record.pid) is False:
        paths.pid_path(data_dir).unlink(missing_ok=True)
        return EmulatorStatus("stopped", data_dir)
    return EmulatorStatus("unresponsive", data_dir, record.pid, record.url)


def serves(store: Path | str) -> bool:
    """Whether an emulator started with ``prefctl emulator start`` serves ``store`` right now
    (its data dir holds the store and a live pid file); its dispatcher then delivers the queue.
    A PostgreSQL store (a URL): whether the emulator of the data dir (``PREFCTL_DATA_DIR`` or
    the platform's) serves that database."""
    from prefctl.store.postgres import is_postgres_location, redacted

    if is_postgres_location(store):
        return served_store(paths.resolve_data_dir(None)) == redacted(str(store))
    path = Path(store)
    return path.name == paths.STORE_FILE and status(path.parent).running


def served_store(data_dir: Path) -> str | None:
    """The PostgreSQL database (its URL, without a password) the emulator serving from
    ``data_dir`` serves; None when none runs there or it serves the data dir's SQLite file."""
    record = read_pid_file(data_dir)
    if record is None or record.store is None or not status(data_dir).running:
        return None
    return record.store


def ensure_not_running(data_dir: Path) -> None:
    """UsageError when an emulator already serves from ``data_dir``."""
    current = status(data_dir)
    if current.state != "stopped":
        raise _already_running(data_dir, current)


def holding_data_dir(data_dir: Path) -> AbstractContextManager[None]:
    """The lock an emulator holds on its data dir (``.emulator.pid.lock``) from before it opens
    the store until it has stopped, so that of two ``emulator start`` at the same moment one is
    refused, and ``emulator reset`` never wipes a store an emulator is starting on. Not waited
    for: UsageError at once when another process holds it."""
    return locked(paths.pid_path(data_dir), timeout=0, busy=lambda: _already_running(data_dir))


def _already_running(data_dir: Path, current: EmulatorStatus | None = None) -> UsageError:
    current = current or status(data_dir)
    where = f" (pid {current.pid}, {current.url})" if current.pid is not None else ""
    return UsageError(
        f"an emulator already runs on {data_dir}{where}",
        hint="stop it with 'prefctl emulator stop', or use another --data-dir",
    )


def stop(data_dir: Path, *, timeout: float = STOP_TIMEOUT_SECONDS) -> EmulatorStatus:
    """SIGTERM the emulator serving from ``data_dir`` and wait until it exits.

    Returns its status before stopping; ``state == "stopped"`` means nothing was running.
    """
    current = status(data_dir)
    if current.state == "stopped" or current.pid is None:
        return current
    if current.state == "unresponsive" and _looks_like_emulator(current.pid) is not True:
        raise PrefctlError(
            f"pid {current.pid} does not answer at {current.url} and cannot be confirmed as the "
            "emulator; not stopping it",
            hint=f"check the process, and remove {paths.pid_path(data_dir)} if it is stale",
        )
    try:
        os.kill(current.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while _alive(current.pid):
        if time.monotonic() > deadline:
            raise PrefctlError(
                f"the emulator (pid {current.pid}) did not stop within {timeout:g} s",
                hint=f"see {paths.log_path(data_dir)}",
            )
        time.sleep(_POLL_SECONDS)
    remove_pid_file(data_dir, current.pid)
    return current


# -- detach ----------------------------------------------------------------------------------------
def start_detached(
    config: EmulatorConfig,
    *,
    verbosity: int = 0,
    timeout: float = DETACH_TIMEOUT_SECONDS,
) -> PidRecord:
    """Start ``prefctl emulator start`` as a background process and wait (bounded) until its
    ``/healthz`` answers. Its output goes to ``emulator.log`` in the data dir."""
    from prefctl.emulator.startup import check_free_space, probe_port

    config.validate()
    data_dir = config.resolved_data_dir()
    ensure_not_running(data_dir)  # before the port: "already running (pid, URL)" says more
    probe_port(config.host, config.port)  # a busy port fails before anything is created
    check_free_space(data_dir)  # said here: on a full disk the child's log would stay empty
    make_private_dir(data_dir, "the data folder")
    log_file = paths.log_path(data_dir)
    argv = [sys.executable, "-m", "prefctl", "-" + "v" * max(1, verbosity)]
    if config.config_path is not None:
        argv += ["--config", str(config.config_path)]
    argv += ["emulator", "start", "--host", config.host, "--port", str(config.port)]
    argv += ["--data-dir", str(data_dir), "--time-scale", repr(config.time_scale)]
    argv += ["--signature-encoding", config.signature_encoding]
    if config.tls_cert is not None and config.tls_key is not None:
        argv += ["--tls-cert", str(config.tls_cert), "--tls-key", str(config.tls_key)]
    argv += config.limits.cli_args()
    if config.smtp is not None:
        argv += config.smtp.cli_args()  # the password travels in the inherited environment
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    offset = os.lseek(fd, 0, os.SEEK_END)
    env = {k: v for k, v in os.environ.items() if k != "PREFCTL_OUTPUT"}
    if config.store is not None:  # by the environment: a password in it stays out of ps
        env[ENV_STORE] = config.store
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,  # no controlling terminal: closing it does not stop the child
            close_fds=True,
            env=env,
        )
    finally:
        os.close(fd)
    deadline = time.monotonic() + timeout
    while True:
        code = child.poll()
        if code is not None:
            raise _start_failure(code, log_file, offset)
        record = read_pid_file(data_dir)
        if record is not None and record.pid == child.pid and _answers(record, 1.0):
            return record
        if time.monotonic() > deadline:
            child.terminate()
            raise UnreachableError(
                f"the emulator did not become ready within {timeout:g} s", hint=f"see {log_file}"
            )
        time.sleep(_POLL_SECONDS)


def _start_failure(code: int, log_file: Path, offset: int) -> PrefctlError:
    try:
        with log_file.open("rb") as fh:
            fh.seek(offset)
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    error_class = _ERRORS_BY_EXIT_CODE.get(code, PrefctlError)
    if not errors:
        return error_class(
            f"the emulator exited with code {code} while starting", hint=f"see {log_file}"
        )
    message, _, hint = errors[-1].partition(" — ")
    return error_class(message, hint=hint or None)


# -- process checks --------------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not running
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _looks_like_emulator(pid: int) -> bool | None:
    """Whether ``pid``'s command line is ``prefctl … emulator start``; None when unknown."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    words = [a.decode("utf-8", "replace") for a in argv]
    return any("prefctl" in w for w in words) and "emulator" in words and "start" in words


def _answers(record: PidRecord, timeout: float) -> bool:
    """Whether ``/healthz`` at the recorded URL is ready and reports the recorded pid."""
    import httpx

    verify: Any = True
    if record.url.startswith("https:"):
        from prefctl.auth.tls import ssl_context

        try:
            verify = ssl_context(Path(record.ca_bundle) if record.ca_bundle else None)
        except PrefctlError:
            return False
    try:
        response = httpx.get(
            record.url + "/healthz", timeout=timeout, verify=verify, trust_env=False
        )
        health = response.json()
    except (httpx.HTTPError, ValueError, OSError):
        return False
    return (
        response.status_code == 200
        and isinstance(health, dict)
        and health.get("status") == "ready"
        and health.get("pid") == record.pid
    )
