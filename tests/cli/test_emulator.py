"""``prefctl emulator``: start/status/stop as real processes, and the support-team commands."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest

from prefctl import certs
from prefctl.emulator.serve import RunningEmulator
from tests.helpers import CliResult, free_port, run_cli, wait_until

PREFCTL = [sys.executable, "-m", "prefctl"]


def one_line_error(result: CliResult, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def read_line(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """One line of the process's stdout, waited on with a bound."""
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not selector.select(timeout):
            raise AssertionError(f"no line on stdout within {timeout} s")
        return proc.stdout.readline()
    finally:
        selector.close()


def get_token(auth_url: str, client_id: str, secret: str) -> str:
    response = httpx.post(
        auth_url + "/oauth2/v1/token",
        data={"grant_type": "client_credentials", "scope": "DEMO_CORP/admin"},
        auth=(client_id, secret),
        timeout=10,
    )
    response.raise_for_status()
    return str(response.json()["access_token"])


# -- start in the foreground -----------------------------------------------------------------------
@pytest.fixture
def foreground(config_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    proc = subprocess.Popen(
        [*PREFCTL, "-vvv", "-o", "json", "emulator", "start", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_start_foreground_prints_one_ready_line_and_stops_cleanly_on_sigterm(
    foreground: tuple[subprocess.Popen[str], int], config_path: Path
) -> None:
    proc, port = foreground
    ready = json.loads(read_line(proc))

    assert ready == {
        "type": "ready",
        "url": f"http://127.0.0.1:{port}",
        "auth_url": f"http://127.0.0.1:{port}",
        "api_url": f"http://127.0.0.1:{port}/api/v1",
        "data_dir": os.environ["PREFCTL_DATA_DIR"],
        "profile": "local",
        "pid": proc.pid,
        "workers": 1,
    }
    config = tomllib.loads(config_path.read_text())
    local = config["profiles"]["local"]
    assert config["default"] == "local"
    assert local["auth_url"] == ready["auth_url"]
    assert (config_path.stat().st_mode & 0o777) == 0o600
    token = get_token(ready["auth_url"], local["client_id"], local["client_secret"])
    assert run_cli("emulator", "status").exit_code == 0

    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=20)

    assert proc.returncode == 0, stderr
    assert stdout == ""  # nothing after the ready line
    everything = stderr + json.dumps(ready)
    for secret in (local["client_secret"], local["webhooks"]["hashkey"], token):
        assert secret not in everything
    assert "uvicorn" in stderr or "GET /healthz" in stderr  # -vvv did log
    assert not (Path(os.environ["PREFCTL_DATA_DIR"]) / "emulator.pid").exists()


@pytest.fixture(scope="module")
def background(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A foreground emulator process shared by the module; yields its data dir."""
    home = tmp_path_factory.mktemp("background")
    data_dir = home / "data"
    proc = subprocess.Popen(
        [
            *PREFCTL,
            *("--config", str(home / "profiles.toml"), "emulator", "start"),
            *("--port", str(free_port()), "--data-dir", str(data_dir)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert read_line(proc).startswith("emulator ready at http://127.0.0.1:")
        yield data_dir
    finally:
        proc.terminate()
        proc.wait(20)


def test_status_of_a_running_emulator_exits_0(background: Path) -> None:
    result = run_cli("emulator", "status", "--data-dir", str(background))

    assert result.exit_code == 0
    assert result.stdout.startswith("running at http://127.0.0.1:")


def test_start_twice_on_one_data_dir_is_refused(background: Path) -> None:
    result = run_cli("emulator", "start", "--port", "0", "--data-dir", str(background))

    assert "already runs" in one_line_error(result, 2)


def _running(data_dir: Path) -> tuple[int, str]:
    record = json.loads((data_dir / "emulator.pid").read_text())
    return int(record["pid"]), str(record["url"])


@pytest.mark.parametrize("detach", [[], ["--detach"]])
def test_start_again_on_its_port_says_already_running_with_pid_and_url(
    background: Path, detach: list[str]
) -> None:
    pid, url = _running(background)
    port = url.rsplit(":", 1)[1]

    result = run_cli("emulator", "start", "--port", port, "--data-dir", str(background), *detach)

    line = one_line_error(result, 2)
    assert line.startswith(f"error: an emulator already runs on {background} (pid {pid}, {url})")
    assert "in use" not in line


def test_start_of_another_data_dir_on_a_running_emulators_port_names_that_emulator(
    background: Path, tmp_path: Path
) -> None:
    pid, url = _running(background)
    port = url.rsplit(":", 1)[1]
    other = tmp_path / "other"

    result = run_cli("emulator", "start", "--port", port, "--data-dir", str(other))

    line = one_line_error(result, 2)
    assert line.startswith(f"error: an emulator already runs at {url} (pid {pid})")
    assert "prefctl emulator stop" in line
    assert not other.exists()


def test_reset_refuses_while_the_emulator_runs(background: Path) -> None:
    result = run_cli("emulator", "reset", "--yes", "--data-dir", str(background))

    assert "already runs" in one_line_error(result, 2)
    assert (background / "emulator.db").exists()


def test_two_starts_at_the_same_moment_on_one_data_dir_one_is_refused(tmp_path: Path) -> None:
    # Both check that no emulator runs before either has written its pid file.
    data_dir = tmp_path / "data"
    command = [*PREFCTL, "--config", str(tmp_path / "profiles.toml"), "emulator", "start"]
    command += ["--port", "0", "--data-dir", str(data_dir)]
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        wait_until(
            lambda: any(proc.poll() is not None for proc in procs),
            timeout=30,
            what="neither emulator was refused",
        )
        refused = [proc for proc in procs if proc.poll() is not None]
        assert len(refused) == 1, "both emulators serve the same data dir"
        (serving,) = [proc for proc in procs if proc not in refused]
        _, stderr = refused[0].communicate(timeout=10)
        assert refused[0].returncode == 2, stderr
        assert stderr.strip().startswith("error: an emulator already runs on"), stderr
        assert len(stderr.strip().splitlines()) == 1, stderr
        assert read_line(serving).startswith("emulator ready at")
        assert run_cli("emulator", "status", "--data-dir", str(data_dir)).exit_code == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.communicate(timeout=20)


def test_reset_refuses_while_a_dispatcher_runs_on_the_store(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    assert run_cli("emulator", "clients", "list", "--data-dir", str(data_dir)).exit_code == 0
    store = data_dir / "emulator.db"
    proc = subprocess.Popen(
        [*PREFCTL, "dispatcher", "run", "--store", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        with selectors.DefaultSelector() as selector:  # its first line: it has the store open
            selector.register(proc.stderr, selectors.EVENT_READ)
            assert selector.select(30), "dispatcher run did not start"
        assert "delivering" in proc.stderr.readline()

        result = run_cli("emulator", "reset", "--yes", "--data-dir", str(data_dir))

        assert "is in use by another prefctl command" in one_line_error(result, 2)
        assert store.exists()
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
    assert run_cli("emulator", "reset", "--yes", "--data-dir", str(data_dir)).exit_code == 0
    assert not store.exists()


@pytest.mark.parametrize("detach", [[], ["--detach"]])
def test_start_on_a_busy_port_is_one_line_exit_2_and_creates_nothing(
    config_path: Path, detach: list[str]
) -> None:
    data_dir = Path(os.environ["PREFCTL_DATA_DIR"])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        result = run_cli("emulator", "start", "--port", str(port), *detach)

    line = one_line_error(result, 2)
    assert f"port {port} on 127.0.0.1 is already in use (another program" in line
    assert "--port" in line
    assert result.stdout == ""
    assert not data_dir.exists()  # no data dir, no store, no account
    assert not config_path.exists()  # profile 'local' not written


@pytest.mark.parametrize("scale", ["0", "-2"])
def test_start_with_bad_time_scale_is_exit_2(config_path: Path, scale: str) -> None:
    result = run_cli("emulator", "start", "--port", "0", "--time-scale", scale)

    assert "--time-scale" in one_line_error(result, 2)


# -- detach, status, stop --------------------------------------------------------------------------
def test_detach_then_status_then_stop(config_path: Path) -> None:
    port = free_port()
    data_dir = Path(os.environ["PREFCTL_DATA_DIR"])

    started = subprocess.run(
        [*PREFCTL, "-o", "json", "emulator", "start", "--detach", "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert started.returncode == 0, started.stderr
    ready = json.loads(started.stdout)
    assert started.stdout.count("\n") == 1
    assert ready["type"] == "ready"
    assert ready["url"] == f"http://127.0.0.1:{port}"
    # Not the default data dir: the hint names it, or a bare 'stop' would stop another emulator.
    assert f"stop it with: prefctl emulator stop --data-dir {data_dir}" in started.stderr
    pid = ready["pid"]
    try:
        assert json.loads((data_dir / "emulator.pid").read_text())["pid"] == pid
        assert (data_dir / "emulator.log").exists()
        status = run_cli("-o", "json", "emulator", "status")
        assert status.exit_code == 0
        assert status.json == {
            "running": True,
            "state": "running",
            "url": ready["url"],
            "pid": pid,
            "data_dir": str(data_dir),
            "workers": 1,
            "worker_pids": [pid],
        }
        assert run_cli("emulator", "status").stdout.startswith("running at ")

        stopped = run_cli("emulator", "stop")

        assert stopped.exit_code == 0, stopped.output
        assert f"pid {pid}" in stopped.stderr
        assert not (data_dir / "emulator.pid").exists()
        with pytest.raises(ProcessLookupError):
            _wait_gone(pid)
        assert run_cli("emulator", "status").exit_code == 1
    finally:
        _kill_quietly(pid)


def test_detach_on_a_busy_port_fails_with_exit_2(config_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        result = run_cli("emulator", "start", "--detach", "--port", str(port))

    line = one_line_error(result, 2)
    assert f"port {port} on 127.0.0.1 is already in use (another program" in line
    assert result.stdout == ""


# -- TLS -------------------------------------------------------------------------------------------
@pytest.fixture
def pki(tmp_path: Path) -> Path:
    folder = tmp_path / "pki"
    certs.init_ca(folder)
    return folder


def _start_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PREFCTL, "emulator", "start", "--port", "0", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_detach_with_a_certificate_for_another_host_is_one_line_exit_2_at_once(
    config_path: Path, pki: Path
) -> None:
    server = certs.issue_server(pki, "example.test")
    data_dir = Path(os.environ["PREFCTL_DATA_DIR"])
    began = time.monotonic()

    started = _start_process(
        "--detach", "--tls-cert", str(server.certificate), "--tls-key", str(server.private_key)
    )

    assert time.monotonic() - began < 15  # not the 30 s readiness wait
    assert started.returncode == 2, started.stderr
    assert started.stdout == ""
    lines = started.stderr.strip().splitlines()
    assert lines == [
        f"error: the TLS certificate {server.certificate} covers example.test, not 127.0.0.1, "
        "the host in profile local's URLs; clients would refuse it — issue one for 127.0.0.1 "
        "with 'prefctl certs issue --server 127.0.0.1', or set --host to a name it covers"
    ]
    assert not config_path.exists()  # no profile local pointing at a server nobody can verify
    assert not (data_dir / "emulator.pid").exists()
    assert not (data_dir / "emulator.log").exists()  # no background process was started


def test_start_on_all_interfaces_needs_a_certificate_for_loopback(
    config_path: Path, pki: Path
) -> None:
    server = certs.issue_server(pki, "example.test")

    started = _start_process(
        *("--host", "0.0.0.0", "--tls-cert", str(server.certificate)),
        *("--tls-key", str(server.private_key)),
    )

    assert started.returncode == 2, started.stderr
    (line,) = started.stderr.strip().splitlines()
    assert "covers example.test, not 127.0.0.1, the loopback host in profile local's URLs " in line
    assert "for --host 0.0.0.0" in line
    assert "prefctl certs issue --server 127.0.0.1" in line
    assert not config_path.exists()


def test_detach_with_a_loopback_certificate_serves_https_that_clients_verify(
    config_path: Path, pki: Path
) -> None:
    server = certs.issue_server(pki, "127.0.0.1")

    started = _start_process(
        "--detach", "--tls-cert", str(server.certificate), "--tls-key", str(server.private_key)
    )

    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("emulator ready at https://127.0.0.1:")
    pid = int(started.stdout.split("(pid ")[1].split(",")[0])
    try:
        local = tomllib.loads(config_path.read_text())["profiles"]["local"]
        assert local["auth_url"].startswith("https://127.0.0.1:")
        assert Path(local["ca_bundle"]) == (pki / "ca.pem").absolute()
        token = run_cli("token", "get")
        assert token.exit_code == 0, token.output
        assert run_cli("emulator", "status").exit_code == 0
        assert run_cli("emulator", "stop").exit_code == 0
    finally:
        _kill_quietly(pid)


def test_status_without_emulator_exits_1(config_path: Path) -> None:
    result = run_cli("emulator", "status")

    assert result.exit_code == 1
    assert result.stdout.startswith("not running")


def test_stop_without_emulator_exits_1(config_path: Path) -> None:
    assert "no emulator is running" in one_line_error(run_cli("emulator", "stop"), 1)


def test_stale_pid_file_is_not_trusted(config_path: Path) -> None:
    data_dir = Path(os.environ["PREFCTL_DATA_DIR"])
    data_dir.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {
        "pid": dead.pid,
        "url": "http://127.0.0.1:1",
        "auth_url": "http://127.0.0.1:1",
        "api_url": "http://127.0.0.1:1/api/v1",
        "data_dir": str(data_dir),
        "started_at": "2026-01-01T00:00:00.000Z",
    }
    (data_dir / "emulator.pid").write_text(json.dumps(record))

    assert run_cli("emulator", "stop").exit_code == 1
    assert not (data_dir / "emulator.pid").exists()


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        os.kill(pid, 0)  # raises ProcessLookupError once it is gone
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            raise ProcessLookupError(pid)
        time.sleep(0.05)


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- support-team operations on the running emulator's store ---------------------------------------
def test_clients_add_prints_the_secret_once_on_stdout(emulator: RunningEmulator) -> None:
    added = run_cli(
        "-o", "json", "emulator", "clients", "add", "--name", "ci", "--token-lifetime", "5"
    )

    assert added.exit_code == 0, added.output
    record = added.json
    assert len(record["client_id"]) == 48
    assert len(record["client_secret"]) == 64
    assert record["token_lifetime_minutes"] == 5
    assert record["auth_method"] == "client_secret"
    assert record["client_secret"] not in added.stderr
    token = get_token(emulator.auth_url, record["client_id"], record["client_secret"])
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 300

    listed = run_cli("-o", "json", "emulator", "clients", "list")
    assert record["client_id"] in [c["client_id"] for c in listed.json]
    assert record["client_secret"] not in listed.stdout
    assert "client_secret" not in listed.json[0]


def test_clients_add_table_shows_the_secret_unwrapped(emulator: RunningEmulator) -> None:
    added = run_cli("emulator", "clients", "add")

    lines = dict(line.split(None, 1) for line in added.stdout.splitlines() if " " in line.strip())
    assert len(lines["client_secret"].strip()) == 64
    assert "shown only now" in added.stderr


def test_clients_add_certificate_registers_without_secret(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    certs.init_ca(tmp_path)
    issued = certs.issue_client(tmp_path, "ci-bot")

    added = run_cli(
        "-o", "json", "emulator", "clients", "add", "--certificate", str(issued.certificate)
    )

    assert added.exit_code == 0, added.output
    assert "client_secret" not in added.json
    assert added.json["auth_method"] == "certificate"
    assert added.json["certificate_thumbprint"] == issued.sha256


def test_clients_add_malformed_certificate_is_one_line_exit_2(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("hello")

    result = run_cli("emulator", "clients", "add", "--certificate", str(bad))

    assert "not a PEM certificate" in one_line_error(result, 2)
    assert result.stdout == ""


def test_users_add_and_list(emulator: RunningEmulator) -> None:
    added = run_cli(
        "-o", "json", "emulator", "users", "add", "reader",
        "--permission", "profiles:read", "-P", "events:read,programs:read",
    )  # fmt: skip

    assert added.exit_code == 0, added.output
    assert added.json["permissions"] == ["profiles:read", "programs:read", "events:read"]
    listed = run_cli("emulator", "users", "list")
    assert "reader" in listed.stdout
    assert "admin" in listed.stdout


def test_users_add_unknown_permission_lists_valid_ones(emulator: RunningEmulator) -> None:
    result = run_cli("emulator", "users", "add", "bob", "--permission", "profiles:delete")

    line = one_line_error(result, 2)
    assert "profiles:delete" in line
    assert "subscriptions:write" in line


def test_revoke_marks_the_token_revoked(emulator: RunningEmulator) -> None:
    account = emulator.account
    token = get_token(emulator.auth_url, account.client_id, account.client_secret)
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]

    result = run_cli("-o", "json", "emulator", "revoke", jti)

    assert result.exit_code == 0, result.output
    assert result.json["revoked"] is True
    assert result.json["scope"] == "DEMO_CORP/admin"
    assert token not in result.output


def test_revoke_unknown_jti_is_exit_4(emulator: RunningEmulator) -> None:
    one_line_error(run_cli("emulator", "revoke", "no-such-jti"), 4)


def test_reset_needs_yes_without_a_terminal(config_path: Path) -> None:
    one_line_error(run_cli("emulator", "reset"), 2)


def test_reset_wipes_the_store(config_path: Path) -> None:
    assert run_cli("emulator", "clients", "list").exit_code == 0  # bootstraps a store
    store = Path(os.environ["PREFCTL_DATA_DIR"]) / "emulator.db"
    assert store.exists()
    mbox = store.parent / "alerts.mbox"  # the recipients' mailbox: what was sent stays sent
    mbox.write_text("From prefctl Thu Jan  1 00:00:00 2026\nSubject: old\n\nold\n")

    result = run_cli("-o", "json", "emulator", "reset", "--yes")

    assert result.exit_code == 0, result.output
    assert result.json["reset"] is True
    assert not store.exists()
    assert mbox.exists()


def test_a_damaged_store_is_one_line_exit_2_not_a_bug_report(config_path: Path) -> None:
    # A store whose pages were damaged on disk: five pages overwritten with random bytes (the
    # same ones every run), found when a command reads them, after the store opened.
    import random

    assert run_cli("emulator", "clients", "list").exit_code == 0  # bootstraps a store
    store = Path(os.environ["PREFCTL_DATA_DIR"]) / "emulator.db"
    with store.open("r+b") as file:
        file.seek(4096 * 3)
        file.write(random.Random(7).randbytes(4096 * 5))

    line = one_line_error(run_cli("emulator", "clients", "list"), 2)

    assert line.startswith("error: the store is damaged: database disk image is malformed")
    assert "bug" not in line
