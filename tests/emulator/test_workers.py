"""``prefctl emulator start --workers N``: real processes on 127.0.0.1, found by their pids."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.cli.test_emulator import get_token, one_line_error, read_line
from tests.helpers import free_port, run_cli, wait_until

PREFCTL = [sys.executable, "-m", "prefctl"]


@dataclass
class Started:
    proc: subprocess.Popen[str]
    ready: dict[str, object]
    data_dir: Path
    config: Path
    stderr: Path

    @property
    def url(self) -> str:
        return str(self.ready["url"])

    def status(self) -> dict[str, object]:
        result = run_cli("-o", "json", "emulator", "status", "--data-dir", str(self.data_dir))
        return dict(json.loads(result.stdout))

    def worker_pids(self) -> set[int]:
        return {int(pid) for pid in self.status()["worker_pids"]}  # type: ignore[attr-defined]

    def credentials(self) -> tuple[str, str]:
        import tomllib

        local = tomllib.loads(self.config.read_text())["profiles"]["local"]
        return local["client_id"], local["client_secret"]


def start(home: Path, workers: int = 2, *, own_group: bool = False) -> Started:
    data_dir, config, stderr = home / "data", home / "profiles.toml", home / "stderr.log"
    command = [*PREFCTL, "--config", str(config), "-o", "json", "emulator", "start"]
    command += ["--port", str(free_port()), "--data-dir", str(data_dir)]
    command += ["--workers", str(workers)]
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=own_group,  # a process group of its own, as in a terminal
        )
    try:
        ready = json.loads(read_line(proc, timeout=60))
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise
    return Started(proc, ready, data_dir, config, stderr)


def finish(started: Started) -> None:
    everyone = [started.proc.pid, *descendants(started.proc.pid)]
    if started.proc.poll() is None:
        started.proc.terminate()
        started.proc.wait(30)
    for pid in everyone:  # whatever a failed test left behind
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def descendants(pid: int) -> list[int]:
    """The pids of ``pid``'s children, grandchildren, … (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def worker_of(client: httpx.Client, url: str) -> int:
    health = client.get(url + "/healthz").json()
    return int(health["worker_pid"])


def clients_on_each_worker(url: str, workers: set[int]) -> dict[int, httpx.Client]:
    """One keep-alive client per worker: new connections until each worker has answered one
    (the kernel spreads connections by a hash of their addresses; bounded)."""
    clients: dict[int, httpx.Client] = {}
    for _ in range(200):
        client = httpx.Client(timeout=10, trust_env=False)
        pid = worker_of(client, url)
        if pid in clients:
            client.close()
        else:
            clients[pid] = client
        if set(clients) == workers:
            return clients
    raise AssertionError(f"connections reached only workers {sorted(clients)} of {workers}")


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    started = start(tmp_path_factory.mktemp("workers"))
    try:
        yield started
    finally:
        finish(started)


# -- validation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", ["0", "-1"])
def test_workers_below_one_is_a_usage_error_exit_2(tmp_path: Path, count: str) -> None:
    result = run_cli(
        "emulator", "start", "--workers", count, "--port", "0", "--data-dir", str(tmp_path / "d")
    )

    line = one_line_error(result, 2)
    assert f"--workers must be 1 to 64, not {count}" in line
    assert not (tmp_path / "d").exists()


# -- serving ---------------------------------------------------------------------------------------
def test_workers_ready_line_and_status_name_the_workers(two_workers: Started) -> None:
    status = two_workers.status()
    pids = two_workers.worker_pids()

    assert two_workers.ready["workers"] == 2
    assert two_workers.ready["pid"] == two_workers.proc.pid
    assert status["state"] == "running"
    assert status["workers"] == 2
    assert status["pid"] == two_workers.proc.pid
    assert len(pids) == 2
    assert pids <= set(descendants(two_workers.proc.pid))
    text = run_cli("emulator", "status", "--data-dir", str(two_workers.data_dir)).stdout
    assert text.strip().endswith("2 API workers)")


def test_workers_new_connections_are_spread_over_every_worker(two_workers: Started) -> None:
    workers = two_workers.worker_pids()

    clients = clients_on_each_worker(two_workers.url, workers)

    for pid, client in clients.items():
        health = client.get(two_workers.url + "/healthz").json()
        assert health["pid"] == two_workers.proc.pid  # the emulator's, whichever worker answers
        assert health["worker_pid"] == pid
        client.close()


def test_workers_token_from_one_worker_works_on_another_and_writes_are_shared(
    two_workers: Started,
) -> None:
    url = two_workers.url
    clients = clients_on_each_worker(url, two_workers.worker_pids())
    first, second = clients.values()
    client_id, secret = two_workers.credentials()
    issued = first.post(
        url + "/oauth2/v1/token",
        data={"grant_type": "client_credentials", "scope": "DEMO_CORP/admin"},
        auth=(client_id, secret),
    )
    assert issued.status_code == 200, issued.text
    bearer = {"Authorization": f"Bearer {issued.json()['access_token']}"}
    profiles = f"{url}/api/v1/DEMO_CORP/profiles"
    body = {"CustomerName": {"FirstName": "Ann", "LastName": "Lee"}}

    made_on_second = second.post(profiles, json=body, headers=bearer)
    made_on_first = first.post(profiles, json=body, headers=bearer)
    read_on_first = first.get(f"{profiles}/{made_on_second.json()['ProfileId']}", headers=bearer)
    read_on_second = second.get(f"{profiles}/{made_on_first.json()['ProfileId']}", headers=bearer)

    assert made_on_second.status_code == made_on_first.status_code == 201
    assert read_on_first.status_code == read_on_second.status_code == 200
    assert read_on_first.json()["CustomerName"]["FirstName"] == "Ann"
    pinned = {worker_of(client, url): client for client in (first, second)}
    assert len(pinned) == 2  # each client stayed on its worker throughout
    for client in clients.values():
        client.close()


def test_workers_concurrent_patches_through_both_workers_all_land(two_workers: Started) -> None:
    """On SQLite the workers' writer processes take turns on the store's write lock: every
    PATCH is answered 200 and stored, none lost to "database is locked"."""
    from concurrent.futures import ThreadPoolExecutor

    url = two_workers.url
    client_id, secret = two_workers.credentials()
    bearer = {"Authorization": f"Bearer {get_token(url, client_id, secret)}"}
    profiles = f"{url}/api/v1/DEMO_CORP/profiles"
    with httpx.Client(timeout=30, trust_env=False) as client:
        made = client.post(profiles, json={"Tags": []}, headers=bearer)
        profile = f"{profiles}/{made.json()['ProfileId']}"

    def patch(number: int) -> int:
        with httpx.Client(timeout=30, trust_env=False) as fresh:  # a new connection: any worker
            answer = fresh.patch(
                profile,
                content=json.dumps({"Tags": [f"t{number}"]}),
                headers={**bearer, "Content-Type": "application/merge-patch+json"},
            )
            return answer.status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(patch, range(40)))

    assert codes == [200] * 40
    with sqlite3.connect(two_workers.data_dir / "emulator.db") as store:  # inspected from outside
        (updates,) = store.execute(
            "SELECT count(*) FROM events WHERE event_type = 'profile.updated'"
        ).fetchone()
    assert updates == 40


# -- failures and stopping -------------------------------------------------------------------------
@pytest.mark.slow
def test_workers_a_killed_worker_is_reported_and_replaced_then_stop_leaves_no_process(
    tmp_path: Path,
) -> None:
    started = start(tmp_path)
    try:
        before = started.worker_pids()
        victim = min(before)
        os.kill(victim, signal.SIGKILL)

        wait_until(
            lambda: victim not in started.worker_pids() and len(started.worker_pids()) == 2,
            timeout=60,
            what="a new worker in the pid file",
        )
        replaced = started.worker_pids()
        assert all(alive(pid) for pid in replaced)
        clients_on_each_worker(started.url, replaced)  # the new one serves
        everyone = [started.proc.pid, *descendants(started.proc.pid)]
        assert len(everyone) == 5  # supervisor, two workers, their two writer processes

        stopped = run_cli("emulator", "stop", "--data-dir", str(started.data_dir))

        assert stopped.exit_code == 0, stopped.output
        assert started.proc.wait(30) == 0
        assert [pid for pid in everyone if alive(pid)] == []
        log = started.stderr.read_text()
        assert (
            f"API worker 1 of 2 (pid {victim}) was killed by SIGKILL; starting a new one" in (log)
            or f"API worker 2 of 2 (pid {victim}) was killed by SIGKILL; starting a new one" in log
        )
        assert "Traceback" not in log
    finally:
        finish(started)


@pytest.mark.slow
def test_workers_ctrl_c_in_a_terminal_stops_every_process_with_exit_0(tmp_path: Path) -> None:
    started = start(tmp_path, own_group=True)
    try:
        everyone = [started.proc.pid, *descendants(started.proc.pid)]
        assert len(everyone) == 5

        os.killpg(started.proc.pid, signal.SIGINT)  # what Ctrl-C sends: to the whole group

        assert started.proc.wait(30) == 0
        wait_until(lambda: not any(alive(pid) for pid in everyone), what="every process to exit")
        log = started.stderr.read_text()
        assert "Traceback" not in log
        assert "ERROR" not in log  # no worker reported as dead: they were stopped
        assert not (started.data_dir / "emulator.pid").exists()
    finally:
        finish(started)


@pytest.mark.slow
def test_workers_stop_by_themselves_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    started = start(tmp_path)
    try:
        everyone = descendants(started.proc.pid)
        assert len(everyone) == 4

        started.proc.kill()
        started.proc.wait(10)

        wait_until(
            lambda: not any(alive(pid) for pid in everyone),
            timeout=30,
            what="the workers and their writer processes to exit",
        )
    finally:
        finish(started)


@pytest.mark.slow
def test_workers_that_cannot_start_fail_the_start_with_their_one_line_error(
    tmp_path: Path,
) -> None:
    from prefctl import certs

    pki = tmp_path / "pki"
    certs.init_ca(pki)
    server = certs.issue_server(pki, "127.0.0.1")
    other = certs.issue_client(pki, "other")
    command = [*PREFCTL, "--config", str(tmp_path / "profiles.toml"), "emulator", "start"]
    command += ["--port", "0", "--data-dir", str(tmp_path / "data"), "--workers", "2"]
    command += ["--tls-cert", str(server.certificate), "--tls-key", str(other.private_key)]

    done = subprocess.run(command, capture_output=True, text=True, timeout=120)

    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: cannot use ")
    assert done.stdout == ""
    assert not (tmp_path / "profiles.toml").exists()  # written only once the workers serve
    assert not (tmp_path / "data" / "emulator.pid").exists()


@pytest.mark.slow
def test_workers_detached_report_ready_and_stop_with_their_processes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    command = [*PREFCTL, "--config", str(tmp_path / "profiles.toml"), "-o", "json", "emulator"]
    command += ["start", "--detach", "--workers", "2", "--port", str(free_port())]
    command += ["--data-dir", str(data_dir)]
    started = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert started.returncode == 0, started.stderr
    ready = json.loads(started.stdout)
    everyone = [int(ready["pid"]), *descendants(int(ready["pid"]))]
    try:
        assert ready["workers"] == 2
        assert len(everyone) == 5

        stopped = run_cli("emulator", "stop", "--data-dir", str(data_dir))

        assert stopped.exit_code == 0, stopped.output
        assert [pid for pid in everyone if alive(pid)] == []
    finally:
        for pid in everyone:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def socket_owner(port: int, candidates: list[int]) -> int | None:
    """Which of ``candidates`` holds the TCP socket whose local port is ``port`` (/proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    for pid in candidates:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return pid
    return None


@pytest.mark.slow
def test_workers_deliveries_of_writes_through_every_worker_go_out_from_the_one_dispatcher(
    tmp_path: Path,
) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prefctl.clock import SystemClock
    from prefctl.emulator import admin
    from prefctl.store import subscriptions
    from prefctl.store.db import transaction

    senders: list[int | None] = []
    event_ids: list[str] = []
    everyone: list[int] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            senders.append(socket_owner(self.client_address[1], everyone))
            event_ids.extend(e["EventId"] for e in (body if isinstance(body, list) else [body]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    with admin.open_admin_store(tmp_path / "data") as conn:
        account = admin.bootstrap(conn, SystemClock()).account.service_client_id
        with transaction(conn):
            record = subscriptions.create_subscription(
                conn,
                account,
                {
                    "Name": "workers",
                    "Url": f"http://127.0.0.1:{receiver.server_address[1]}/hook",
                    "State": "Active",
                    "Subscriptions": [{"Entity": "Profile", "EventType": "profile.created"}],
                },
                actor="test",
                now=time.time(),
            )
            subscriptions.set_provisioning_state(conn, record.id, "Succeeded", now=time.time())
    started = start(tmp_path)
    try:
        everyone += [started.proc.pid, *descendants(started.proc.pid)]
        workers = started.worker_pids()
        clients = clients_on_each_worker(started.url, workers)
        client_id, secret = started.credentials()
        bearer = {"Authorization": f"Bearer {get_token(started.url, client_id, secret)}"}
        for client in clients.values():
            for _ in range(3):
                made = client.post(
                    f"{started.url}/api/v1/{account}/profiles", json={"Tags": []}, headers=bearer
                )
                assert made.status_code == 201, made.text

        wait_until(lambda: len(event_ids) >= 6, timeout=60, what="six deliveries")

        assert len(set(event_ids)) == 6
        assert set(senders) == {started.proc.pid}  # the supervisor, never a worker
    finally:
        receiver.shutdown()
        finish(started)
