"""Shell completion through Typer's completion protocol (what the installed scripts call)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
    return [line for line in answer.stdout.splitlines() if line]


def create_subscription(name: str) -> None:
    """A subscription of the running emulator (its handshake left to fail: no receiver)."""
    created = run_cli(
        "subscriptions",
        "create",
        "--name",
        name,
        "--url",
        "http://127.0.0.1:9/hook",
        "--event",
        "profile.created",
        "--no-wait",
        "-ojson",
    )
    assert created.exit_code in (0, 1), created.output


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
    create_subscription("crm")
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


def test_completion_positional_subscription_offers_names_and_ids_not_files(
    emulator: RunningEmulator,
) -> None:
    create_subscription("crm")
    for command in ("get", "update", "pause", "resume", "delete"):
        offered = complete("bash", f"prefctl subscriptions {command} ")
        assert "crm" in offered, command
        assert any(value.isdigit() for value in offered), command
    assert complete("zsh", "prefctl subscriptions get cr") != []


def test_completion_config_use_offers_profile_names() -> None:
    for name in ("staging", "prod"):
        init = run_cli(
            "config", "init", name, "--service-client-id", "S", "--user-id", "u", "--client-id", "c"
        )
        assert init.exit_code == 0, init.stderr
    assert complete("bash", "prefctl config use ") == ["staging", "prod"]
    assert complete("bash", "prefctl config show st") == ["staging"]


def test_completion_ids_from_a_store_that_does_not_exist_offer_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    assert complete("bash", f"prefctl deadletters show --store {missing} ") == []
    assert complete("bash", "prefctl deliveries show ") == []


def test_completion_builds_only_the_command_group_being_completed() -> None:
    code = (
        "import sys\nfrom prefctl.cli.app import run\ntry:\n    run([])\nfinally:\n"
        "    print(sorted(m for m in ('prefctl.cli.emulator', 'fastapi', 'prefctl.cli.events')"
        " if m in sys.modules))"
    )
    env = {**os.environ, "_PREFCTL_COMPLETE": "complete_bash"}
    env.update(COMP_WORDS="prefctl subscriptions get ", COMP_CWORD="3")
    answer = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert answer.stdout.splitlines()[-1] == "[]", answer.stderr
