"""Completion in real shells: bash, zsh and fish in tmux, with the script ``prefctl
--show-completion`` prints, typing TAB as a user does and reading the screen.

Needs the tmux, zsh and fish packages (CI installs them); a shell that is missing is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prefctl.emulator.serve import RunningEmulator
from tests.cli.test_completion import create_subscription
from tests.helpers import wait_until

# How each shell starts without the user's files, loads prefctl's script and shows a known prompt.
_SETUP = {
    "bash": (
        ["bash", "--norc", "--noprofile"],
        "PS1='READY$ '; eval \"$(prefctl --show-completion)\"",
    ),
    "zsh": (
        ["zsh", "-f"],
        "PROMPT='READY$ '; autoload -Uz compinit && compinit -u;"
        ' eval "$(prefctl --show-completion)"',
    ),
    "fish": (
        ["fish", "--no-config"],
        "function fish_prompt; echo -n 'READY$ '; end; prefctl --show-completion | source",
    ),
}


class Tmux:
    """One tmux server of our own (its own socket) running one shell at 120 columns."""

    def __init__(self, socket: str, command: list[str], env: dict[str, str]) -> None:
        self.base = ["tmux", "-L", socket]
        subprocess.run(
            [*self.base, "-f", "/dev/null", "new-session", "-d", "-x", "120", "-y", "40", *command],
            env=env,
            check=True,
            timeout=30,
        )

    def send(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", *keys], check=True, timeout=30)

    def screen(self) -> str:
        answer = subprocess.run(
            [*self.base, "capture-pane", "-p"], capture_output=True, text=True, timeout=30
        )
        return answer.stdout

    def wait_for(self, text: str, *, timeout: float = 30.0) -> str:
        wait_until(lambda: text in self.screen(), timeout, what=f"{text!r} on the screen")
        return self.screen()

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], timeout=30, check=False)


@pytest.fixture
def prefctl_on_path(tmp_path: Path) -> str:
    """A PATH whose ``prefctl`` is this checkout's (as installed, or ``python -m prefctl``)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "prefctl"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m prefctl "$@"\n')
    script.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture
def subscription(emulator: RunningEmulator) -> str:
    create_subscription("crm-hooks")
    return "crm-hooks"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_in_a_real_shell_offers_commands_and_subscription_names(
    shell: str, subscription: str, prefctl_on_path: str, tmp_path: Path
) -> None:
    if shutil.which("tmux") is None or shutil.which(shell) is None:
        pytest.skip(f"needs tmux and {shell} (apt-get install tmux {shell})")
    command, setup = _SETUP[shell]
    env = {**os.environ, "PATH": prefctl_on_path, "HOME": str(tmp_path), "TERM": "xterm"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    tmux = Tmux(f"prefctl-test-{os.getpid()}-{shell}", command, env)
    try:
        tmux.send(setup, "Enter")
        tmux.wait_for("READY$")
        tmux.send("clear", "Enter")
        tmux.wait_for("READY$")

        tmux.send("prefctl sub", "Tab")
        tmux.wait_for("prefctl subscriptions")

        tmux.send("C-u")
        tmux.send("C-l")
        tmux.send("prefctl subscriptions get ", "Tab")
        if shell == "bash":  # bash lists the choices on a second TAB
            tmux.send("Tab")
        screen = tmux.wait_for(subscription)
        assert "pyproject" not in screen  # values, not the files of the folder
    finally:
        tmux.close()
