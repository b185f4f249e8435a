"""The plugin as a user meets it: loaded by its entry point into a pytest of their own (a child
process here), the example of docs/testing.md run as written, and fixtures that cannot start."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testing._run import example_module, run_pytest

USES_EMULATOR = """
def test_uses_the_emulator(prefctl_emulator):
    assert prefctl_emulator.token()
"""


def _write(folder: Path, source: str, name: str = "test_user.py") -> None:
    (folder / name).write_text(source, encoding="utf-8")


@pytest.mark.slow
def test_docs_example_passes_with_only_the_plugin_and_leaves_the_user_folders_alone(
    tmp_path: Path,
) -> None:
    _write(tmp_path, example_module(), "test_my_webhooks.py")
    result = run_pytest(tmp_path, "-q", "--basetemp", str(tmp_path / "base"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 passed" in result.stdout
    assert list((tmp_path / "home").iterdir()) == []  # no profiles.toml, data dir or token cache
    assert list((tmp_path / "base").glob("prefctl-emulator*")) == []  # removed at the end


def test_plugin_load_imports_nothing_heavy() -> None:
    heavy = ["httpx", "pydantic", "uvicorn", "fastapi", "prefctl.emulator", "prefctl.receiver"]
    code = f"import sys, prefctl.testing; print([m for m in {heavy!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_plugin_turned_off_has_no_fixtures(tmp_path: Path) -> None:
    _write(tmp_path, USES_EMULATOR)
    result = run_pytest(tmp_path, "-q", "-p", "no:prefctl", autoload=True)
    assert result.returncode == 1
    assert "fixture 'prefctl_emulator' not found" in result.stdout


def test_emulator_fixture_on_a_busy_port_fails_with_the_server_error(tmp_path: Path) -> None:
    _write(tmp_path, USES_EMULATOR + USES_EMULATOR.replace("uses_the", "uses_again_the"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_pytest(tmp_path, "-q", "--prefctl-port", str(port), timeout=60)
    assert result.returncode == 1
    line = f"prefctl_emulator could not start: port {port} on 127.0.0.1 is already in use"
    assert line in result.stdout
    assert result.stdout.count("ERROR at setup of") == 2  # each test that uses it says why
    assert "Traceback" not in result.stdout


def test_emulator_fixture_on_a_damaged_data_dir_fails_with_its_path(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "emulator.db").write_bytes(b"not a database, just bytes" * 100)
    _write(tmp_path, USES_EMULATOR)
    result = run_pytest(tmp_path, "-q", "--prefctl-data-dir", str(data), timeout=60)
    assert result.returncode == 1
    assert (
        f"prefctl_emulator could not start: cannot open the store {data / 'emulator.db'}: "
        "file is not a database" in result.stdout
    )
    assert (data / "emulator.db").read_bytes().startswith(b"not a database")  # nothing replaced


def test_emulator_fixture_where_no_data_dir_can_be_made_fails_with_the_reason(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("")
    _write(tmp_path, USES_EMULATOR)
    result = run_pytest(tmp_path, "-q", "--prefctl-data-dir", str(tmp_path / "a-file" / "data"))
    assert result.returncode == 1
    assert f"cannot create the data folder {tmp_path / 'a-file' / 'data'}" in result.stdout


def test_marker_time_scale_wins_over_the_option_and_each_scale_has_its_emulator(
    tmp_path: Path,
) -> None:
    _write(
        tmp_path,
        """
import pytest

def test_unmarked(prefctl_emulator):
    assert prefctl_emulator.time_scale == 10

@pytest.mark.prefctl(time_scale=60)
def test_marked(prefctl_emulator):
    assert prefctl_emulator.time_scale == 60
""",
    )
    result = run_pytest(tmp_path, "-v", "--prefctl-time-scale", "10")
    assert result.returncode == 0, result.stdout
    assert "test_marked[time_scale=60] PASSED" in result.stdout


def test_marker_with_an_unknown_argument_fails_collection_in_one_line(tmp_path: Path) -> None:
    _write(
        tmp_path,
        """
import pytest

@pytest.mark.prefctl(speed=60)
def test_marked(prefctl_emulator):
    pass
""",
    )
    result = run_pytest(tmp_path, "-q")
    assert result.returncode == 2
    assert "@pytest.mark.prefctl takes time_scale=X only, not speed" in result.stdout


def test_receiver_subscriptions_are_deleted_after_its_test(tmp_path: Path) -> None:
    _write(
        tmp_path,
        """
urls = []

def test_subscribes(prefctl_emulator, prefctl_receiver):
    prefctl_emulator.subscribe(prefctl_receiver.url, ["tag.added"])
    urls.append(prefctl_receiver.url)

def test_finds_no_subscription_left(prefctl_emulator):
    listed = prefctl_emulator.client.get("/subscriptions").json()["Subscriptions"]
    assert urls and [s["Url"] for s in listed if s["Url"] in urls] == []
""",
    )
    result = run_pytest(tmp_path, "-q")
    assert result.returncode == 0, result.stdout


BLOCKS_UNTIL_TERMINATED = """
import os
import threading
from pathlib import Path


def test_blocks(prefctl_emulator):
    prefctl_emulator.token()  # the token cache holds a secret now
    Path(os.environ["READY_FILE"]).write_text(str(os.getpid()))
    threading.Event().wait(600)  # until the job is cancelled
"""


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_sigterm_to_a_run_stops_the_emulator_and_removes_its_folder(tmp_path: Path) -> None:
    import signal

    from tests.helpers import wait_until
    from tests.testing._run import pytest_command

    _write(tmp_path, BLOCKS_UNTIL_TERMINATED)
    ready = tmp_path / "ready"
    command, env = pytest_command(tmp_path, "-q", "--basetemp", str(tmp_path / "base"))
    env["READY_FILE"] = str(ready)
    run = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_until(ready.exists, timeout=60, what="the test did not start")
        folders = list((tmp_path / "base").glob("prefctl-emulator*"))
        assert (folders[0] / "cache").exists()
        children = _children(run.pid)

        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()

    assert run.returncode == 2, output  # pytest's "interrupted", as after Ctrl-C
    assert "Terminated: SIGTERM" in output
    assert list((tmp_path / "base").glob("prefctl-emulator*")) == []
    assert children  # the emulator's writer process, at least
    assert [child for child in children if _running(child)] == []


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False  # ended and reaped
    return state != "Z"
