"""Every test runs with its own config, cache and data folders, and no colour."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import CliResult, run_cli

pytest_plugins = ["tests.fixtures.emulator", "tests.fixtures.postgres", "tests.fixtures.token_stub"]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("PREFCTL_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    monkeypatch.setenv("PREFCTL_CONFIG", str(home / "config" / "profiles.toml"))
    monkeypatch.setenv("PREFCTL_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("PREFCTL_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg-config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg-cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "xdg-data"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "160")
    return home


@pytest.fixture
def cli() -> type[CliResult] | object:
    """``cli("token", "get")`` runs prefctl in-process and returns a CliResult."""
    return run_cli


@pytest.fixture
def config_path(isolated_env: Path) -> Path:
    return Path(os.environ["PREFCTL_CONFIG"])
