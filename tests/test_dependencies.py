"""The borrowed internals and the dependency bounds CI tests them with.

prefctl reaches into the internals of uvicorn, FastAPI and Typer (CONTRIBUTING.md, "Borrowed
internals"). It does not cap those libraries in pyproject.toml, so that it installs beside
whatever release its users' projects need: each place that borrows an internal has a start-up
guard that checks the installed release against the range CI tested (a constant in code) and
what it needs, and falls back to the library's public interface when anything is off. ``BORROWED``
below lists every such place; a new one is one more entry, and the tests here check that its
guard can be imported, its tested range is a constant in code, its fallback test exists, and
CONTRIBUTING's table lists it.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONTRIBUTING = ROOT / "CONTRIBUTING.md"


@dataclass(frozen=True)
class Borrowed:
    """One place that uses a library's internals, with what keeps it safe."""

    where: str  # the module that borrows, as CONTRIBUTING's table names it ("receiver/app.py")
    library: str  # the distribution whose internals it uses, as pyproject.toml names it
    guard: str  # "module:name" of the start-up check (a function, or the presence list it reads)
    tested: (
        str  # "module:NAME" of the range of releases CI tested: ((major, minor), (major, minor))
    )
    fallback_tests: tuple[str, ...]  # pytest node ids that break the internal and see the same


_SEAMS = "prefctl.servers.seams"
_UVICORN = f"{_SEAMS}:TESTED_UVICORN"
_OUT_OF_RANGE = (
    "tests/receiver/test_protocol.py::"
    "test_protocol_with_uvicorn_outside_the_tested_versions_serves_through_the_asgi_app"
)

BORROWED: tuple[Borrowed, ...] = (
    Borrowed(
        "receiver/protocol.py",
        "uvicorn",
        f"{_SEAMS}:seam_problem",
        _UVICORN,
        (
            _OUT_OF_RANGE,
            "tests/receiver/test_protocol.py::"
            "test_protocol_with_a_private_attribute_renamed_serves_through_the_asgi_app",
            "tests/receiver/test_protocol.py::"
            "test_protocol_when_uvicorns_internals_raise_while_serving_switches_to_the_asgi_app",
        ),
    ),
    # Out of range, the receiver's fallback is connections.guarded_protocol, which then serves
    # through uvicorn's own httptools protocol, without GuardedProtocol.
    Borrowed(
        "servers/connections.py",
        "uvicorn",
        f"{_SEAMS}:seam_problem",
        _UVICORN,
        (
            _OUT_OF_RANGE,
            "tests/test_connections.py::"
            "test_emulator_without_the_guard_internals_answers_the_same_and_warns_what_is_lost",
        ),
    ),
    Borrowed("servers/server.py", "uvicorn", f"{_SEAMS}:seam_problem", _UVICORN, (_OUT_OF_RANGE,)),
    Borrowed(
        "receiver/app.py",
        "uvicorn",
        "prefctl.receiver.app:_TRANSPORT_METHODS",
        _UVICORN,
        (
            "tests/receiver/test_app.py::"
            "test_app_close_fault_without_a_transport_answers_500_and_closes",
        ),
    ),
    Borrowed(
        "servers/loop.py",
        "uvicorn",
        "prefctl.servers.loop:new_event_loop",
        _UVICORN,
        ("tests/test_server_loop.py::test_loop_without_a_socket_creates_uvloops_own_server",),
    ),
    Borrowed(
        "emulator/routes/_lanes.py",
        "fastapi",
        "prefctl.emulator.routes._lanes:check_lanes",
        "prefctl.emulator.routes._lanes:TESTED_FASTAPI",
        (
            "tests/emulator/routes/test_direct_lanes.py::"
            "test_with_fastapi_outside_the_tested_range_the_lanes_are_off_and_answers_the_same",
        ),
    ),
    Borrowed(
        "cli/_coercion.py",
        "typer",
        "prefctl.cli._coercion:internals_problem",
        "prefctl.cli._coercion:TESTED_TYPER",
        (
            "tests/cli/test_coercion.py::"
            "test_a_command_is_answered_without_pydantic_and_the_same_when_typer_s_internals_moved",
        ),
    ),
    Borrowed(
        "cli/app.py",
        "typer",
        "prefctl.cli._coercion:help_internals_problem",
        "prefctl.cli._coercion:TESTED_TYPER",
        (
            "tests/cli/test_help_guards.py::"
            "test_help_with_a_typer_internal_broken_prints_the_same_essentials",
        ),
    ),
    Borrowed(
        "cli/app.py",
        "typer",
        "prefctl.cli._coercion:color_switch_problem",
        "prefctl.cli._coercion:TESTED_TYPER",
        (
            "tests/cli/test_help_guards.py::"
            "test_help_with_a_typer_internal_broken_prints_the_same_essentials",
        ),
    ),
    Borrowed(
        "cli/_httpx_stand_in.py",
        "httpx",
        "prefctl.cli._httpx_stand_in:problem",
        "prefctl.cli._httpx_stand_in:TESTED_HTTPX",
        (
            "tests/cli/test_httpx_stand_in.py::"
            "test_rest_command_works_with_an_httpx_the_stand_in_does_not_fit_and_v_says_why",
            "tests/cli/test_httpx_stand_in.py::"
            "test_httpx_importing_a_second_name_from_its_cli_gets_the_real_module",
            "tests/cli/test_httpx_stand_in.py::"
            "test_httpx_outside_the_tested_range_is_imported_as_it_is",
        ),
    ),
)


def _resolve(reference: str) -> Any:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def _requirements(*groups: str) -> list[tuple[str, Requirement]]:
    """(line text, requirement) of the runtime dependencies and of the optional ``groups``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for group in groups:
        texts += project["optional-dependencies"][group]
    return [(text, Requirement(text)) for text in texts]


def runtime_requirements() -> dict[str, Requirement]:
    """The dependencies of prefctl and of its runtime extra ``postgres``."""
    return {req.name.lower(): req for _, req in _requirements("postgres")}


def pins(path: Path) -> dict[str, Version]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)$", line.strip())
        if match:
            found[match[1].lower()] = Version(match[2])
    return found


def _pyproject_line(requirement_text: str) -> str:
    [line] = [
        line
        for line in (ROOT / "pyproject.toml").read_text().splitlines()
        if f'"{requirement_text}"' in line
    ]
    return line


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


def _borrowed_section() -> str:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    return text.split("## Borrowed internals", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("row", BORROWED, ids=lambda row: row.where)
def test_borrowed_internal_has_an_importable_guard(row: Borrowed) -> None:
    guard = _resolve(row.guard)
    assert callable(guard) or isinstance(guard, tuple | frozenset), row.guard


@pytest.mark.parametrize("row", BORROWED, ids=lambda row: row.where)
def test_borrowed_internal_has_a_tested_range_in_code_holding_the_pinned_release(
    row: Borrowed,
) -> None:
    """The range is two (major, minor) tuples, low before high, and the release constraints.txt
    pins (the reproducible CI run) is inside it, so CI's first run takes the fast path."""
    low, high = _resolve(row.tested)
    assert all(isinstance(part, int) for part in (*low, *high)), row.tested
    assert tuple(low) < tuple(high), row.tested
    pinned = pins(ROOT / "constraints.txt")[row.library]
    assert tuple(low) <= pinned.release[:2] < tuple(high), f"{row.library} {pinned}"


@pytest.mark.parametrize("row", BORROWED, ids=lambda row: row.where)
def test_borrowed_internal_has_fallback_tests_that_exist(row: Borrowed) -> None:
    assert row.fallback_tests
    for node_id in row.fallback_tests:
        path, *names = node_id.split("::")
        assert (ROOT / path).is_file(), node_id
        assert set(names) <= _test_names(ROOT / path), f"{node_id} does not exist"


@pytest.mark.parametrize("row", BORROWED, ids=lambda row: row.where)
def test_borrowed_internal_is_a_row_of_contributing_naming_its_guard(row: Borrowed) -> None:
    rows = [line for line in _borrowed_section().splitlines() if line.startswith(f"| `{row.where}")]
    assert rows, f"CONTRIBUTING.md, 'Borrowed internals': no row for {row.where}"
    guard_name = row.guard.rpartition(":")[2]
    named = {guard_name, row.tested.rpartition(":")[2]}
    assert any(name in line for line in rows for name in named), (
        f"the row for {row.where} names neither {guard_name} nor its range"
    )


def test_every_row_of_contributings_table_is_in_the_registry() -> None:
    wheres = re.findall(r"^\| `([\w/.]+\.py)`", _borrowed_section(), re.MULTILINE)
    assert wheres
    assert set(wheres) == {row.where for row in BORROWED}


def test_borrowed_libraries_are_runtime_dependencies() -> None:
    assert {row.library for row in BORROWED} <= set(runtime_requirements())


def test_pyproject_bounds_no_dependency_above() -> None:
    """A cap would stop users installing prefctl beside the release their project needs; the
    guards decide at run time instead. A release known to be broken may be excluded (``!=X``),
    with the reason in a comment on that line."""
    for text, requirement in _requirements("test", "postgres"):
        operators = {spec.operator for spec in requirement.specifier}
        assert not operators & {"<", "<=", "==", "~=", "==="}, f"pyproject.toml caps {text!r}"
        if "!=" in operators:
            assert "#" in _pyproject_line(text), f"{text!r}: say why the release is excluded"


def test_pyproject_bounds_below_every_runtime_dependency() -> None:
    for name, requirement in runtime_requirements().items():
        assert any(spec.operator == ">=" for spec in requirement.specifier), name


def test_constraints_pin_every_runtime_dependency_inside_its_range() -> None:
    locked = pins(ROOT / "constraints.txt")
    for name, requirement in runtime_requirements().items():
        assert name in locked, f"constraints.txt has no pin for {name}"
        assert locked[name] in requirement.specifier, f"constraints.txt: {name} {locked[name]}"


def test_constraints_lowest_is_generated_from_pyproject() -> None:
    check = [sys.executable, str(ROOT / "scripts" / "gen_constraints.py"), "--check"]
    result = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lowest = pins(ROOT / "constraints-lowest.txt")
    for name, requirement in runtime_requirements().items():
        assert lowest[name] in requirement.specifier
