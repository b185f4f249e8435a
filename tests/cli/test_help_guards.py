"""prefctl's help with each Typer internal it tidies with broken: Typer's own help, the same
essentials (``cli/_coercion.py``: ``help_internals_problem``, ``color_switch_problem``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import typer
import typer.core

from prefctl.cli import _coercion
from tests.helpers import run_cli

COMMANDS = [("subscriptions", "create", "--help"), ("profiles", "--help"), ("--help",)]


def _essentials(text: str) -> tuple[str, str, set[str]]:
    """The usage line, the first line of the description, and every option named."""
    lines = [line.strip(" │") for line in text.splitlines() if line.strip(" │")]
    usage = next(line for line in lines if line.startswith("Usage:"))
    summary = lines[lines.index(usage) + 1]
    return usage, summary, set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))


def _reads_more(original: Callable[..., Any]) -> Callable[..., Any]:
    def get_help_option(self: Any, ctx: Any) -> Any:
        ctx.resilient_parsing  # noqa: B018 - what a later Typer may read of the context
        return original(self, ctx)

    return get_help_option


def _out_of_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typer, "__version__", "0.99.0")


def _help_option_reads_more(monkeypatch: pytest.MonkeyPatch) -> None:
    for cls in (typer.core.TyperCommand, typer.core.TyperGroup):
        monkeypatch.setattr(cls, "get_help_option", _reads_more(cls.get_help_option))


class _WithoutColorSwitch:
    """Typer's ``rich_utils`` as a later Typer might have it: all but ``COLOR_SYSTEM``."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        if name == "COLOR_SYSTEM":
            raise AttributeError(name)
        return getattr(self._module, name)


def _color_switch_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer.rich_utils

    # What `from typer import rich_utils` finds.
    monkeypatch.setattr(typer, "rich_utils", _WithoutColorSwitch(typer.rich_utils))


BREAKS = {
    "typer out of range": _out_of_range,
    "get_help_option reads more of its context": _help_option_reads_more,
    "rich_utils.COLOR_SYSTEM gone": _color_switch_gone,
}


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("broken", list(BREAKS))
def test_help_with_a_typer_internal_broken_prints_the_same_essentials(
    monkeypatch: pytest.MonkeyPatch, broken: str, args: tuple[str, ...]
) -> None:
    tidy = run_cli(*args)
    monkeypatch.setattr(_coercion, "_help_problem", [])
    monkeypatch.setattr(_coercion, "_problem", [])
    BREAKS[broken](monkeypatch)

    plain = run_cli(*args)

    assert tidy.exit_code == plain.exit_code == 0, plain.stderr
    assert "Traceback" not in plain.stderr
    assert _essentials(plain.stdout) == _essentials(tidy.stdout)


def test_help_guard_finds_nothing_wrong_with_the_typer_installed() -> None:
    import typer.rich_utils

    assert _coercion.help_internals_problem() is None
    assert _coercion.color_switch_problem(typer.rich_utils) is None


@pytest.mark.parametrize("broken", list(BREAKS)[:2])
def test_help_guard_names_what_is_off(monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    monkeypatch.setattr(_coercion, "_help_problem", [])
    BREAKS[broken](monkeypatch)

    problem = _coercion.help_internals_problem()

    assert problem is not None
    assert ("tested range" if broken == "typer out of range" else "get_help_option") in problem
