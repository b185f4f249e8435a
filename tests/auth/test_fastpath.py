"""The cached ``token get`` is served before the CLI loads, by a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefctl.auth.cache import CachedToken, TokenCache
from prefctl.auth.fastpath import FastRequest, parse
from prefctl.clock import SystemClock
from tests.auth.helpers import CLIENT_ID, SCOPE, write_profile
from tests.helpers import run_process

URL = "http://127.0.0.1:9"  # nothing listens: the fast path must not need the network
HEAVY = ("httpx", "pydantic", "typer", "rich", "cryptography", "jwt")
PROBE = """
import sys
sys.argv = ["prefctl", *sys.argv[1:]]
from prefctl.__main__ import main
main()
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("loaded:" + ",".join(heavy), file=sys.stderr)
"""


def _prime(scope: str = SCOPE, lifetime: float = 3600, token: str = "cached-token-value") -> None:
    cache = TokenCache.default(SystemClock())
    now = SystemClock().now()
    cache.store(CachedToken.from_response(URL, CLIENT_ID, scope, token, "Bearer", lifetime, now))


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    code = PROBE.format(heavy=HEAVY)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["token", "get"], FastRequest()),
        (["-p", "ci", "token", "get"], FastRequest(profile="ci")),
        (["--profile=ci", "--config", "c.toml", "token", "get"], FastRequest("ci", "c.toml")),
        (["-q", "--no-color", "-o", "table", "token", "get"], FastRequest()),
        (["token", "get", "--scope", "A/b"], FastRequest(scope="A/b")),
        (["token", "get", "--scope=A/b"], FastRequest(scope="A/b")),
    ],
)
def test_fastpath_parse_accepts_global_options_and_scope(
    argv: list[str], expected: FastRequest
) -> None:
    assert parse(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["token", "get", "--json"],
        ["token", "get", "--force"],
        ["-v", "token", "get"],
        ["-o", "json", "token", "get"],
        ["token", "inspect"],
        ["token", "get", "--scope"],
        ["token", "get", "extra"],
        ["--profile"],
        ["config", "token", "get"],
    ],
)
def test_fastpath_parse_leaves_anything_else_to_the_cli(argv: list[str]) -> None:
    assert parse(argv) is None


def test_fastpath_cached_token_printed_without_heavy_imports(isolated_env: Path) -> None:
    write_profile(URL)
    _prime()
    result = _run("token", "get")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "cached-token-value\n"
    assert result.stderr.strip() == "loaded:"


def test_fastpath_serves_the_scope_asked_for(isolated_env: Path) -> None:
    write_profile(URL)
    _prime(scope="OTHER/user", token="other-scope-token")
    result = _run("token", "get", "--scope", "OTHER/user")
    assert result.stdout == "other-scope-token\n"
    assert result.stderr.strip() == "loaded:"


def test_fastpath_installed_entry_point_prints_the_cached_token(isolated_env: Path) -> None:
    write_profile(URL)
    _prime()
    script = Path(sys.executable).with_name("prefctl")
    result = subprocess.run(
        [str(script), "token", "get"], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "cached-token-value\n", "")


def test_fastpath_token_due_for_renewal_goes_to_the_cli(isolated_env: Path) -> None:
    write_profile(URL)
    _prime(lifetime=30)
    result = _run("token", "get", env={"PREFCTL_CLIENT_SECRET": "x" * 64})
    assert result.returncode == 5  # the full CLI tried to renew it at URL
    assert "127.0.0.1:9/oauth2/v1/token" in result.stderr
    assert "cached-token-value" not in result.stdout + result.stderr


def test_fastpath_unknown_profile_gets_the_cli_error(isolated_env: Path) -> None:
    write_profile(URL)
    _prime()
    result = _run("-p", "nope", "token", "get")
    assert result.returncode == 2
    assert "unknown profile 'nope'" in result.stderr
    assert "Traceback" not in result.stderr


def test_fastpath_json_output_env_goes_to_the_cli(isolated_env: Path) -> None:
    write_profile(URL)
    _prime()
    result = _run("token", "get", env={"PREFCTL_OUTPUT": "json"})
    assert result.returncode == 0, result.stderr
    assert '"access_token": "cached-token-value"' in result.stdout


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("full", "error: cannot write the output: no space left on device"),
        ("closed", "error: cannot write the output: stdout is closed"),
    ],
)
def test_fastpath_output_that_cannot_be_written_is_one_line_exit_1(
    isolated_env: Path, stdout: str, message: str
) -> None:
    write_profile(URL)
    _prime()
    result = run_process(stdout, "token", "get")
    assert (result.returncode, result.stderr) == (1, message + "\n")
    assert "cached-token-value" not in result.stderr


def test_fastpath_pipe_closed_by_its_reader_ends_quietly_exit_1(isolated_env: Path) -> None:
    write_profile(URL)
    _prime()
    result = run_process("broken-pipe", "token", "get")
    assert (result.returncode, result.stderr) == (1, "")
