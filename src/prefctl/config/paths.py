"""Where the emulator keeps its files: the data dir and the names inside it.

The data dir is ``--data-dir``, then ``PREFCTL_DATA_DIR``, then
``platformdirs.user_data_dir("prefctl")``. It holds the store (``emulator.db``, mode 0600), the pid
file of a running emulator (``emulator.pid``) and the log of a detached one (``emulator.log``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from prefctl.config import ENV_DATA_DIR

STORE_FILE = "emulator.db"
PID_FILE = "emulator.pid"
LOG_FILE = "emulator.log"


def resolve_data_dir(
    flag: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """The data dir: the flag, then ``PREFCTL_DATA_DIR``, then the platform's user data dir."""
    env = os.environ if env is None else env
    if flag:
        return Path(flag).expanduser().absolute()
    if env.get(ENV_DATA_DIR):
        return Path(env[ENV_DATA_DIR]).expanduser().absolute()
    from platformdirs import user_data_dir

    return Path(user_data_dir("prefctl"))


def store_path(data_dir: Path) -> Path:
    return data_dir / STORE_FILE


def pid_path(data_dir: Path) -> Path:
    return data_dir / PID_FILE


def log_path(data_dir: Path) -> Path:
    return data_dir / LOG_FILE
