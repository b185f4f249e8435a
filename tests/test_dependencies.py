"""The dependency bounds in pyproject.toml and the constraints files that CI tests them with.

prefctl reaches into the internals of uvicorn, FastAPI and Typer (CONTRIBUTING.md, "Borrowed
internals"): a release of any may change them, so each is bounded above at the newest version
tested; the bounds of uvicorn and FastAPI are the ranges their start-up checks accept
(``seams.TESTED_UVICORN``, ``_lanes.TESTED_FASTAPI``), and Typer's upper bound is where its
check stops (``_coercion.TESTED_TYPER``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from prefctl.cli._coercion import TESTED_TYPER
from prefctl.emulator.routes._lanes import TESTED_FASTAPI
from prefctl.servers.seams import TESTED_UVICORN

ROOT = Path(__file__).resolve().parents[1]
BORROWED = ("uvicorn", "fastapi", "typer")  # dependencies whose internals prefctl uses


def runtime_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(text) for text in project["dependencies"]]
    return {requirement.name.lower(): requirement for requirement in requirements}


def pins(path: Path) -> dict[str, Version]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)$", line.strip())
        if match:
            found[match[1].lower()] = Version(match[2])
    return found


def test_pyproject_bounds_above_every_dependency_whose_internals_are_used() -> None:
    requirements = runtime_requirements()
    for name in BORROWED:
        uppers = [spec for spec in requirements[name].specifier if spec.operator == "<"]
        assert uppers, f"pyproject.toml must bound {name} above (<X): prefctl uses its internals"


@pytest.mark.parametrize(
    ("name", "tested"), [("uvicorn", TESTED_UVICORN), ("fastapi", TESTED_FASTAPI)]
)
def test_pyproject_range_is_the_range_the_start_up_check_accepts(
    name: str, tested: tuple[tuple[int, int], tuple[int, int]]
) -> None:
    specifier = runtime_requirements()[name].specifier
    low, high = (Version(".".join(map(str, bound))) for bound in tested)
    assert {(spec.operator, Version(spec.version)) for spec in specifier} == {
        (">=", low),
        ("<", high),
    }


def test_pyproject_typer_upper_bound_is_where_its_start_up_check_stops() -> None:
    """Older Typer releases convert values without pydantic and need no help; the check accepts
    the releases from the one that brought the pydantic converters up to this bound."""
    specifier = runtime_requirements()["typer"].specifier
    uppers = [Version(spec.version) for spec in specifier if spec.operator == "<"]
    assert uppers == [Version(".".join(map(str, TESTED_TYPER[1])))]


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
