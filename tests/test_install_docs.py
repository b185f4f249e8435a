"""The install lines of README.md and docs/ work as written: prefctl is not on the package index
(and the name there is not ours), so no line installs it by name; the README's quick start runs
from a fresh clone; and .ci/run runs the README's test command. docs/ci.md's recipes are run step
by step in tests/testing/test_ci_recipes.py; the wheel lines by .ci/run's packaging stage.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
INSTALL = re.compile(r"\b(?:pip|pipx)\s+install\b(?P<args>[^`\n|;&#]*)")
BY_NAME = re.compile(r"^prefctl(?:\[[^\]]*\])?(?:[=<>!~].*)?$")  # a name, not a path or a file


def _quick_start() -> list[str]:
    """The two commands of the README's quick start, in order."""
    block = README.read_text(encoding="utf-8").split("## Quick start", 1)[1]
    body = block.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in body.splitlines() if line and not line.startswith("#")]


def test_docs_never_install_prefctl_by_name_from_the_index() -> None:
    found = []
    for path in DOCS:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in INSTALL.finditer(line):
                names = [a for a in shlex.split(match["args"], posix=True) if BY_NAME.match(a)]
                if names:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_docs_install_pattern_sees_an_install_by_name() -> None:
    # The check above would pass on nothing; it must see the line it forbids.
    [match] = INSTALL.finditer("python -m pip install prefctl pytest")
    assert [a for a in shlex.split(match["args"]) if BY_NAME.match(a)] == ["prefctl"]


def test_readme_quick_start_is_two_commands_and_ci_runs_its_test_command() -> None:
    demo, tests = _quick_start()
    assert demo.endswith("&& .venv/bin/prefctl demo")
    test_command = tests.rpartition("&& ")[2]
    assert test_command == ".venv/bin/pytest"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert '"$1/bin/pytest" </dev/null' in ci  # suite VENV runs VENV/bin/pytest, no arguments
    assert 'run_suite "tests (a) constraints" .venv\n' in ci


@pytest.mark.slow
def test_readme_quick_start_demo_runs_from_a_fresh_clone(tmp_path: Path) -> None:
    """The first command, literally, in a clone of this checkout's HEAD: a fresh venv, the
    install, and ``prefctl demo`` (its emulator and receiver on 127.0.0.1)."""
    clone = tmp_path / "prefctl"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=60)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PREFCTL_"))}
    env["PATH"] = os.pathsep.join(
        entry
        for entry in env.get("PATH", "").split(os.pathsep)
        if not (Path(entry) / "pytest").exists()  # not this run's venv: python3 is the system's
    )
    demo = _quick_start()[0]
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", demo],
        cwd=clone,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "expected outcomes\t6 of 6\tall happened" in result.stdout
