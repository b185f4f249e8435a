"""Shell completion through Typer's completion protocol (what the installed scripts call)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from prefctl.emulator.serve import RunningEmulator
from tests.helpers import run_cli


def complete(shell: str, words: str) -> list[str]:
    """What ``prefctl`` answers a ``shell`` that completes the last of ``words``."""
    env = {**os.environ, "_PREFCTL_COMPLETE": f"complete_{shell}"}
    if shell == "bash":
        env.update(
            COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1))
        )
    else:
        env["_TYPER_COMPLETE_ARGS"] = words
        env["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"  # what the fish script asks first
    answer = subprocess.run(
        [sys.executable, "-m", "prefctl"], env=env, capture_output=True, text=True, timeout=60
    )
    assert answer.returncode == 0, answer.stderr
    return answer.stdout.splitlines()


def test_completion_bash_offers_commands_and_event_types() -> None:
    assert "deliveries" in complete("bash", "prefctl deliv")
    types = complete("bash", "prefctl events trigger profile.")
    assert "profile.created" in types
    assert all(t.startswith("profile.") for t in types)


def test_completion_zsh_and_fish_offer_profile_names() -> None:
    init = run_cli(
        "config",
        "init",
        "staging",
        "--service-client-id",
        "S",
        "--user-id",
        "u",
        "--client-id",
        "c",
    )
    assert init.exit_code == 0, init.stderr
    assert any("staging" in line for line in complete("zsh", "prefctl --profile st"))
    assert any(line.startswith("staging") for line in complete("fish", "prefctl -p st"))


def test_completion_subscription_names_and_ids_from_the_emulator_store(
    emulator: RunningEmulator,
) -> None:
    created = run_cli(
        "subscriptions",
        "create",
        "--name",
        "crm",
        "--url",
        "http://127.0.0.1:9/hook",
        "--event",
        "profile.created",
        "--no-wait",
        "-ojson",
    )
    assert created.exit_code in (0, 1), created.output
    offered = complete("bash", "prefctl deliveries list --subscription ")
    assert "crm" in offered


def test_show_completion_prints_a_script_for_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = subprocess.run(
        [sys.executable, "-m", "prefctl", "--show-completion"],
        env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert answer.returncode == 0, answer.stderr
    assert "_PREFCTL_COMPLETE" in answer.stdout
