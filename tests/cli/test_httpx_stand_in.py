"""The stand-in for httpx's command-line client and its guard (``cli/_httpx_stand_in.py``).

Each test runs prefctl in a new process, with an httpx of the test's making first on the path: a
copy of the installed one whose ``__init__`` imports a second name from ``httpx._main``, or
reports a version outside the tested range.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from prefctl.cli._httpx_stand_in import STAND_IN_DOC, TESTED_HTTPX
from prefctl.emulator.serve import RunningEmulator

_IMPORT = "from ._main import main\n"


def _httpx_copy(folder: Path, *, init: str | None = None, version: str | None = None) -> Path:
    """A copy of the installed httpx in ``folder``, its ``__init__`` or version changed."""
    package = folder / "httpx"
    shutil.copytree(Path(httpx.__file__).parent, package)
    source = package / "__init__.py"
    text = source.read_text(encoding="utf-8")
    assert _IMPORT in text  # what the stand-in was made for
    if init is not None:
        source.write_text(text.replace(_IMPORT, init), encoding="utf-8")
    if version is not None:
        about = package / "__version__.py"
        about.write_text(
            about.read_text(encoding="utf-8").replace(httpx.__version__, version),
            encoding="utf-8",
        )
    return folder


def _python(code: str, path: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _prefctl(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    command = [sys.executable, "-c", "from prefctl.__main__ import main; main()", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


# What a command finds: which httpx it imported, httpx._main's doc, where httpx.main comes from.
_WHICH = (
    "import sys\n"
    "from prefctl.__main__ import _without_httpx_cli\n"
    "_without_httpx_cli()\n"
    "import httpx\n"
    "print(httpx.__file__)\n"
    "print(sys.modules['httpx._main'].__doc__)\n"
    "print(type(httpx.main).__name__)\n"
)


def test_httpx_importing_a_second_name_from_its_cli_gets_the_real_module(tmp_path: Path) -> None:
    fake = _httpx_copy(tmp_path, init="from ._main import main, print_help\n")

    imported_from, doc, main_from = _python(_WHICH, fake)

    assert imported_from.startswith(str(fake))
    assert doc != STAND_IN_DOC  # no stand-in: httpx imports its client as it would without us
    assert main_from == "Command"  # httpx.main is httpx's own (a click command)


def test_httpx_reaching_its_cli_another_way_is_not_given_the_stand_in(tmp_path: Path) -> None:
    fake = _httpx_copy(tmp_path, init="from . import _main as _cli; main = _cli.main\n")

    imported_from, doc, main_from = _python(_WHICH, fake)

    assert imported_from.startswith(str(fake))
    assert doc != STAND_IN_DOC
    assert main_from == "Command"  # httpx.main is httpx's own (a click command)


def test_stand_in_hands_any_other_name_to_the_real_module() -> None:
    # What a later httpx that read another name of the stand-in would get.
    code = (
        "import sys\n"
        "from prefctl.__main__ import _without_httpx_cli\n"
        "_without_httpx_cli()\n"
        "import httpx\n"
        "stand_in = sys.modules['httpx._main']\n"
        "print(stand_in.__doc__)\n"
        "print(stand_in.print_help.__module__)\n"
        "print(sys.modules['httpx._main'].__doc__ == stand_in.__doc__)\n"
        "print(hasattr(stand_in, '__path__'))\n"
    )

    doc, module, still_stand_in, has_path = _python(code, Path())

    assert doc == STAND_IN_DOC
    assert module == "httpx._main"  # the real function
    assert still_stand_in == "False"  # the real module took its place
    assert has_path == "False"


def test_httpx_outside_the_tested_range_is_imported_as_it_is(tmp_path: Path) -> None:
    high = TESTED_HTTPX[1]
    fake = _httpx_copy(tmp_path, version=f"{high[0]}.{high[1]}.0")

    imported_from, doc, main_from = _python(_WHICH, fake)

    assert imported_from.startswith(str(fake))
    assert doc != STAND_IN_DOC
    assert main_from == "Command"  # httpx.main is httpx's own (a click command)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"init": "from ._main import main, print_help\n"}, "otherwise than"),
        ({"version": f"{TESTED_HTTPX[1][0]}.{TESTED_HTTPX[1][1]}.0"}, "outside the tested"),
    ],
)
def test_rest_command_works_with_an_httpx_the_stand_in_does_not_fit_and_v_says_why(
    emulator: RunningEmulator, tmp_path: Path, change: dict[str, str], said: str
) -> None:
    fake = _httpx_copy(tmp_path, **change)

    result = _prefctl(fake, "-v", "-o", "json", "programs", "list")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[")
    assert "httpx's command-line client is imported too" in result.stderr
    assert said in result.stderr


def test_rest_command_with_the_stand_in_says_so_at_vv(emulator: RunningEmulator) -> None:
    result = _prefctl(Path(), "-vv", "-o", "json", "programs", "list")

    assert result.returncode == 0, result.stderr
    assert "httpx's command-line client is a stand-in" in result.stderr
