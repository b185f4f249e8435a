"""``--help`` served from the cache: the same text Typer rendered, keyed by what it depends on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefctl.auth.cache import cache_dir
from prefctl.cli.help_cache import cache_root


def prefctl(*args: str, **env: str) -> str:
    answer = subprocess.run(
        [sys.executable, "-m", "prefctl", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return answer.stdout


def test_help_cache_second_answer_is_the_first_and_width_is_part_of_the_key() -> None:
    first = prefctl("subscriptions", "--help")
    stored = list((cache_root() / "help").glob("*.txt"))
    assert len(stored) == 1
    assert stored[0].read_text() == first
    assert prefctl("subscriptions", "--help") == first
    narrow = prefctl("subscriptions", "--help", COLUMNS="60")
    assert narrow != first
    assert max(len(line) for line in narrow.splitlines()) <= 60
    assert len(list((cache_root() / "help").glob("*.txt"))) == 2


def test_help_cache_folder_is_the_token_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache_root() == cache_dir()
    monkeypatch.delenv("PREFCTL_CACHE_DIR")
    assert cache_root() == cache_dir()


def test_help_cache_that_cannot_be_written_still_prints_help(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    text = prefctl("deliveries", "--help", PREFCTL_CACHE_DIR=str(blocked / "cache"))
    assert "Usage: prefctl deliveries" in text
