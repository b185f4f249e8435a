"""The CI recipes of docs/ci.md, run step by step: prefctl checked out from its repository (a bare
clone of this checkout's HEAD stands in for where it is hosted) and installed as written into a
fresh virtual environment, the emulator started in the background, the example of docs/testing.md
as the user's tests, and ``endpoint check`` against a local receiver standing in for the staging
one. Only 127.0.0.1 and the local pip cache and index are used.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from prefctl.receiver.serve import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.webhooks.signature import SigningCredentials
from tests.testing._run import CI_MD, ROOT, example_module, fenced_blocks, user_env

STAGING = SigningCredentials("STAGING_CORP", "staging-signer", "staging-hashkey-0123456789")
STEP_TIMEOUT = 300.0  # the install step resolves prefctl's dependencies from pip's cache
REF = "ci-recipe"  # the branch of the stand-in repository that holds this checkout's HEAD

pytestmark = pytest.mark.slow  # two installs into fresh venvs: a minute or more each


@pytest.fixture
def hosted(tmp_path: Path) -> str:
    """A bare repository holding this checkout's HEAD as branch ``REF``: where prefctl is hosted."""
    bare = tmp_path / "prefctl.git"
    git = ["git", "-c", "advice.detachedHead=false"]
    subprocess.run([*git, "clone", "--quiet", "--bare", str(ROOT), str(bare)], check=True)
    head = subprocess.run(
        [*git, "-C", str(ROOT), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run([*git, "-C", str(bare), "update-ref", f"refs/heads/{REF}", head], check=True)
    return bare.as_uri()


@pytest.fixture(autouse=True)
def _warm_pip_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The install steps use this machine's pip cache (a runner's cache action), not the empty
    one of the test's home folder."""
    cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    monkeypatch.setenv("PIP_CACHE_DIR", cache)


@pytest.fixture
def runner_path(tmp_path: Path) -> str:
    """PATH of a fresh runner: a new virtual environment's python first (setup-python's, or the
    image's), nothing of this test run's environment."""
    folder = tmp_path / "runner-python"
    venv.EnvBuilder(with_pip=True).create(folder)
    path = [str(folder / "bin"), *os.environ.get("PATH", "").split(os.pathsep)]
    own = str(Path(sys.executable).parent)
    return os.pathsep.join(entry for entry in path if entry != own)


@pytest.fixture
def staging() -> Iterator[RunningReceiver]:
    """``prefctl receive`` verifying with the staging credentials, in place of staging."""
    with start_in_thread(ReceiverConfig(port=0, credentials=STAGING)) as receiver:
        yield receiver


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The user's home (config, data and cache folders by default): it must stay empty."""
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's checkout: the example test module of docs/testing.md under tests/."""
    checkout = tmp_path / "checkout"
    (checkout / "tests").mkdir(parents=True)
    (checkout / "tests" / "test_my_webhooks.py").write_text(example_module(), encoding="utf-8")
    return checkout


def _yaml_blocks() -> list[dict[str, Any]]:
    return [yaml.safe_load(block) for block in fenced_blocks(CI_MD, "yaml")]


def _staging_values(receiver: RunningReceiver) -> dict[str, str]:
    return {
        "STAGING_WEBHOOK_URL": receiver.webhook_url,
        "STAGING_CLIENT_ID": STAGING.client_id,
        "STAGING_SIGNATURE_USER_ID": STAGING.signature_user_id,
        "STAGING_HASHKEY": STAGING.hashkey,
    }


def _run(script: str, cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
    )


def _stop_emulator(cwd: Path, env: Mapping[str, str]) -> None:
    """Whatever the steps did, stop an emulator they left running (by its pid file)."""
    _run("prefctl emulator stop || true", cwd, env)


def _prefctl_files(home: Path) -> list[Path]:
    """What prefctl wrote under the home folder (pip's cache and the like are the runner's)."""
    return [path for path in home.rglob("*") if "prefctl" in path.name]


def _assert_reports(checkout: Path) -> None:
    tests = ET.parse(checkout / "reports" / "tests.xml").getroot().find("testsuite")
    assert tests is not None
    assert (tests.get("tests"), tests.get("failures"), tests.get("errors")) == ("6", "0", "0")
    check = ET.parse(checkout / "reports" / "endpoint-check.xml").getroot()
    suite = check if check.tag == "testsuite" else check.find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "0"
    assert int(suite.get("tests", "0")) >= 7


def test_github_actions_job_runs_green(
    project: Path,
    staging: RunningReceiver,
    home: Path,
    tmp_path: Path,
    hosted: str,
    runner_path: str,
) -> None:
    [workflow] = [b for b in _yaml_blocks() if "jobs" in b]
    job = workflow["jobs"]["integration"]
    context = {("runner", "temp"): str(tmp_path / "runner-temp")}
    context |= {("vars", k): v for k, v in _staging_values(staging).items()}
    context |= {("vars", "PREFCTL_REPOSITORY"): "example/prefctl", ("vars", "PREFCTL_REF"): REF}
    context |= {("secrets", "STAGING_HASHKEY"): STAGING.hashkey}

    def expand(value: str) -> str:
        return re.sub(r"\$\{\{\s*(\w+)\.(\w+)\s*\}\}", lambda m: context[(m[1], m[2])], str(value))

    env = user_env(home) | {k: expand(v) for k, v in job["env"].items()}
    env["PATH"] = runner_path
    ran: list[str] = []
    failed: list[str] = []
    try:
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@") and "with" in step:
                checkout = step["with"]
                assert expand(checkout["repository"]) == "example/prefctl"
                target = project / checkout["path"]
                subprocess.run(["git", "clone", "--quiet", hosted, str(target)], check=True)
                subprocess.run(
                    ["git", "-C", str(target), "checkout", "--quiet", expand(checkout["ref"])],
                    check=True,
                )
                ran.append(step["name"])
                continue
            if "run" not in step:
                continue
            if failed and step.get("if") != "always()":
                continue
            step_env = env | {k: expand(v) for k, v in step.get("env", {}).items()}
            result = _run(step["run"], project, step_env)
            ran.append(step["name"])
            if result.returncode != 0:
                failed.append(
                    f"{step['name']}: exit {result.returncode}\n{result.stdout}{result.stderr}"
                )
    finally:
        _stop_emulator(project, env)
    assert failed == []
    assert ran == [
        "Check out prefctl",
        "Install",
        "Start the emulator",
        "Run the tests",
        "Check the staging receiver",
        "Stop the emulator",
    ]
    _assert_reports(project)
    assert _prefctl_files(home) == []  # everything went to the job's folders


def test_gitlab_ci_job_runs_green(
    project: Path, staging: RunningReceiver, home: Path, hosted: str, runner_path: str
) -> None:
    [pipeline] = [b for b in _yaml_blocks() if "integration" in b and "jobs" not in b]
    job = pipeline["integration"]
    env = user_env(home) | {"CI_PROJECT_DIR": str(project), "PATH": runner_path}
    env |= {"PREFCTL_REPOSITORY_URL": hosted, "PREFCTL_REF": REF}
    env |= {
        k: os.path.expandvars(v.replace("$CI_PROJECT_DIR", str(project)))
        for k, v in job["variables"].items()
    }
    env |= _staging_values(staging)  # CI/CD variables of the project
    try:
        before = _run("\n".join(job["before_script"]), project, env)
        assert before.returncode == 0, before.stdout + before.stderr
        script = _run("\n".join(job["script"]), project, env)
        after = _run("\n".join(job["after_script"]), project, env)
    finally:
        _stop_emulator(project, env)
    assert script.returncode == 0, script.stdout + script.stderr
    assert after.returncode == 0, after.stderr
    _assert_reports(project)
    assert _prefctl_files(home) == []
