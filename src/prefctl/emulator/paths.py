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
from prefctl.private_files import make_private_dir

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


def ensure_private_store(data_dir: Path) -> Path:
    """Create the data dir (0700) and a migrated store (0600) if missing; the store's path.

    SQLite creates its -wal and -shm files with the main file's mode, so they stay private too.
    An existing store that is empty is refused (``store.db.refuse_emptied``): it lost its data.
    """
    from prefctl.store.db import create_store, refuse_emptied

    make_private_dir(data_dir, "the data folder")
    path = store_path(data_dir)
    refuse_emptied(path)
    if not path.exists():
        create_store(path)
    return path
