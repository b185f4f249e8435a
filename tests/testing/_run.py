"""Run pytest in a child process as a user's project would, with prefctl's plugin."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
TESTING_MD = ROOT / "docs" / "testing.md"
CI_MD = ROOT / "docs" / "ci.md"


def fenced_blocks(path: Path, language: str) -> list[str]:
    """The ``language`` code blocks of a Markdown file, in order."""
    pattern = re.compile(rf"^```{language}\n(.*?)^```$", re.MULTILINE | re.DOTALL)
    return pattern.findall(path.read_text(encoding="utf-8"))


def example_module() -> str:
    """The complete example test module of docs/testing.md."""
    [module] = [b for b in fenced_blocks(TESTING_MD, "python") if b.startswith('"""Tests of my')]
    return module


def user_env(home: Path) -> dict[str, str]:
    """This process's environment without pytest's and prefctl's variables, with every folder
    prefctl could use by default (config, data, cache) under ``home``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "PREFCTL_", "XDG_")) and k != "COV_CORE_SOURCE"
    }
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_CACHE_HOME=str(home / ".cache"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return env


def run_pytest(
    folder: Path, *args: str, autoload: bool = False, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``pytest ARGS`` in ``folder`` (its own rootdir, no configuration file); without
    ``autoload`` only prefctl's plugin is loaded, as in a venv holding prefctl and pytest alone."""
    command, env = pytest_command(folder, *args, autoload=autoload)
    return subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
    )


def pytest_command(
    folder: Path, *args: str, autoload: bool = False
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``run_pytest`` (for a run started in the background)."""
    home = folder / "home"
    home.mkdir(exist_ok=True)
    env = user_env(home)
    plugins = [] if autoload else ["-p", "prefctl"]
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    command = [sys.executable, "-m", "pytest", *plugins, "-p", "no:cacheprovider"]
    command += ["-c", os.devnull, "--rootdir", str(folder), *args]
    return command, env
