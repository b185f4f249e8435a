"""Option values converted without pydantic: the same values and the same errors as Typer's own
converter, for every parameter of every command, and Typer's converter when its internals moved."""

from __future__ import annotations

import os
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.core

from prefctl.cli import _coercion
from prefctl.cli.app import build_app
from tests.helpers import run_cli

pytestmark = pytest.mark.skipif(
    _coercion.internals_problem() is not None, reason="this Typer converts every value itself"
)

TEXT: list[Any] = ["abc", "", " x ", "12", "é", "[bold]"]
FLAGS: list[Any] = [
    "true",
    "False",
    " yes ",
    "0",
    "1",
    "on",
    "OFF",
    "t",
    "N",
    "",
    "maybe",
    True,
    False,
    1,
]
WHOLE: list[Any] = ["0", "12", "-3", "+4", "007", " 5", "1_000", "1.0", "abc", "", "1e3", "٣"]
WHOLE += ["99999999999999999999", 5, 0, -1, 10_000_000, True]
DECIMAL: list[Any] = ["1.5", "-0.5", ".5", "5.", "1e3", "inf", "nan", "abc", "12", "", " 2", "1_0"]
DECIMAL += [2.5, 3, 0.0, -1.0, 1e9]


def every_parameter() -> list[tuple[str, Any, Any]]:
    root = typer.main.get_command(build_app([], full=True))
    found: list[tuple[str, Any, Any]] = []

    def walk(command: Any, path: str) -> None:
        for param in command.params:
            if getattr(param, "type_descriptor", None) is not None:
                found.append((f"{path} {param.name}", command, param))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(root, "prefctl")
    return found


def samples(param: Any, tmp: Path) -> list[Any]:
    annotation = param.type_descriptor.annotation
    leaf = getattr(annotation, "__args__", (annotation,))[0]
    values: list[Any] = [param.default] if param.default is not None else []
    if leaf is bool:
        values += FLAGS
    elif leaf is int:
        values += WHOLE
    elif leaf is float:
        values += DECIMAL
    elif isinstance(leaf, type) and issubclass(leaf, Enum):
        for member in leaf:
            text = str(member.value)
            values += [member, text, text.upper(), text.lower(), text.swapcase(), text + "x"]
        values += ["", "nope"]
    elif leaf is Path:
        values += [str(tmp / "file.txt"), str(tmp), str(tmp / "missing"), "", "-", "a\0b"]
        values += [tmp / "file.txt", tmp]
    else:
        values += TEXT
    if param.multiple or param.nargs == -1:
        return [[], (), *[[value] for value in values], values[-3:], "abc"]
    return values


def outcome(convert: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        converted = convert.coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # the error a user reads
        return ("error", f"{type(exc).__name__}: {exc}")
    return ("value", (type(converted), repr(converted)))  # repr: nan is not nan


def test_every_parameter_gets_typer_s_values_and_errors(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    compared = 0
    spared = 0
    for where, command, param in every_parameter():
        descriptor = param.type_descriptor
        convert = _coercion.converter(descriptor)
        if convert is None:
            continue
        spared += 1
        ours = _coercion.PlainValues(convert, descriptor)
        theirs = typer.core.build_runtime_param(descriptor)  # type: ignore[attr-defined]
        ctx = typer.Context(command)
        for value in samples(param, tmp_path):
            assert outcome(ours, value, param, ctx) == outcome(theirs, value, param, ctx), (
                f"{where} given {value!r}"
            )
            compared += 1
    assert spared > 250  # nearly every parameter is spared pydantic
    assert compared > 3_000


def test_a_command_is_answered_without_pydantic_and_the_same_when_typer_s_internals_moved() -> None:
    """Start-up speed: the converters are what brought pydantic into each command; with Typer's
    internals not as expected (a release outside the tested range), Typer converts them."""
    code = (
        "import sys, typer\n"
        "if sys.argv[1] == 'moved': typer.__version__ = '0.99.0'\n"
        "from prefctl.cli.app import run\n"
        "code = run(sys.argv[2:])\n"
        "print('pydantic' in sys.modules, code, file=sys.stderr)\n"
    )
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}

    def prefctl(state: str, *args: str) -> tuple[str, str]:
        done = subprocess.run(
            [sys.executable, "-c", code, state, *args], capture_output=True, text=True, env=env
        )
        return done.stdout, done.stderr

    out, err = prefctl("fast", "events", "types", "--entity", "Profile")
    assert "profile.created" in out
    assert err.endswith("False 0\n")
    assert prefctl("moved", "events", "types", "--entity", "Profile") == (out, "True 0\n")

    out, err = prefctl("fast", "deliveries", "show", "abc")
    assert "'ID': expected a whole number" in err
    assert err.endswith("True 2\n")  # an invalid value is Typer's to explain
    assert prefctl("moved", "deliveries", "show", "abc") == (out, err)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["deadletters", "list", "--reason", "badrequest"], "did you mean 'BadRequest'?"),
        (["deliveries", "list", "--limit", "0"], "'--limit': must be 1 or more"),
        (["certs", "init", "--key-type", "dsa"], "'dsa' is not one of"),
    ],
)
def test_errors_read_the_same_with_and_without_the_fast_converters(
    monkeypatch: pytest.MonkeyPatch, args: list[str], words: str
) -> None:
    fast = run_cli(*args)
    assert words in fast.stderr
    monkeypatch.setattr(typer, "__version__", "0.99.0")
    monkeypatch.setattr(_coercion, "_problem", [])
    moved = run_cli(*args)
    assert (moved.exit_code, moved.stdout, moved.stderr) == (fast.exit_code, "", fast.stderr)
    assert _coercion._problem == ["typer 0.99.0 is not in the tested range"]
