"""Benchmark the emulator's profile PATCH path (results and targets in docs/performance.md).

One emulator (``prefctl emulator start`` in its own process) on 127.0.0.1 with 10 subscriptions
created directly in its store, Succeeded + Active and pointing to a closed port, each selecting
every event type the PATCHes produce. ``wrk`` with ``bench/api_patch.lua`` then sends merge
patches to a pool of profiles; each PATCH authenticates its Bearer token, applies and validates the
patch, computes 5 events and writes the profile, the events and 50 deliveries in one transaction.
Deliveries just queue: the emulator's embedded dispatcher runs, as under ``prefctl emulator
start``, finds the port closed and puts the endpoint on probation, so it retries rarely. Its CPU
is part of the figure (``--no-dispatcher`` leaves it out, to see what it costs: about 0.05 ms per
PATCH when measured).

Printed: PATCH requests/s, p50/p90/p99 latency, non-2xx answers, the events and deliveries the
store gained per PATCH (a check that event generation and fan-out really ran), the server's CPU
per request, and that CPU per thread group (event loop, thread pool, dispatcher; the server runs
through ``serve_emulator``, which names the OS threads) and in the writer process. Target:
≥ 500 PATCH/s on this 2-core machine.

``--py-spy PATH`` samples the server with py-spy during the run and prints the functions holding
most of the samples (own time and inclusive), the profile that guided the hot-path work.

``--postgres`` runs the emulator on a throwaway PostgreSQL cluster (scripts/pg_cluster.py) and
prints that server's CPU per PATCH too; ``--store postgresql://…`` on a new database of a server
of yours. The emulator finds the database in ``PREFCTL_STORE``, so every other start option
combines with it.

Needs wrk on PATH. Run: ``.venv/bin/python bench/api.py [--duration 10] [--connections 16]
[--json] [--no-dispatcher] [--workers N] [--py-spy /path/to/py-spy]``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _common import (
    add_store_options,
    backend_name,
    child_pids,
    cpu_seconds,
    database_cpu_seconds,
    free_port,
    fresh_database,
    own_cpu_seconds,
    postgres_server,
)

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "bench" / "api_patch.lua"
SUBSCRIPTIONS = 10
PROFILES = 200
EVENT_TYPES = (
    ("Profile", "profile.updated"),
    ("Profile", "profile.updatedfull"),
    ("StandardFields", "standardfield.firstname.updated"),
    ("Tags", "tag.added"),
    ("Tags", "tag.deleted"),
)


@dataclass
class Result:
    connections: int
    patches_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int
    events_per_patch: float
    deliveries_per_patch: float
    server_cpu_ms_per_patch: float
    # Server CPU ms per PATCH by thread group (THREAD_GROUPS): what the dispatcher takes apart.
    thread_cpu_ms_per_patch: dict[str, float]
    # The PostgreSQL server's CPU ms per PATCH (--postgres: a cluster started here), else None.
    db_cpu_ms_per_patch: float | None = None


def prepare_store(data_dir: Path, store: str | None = None) -> dict[str, str]:
    """Bootstrap the account and add the subscriptions, in the data dir's SQLite store or the
    PostgreSQL database ``store``; returns the local credentials."""
    from prefctl.clock import SystemClock
    from prefctl.emulator import admin
    from prefctl.store import subscriptions
    from prefctl.store.db import transaction

    clock = SystemClock()
    closed_port = free_port()  # nothing listens there
    with admin.open_admin_store(data_dir, store) as conn:
        boot = admin.bootstrap(conn, clock)
        account = boot.account.service_client_id
        now = clock.now().timestamp()
        with transaction(conn):
            for number in range(SUBSCRIPTIONS):
                record = subscriptions.create_subscription(
                    conn,
                    account,
                    {
                        "Name": f"bench-{number}",
                        "Url": f"http://127.0.0.1:{closed_port}/hook/{number}",
                        "State": "Active",
                        "CatchUpOnResume": False,
                        "Subscriptions": [
                            {"Entity": entity, "EventType": event_type}
                            for entity, event_type in EVENT_TYPES
                        ],
                    },
                    actor="bench",
                    now=now,
                )
                subscriptions.set_provisioning_state(conn, record.id, "Succeeded", now=now)
    creds = boot.credentials
    return {
        "account": account,
        "user_id": creds.user_id,
        "client_id": creds.client_id,
        "client_secret": creds.client_secret,
    }


def start_emulator(
    data_dir: Path, port: int, config: Path, *, dispatcher: bool = True, workers: int = 1
) -> subprocess.Popen[bytes]:
    """``prefctl emulator start`` in its own process, through ``serve_emulator`` (below)."""
    env = {**os.environ, "PREFCTL_CONFIG": str(config)}
    command = [sys.executable, __file__, "--serve"]
    command += [] if dispatcher else ["--no-dispatcher"]
    command += ["--", "-q", "emulator", "start", "--port", str(port), "--data-dir", str(data_dir)]
    command += ["--workers", str(workers)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the emulator exited early with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the emulator did not become ready in 30 s")


def request(method: str, url: str, body: Any, headers: dict[str, str]) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    call = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(call, timeout=10) as answer:
        return json.loads(answer.read() or b"null")


def token(base: str, creds: dict[str, str]) -> str:
    import base64

    basic = base64.b64encode(f"{creds['client_id']}:{creds['client_secret']}".encode()).decode()
    form = f"grant_type=client_credentials&scope={creds['account']}/{creds['user_id']}".encode()
    answer = request(
        "POST",
        f"{base}/oauth2/v1/token",
        form,
        {"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"},
    )
    return str(answer["access_token"])


def create_profiles(api: str, bearer: str, count: int) -> list[int]:
    headers = {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"}
    profile = {
        "CustomerName": {"FirstName": "Ann", "LastName": "Lee"},
        "Emails": [{"Address": "ann@example.com", "IsDefault": True}],
        "ProfilePreferences": [
            {
                "Program": "Newsletter",
                "Filter": "Weekly Digest",
                "Channel": "Email",
                "Status": "OptIn",
            }
        ],
        "Tags": ["start"],
    }
    return [request("POST", f"{api}/profiles", profile, headers)["ProfileId"] for _ in range(count)]


def run_wrk(url: str, args: list[str], connections: int, duration: float) -> dict[str, int]:
    command = [
        "wrk",
        f"-t{min(2, connections)}",
        f"-c{connections}",
        f"-d{duration:g}s",
        "--timeout",
        "5s",
    ]
    command += ["-s", str(LUA), url, "--", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    for line in done.stdout.splitlines():
        if line.startswith("WRK_JSON "):
            return dict(json.loads(line[len("WRK_JSON ") :]))
    raise SystemExit(f"no summary from wrk:\n{done.stdout}\n{done.stderr}")


def store_counts(store: Path | str) -> tuple[int, int, int]:
    """(PATCHes written, events, deliveries) in the store at ``store`` (a SQLite path or a
    PostgreSQL URL): each PATCH writes one profile.updated."""
    from prefctl.store.db import connect

    conn = connect(store)
    try:
        patches = conn.execute(
            "SELECT count(*) FROM events WHERE event_type = 'profile.updated'"
        ).fetchone()[0]
        events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        deliveries = conn.execute("SELECT count(*) FROM deliveries").fetchone()[0]
    finally:
        conn.close()
    return int(patches), int(events), int(deliveries)


# Threads of the emulator by the name ``serve_emulator`` gives them (a prefix is enough).
THREAD_GROUPS = (
    ("dispatcher", "prefctl-dispatc"),
    ("event loop", "MainThread"),
    ("thread pool", "AnyIO worker"),
    ("writer", "prefctl-writer"),  # the writer thread of earlier versions
)
WRITER_PROCESS = "writer process"
WORKER_PROCESSES = "API worker processes"  # with --workers N: each serves the API


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds so far per THREAD_GROUPS entry ("other" for the rest) of process ``pid``,
    and of its child processes as "writer process"."""
    spent: collections.Counter[str] = collections.Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        group = next((label for label, prefix in THREAD_GROUPS if name.startswith(prefix)), "other")
        spent[group] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for child in child_pids(pid):
        try:
            worker = b"prefctl.emulator.workers" in Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue  # it ended
        spent[WORKER_PROCESSES if worker else WRITER_PROCESS] += own_cpu_seconds(child)
        if worker:
            spent[WRITER_PROCESS] += sum(own_cpu_seconds(c) for c in child_pids(child))
    return dict(spent)


def serve_emulator(argv: list[str]) -> None:
    """``python bench/api.py --serve [--no-dispatcher] -- ARGS``: ``prefctl ARGS`` in this
    process, the same as ``python -m prefctl ARGS``, with each thread's OS name set to its Python
    name (so that ``thread_cpu_seconds`` can tell the dispatcher from the API).
    ``--no-dispatcher`` leaves the embedded dispatcher out, to measure what it costs."""
    import threading

    separator = argv.index("--")
    if "--no-dispatcher" in argv[:separator]:
        from prefctl.emulator import dispatcher_service as service

        service.register = lambda app, ctx: None
        from prefctl.emulator import workers  # --workers N: the supervisor runs it

        workers._start_dispatcher = lambda ctx: None  # type: ignore[attr-defined]

    def name_threads() -> None:
        named: set[int] = set()
        while True:  # threads come and go (the thread pool, the writer): name the new ones
            for thread in threading.enumerate():
                if thread.native_id is not None and thread.native_id not in named:
                    named.add(thread.native_id)
                    with contextlib.suppress(OSError):
                        comm = Path(f"/proc/self/task/{thread.native_id}/comm")
                        comm.write_text(thread.name[:15])
            time.sleep(0.5)

    threading.Thread(target=name_threads, name="bench-names", daemon=True).start()
    from prefctl.cli.app import run

    sys.exit(run(argv[separator + 1 :]))


# Where a PATCH's time goes: each component is the first of these functions found in a sample's
# stack, looked up from the innermost frame out (so a store call inside the writer counts as the
# store call). Everything else is the HTTP server, the framework and thread hand-offs.
COMPONENTS = (
    ("COMMIT / BEGIN (store.db.transaction)", "transaction (prefctl/store/db.py"),
    ("add_deliveries (fan-out rows)", "add_deliveries (prefctl/store/deliveries.py"),
    ("insert_events", "insert_events (prefctl/store/events.py"),
    ("save_profile", "save_profile (prefctl/store/profiles.py"),
    ("get_profile", "get_profile (prefctl/store/profiles.py"),
    (
        "fan-out: targets and matching (emulator/fanout.py)",
        "deliveries (prefctl/emulator/fanout.py",
    ),
    ("events_for_change (event generation)", "events_for_change (prefctl/emulator/changes.py"),
    ("route: patch, validate, dump (routes/profiles.py)", "change (prefctl/emulator/routes/"),
    ("authenticate_bearer (JWT + token checks)", "authenticate_bearer (prefctl/emulator/oauth.py"),
    ("ProfileWriter other (copy, prepare)", "ProfileWriter."),
)


def _frames(stack: str) -> list[str]:
    return [frame.split(" (")[0] + " (" + frame.split(" (")[-1] for frame in stack.split(";")]


def hot_functions(raw: Path, top: int = 20) -> list[tuple[str, float, float]]:
    """(function, own %, inclusive %) from py-spy's raw (collapsed stacks) output."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = _frames(stack)
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    ranked = sorted(inclusive, key=lambda f: own[f], reverse=True)[:top]
    return [(f, 100 * own[f] / total, 100 * inclusive[f] / total) for f in ranked]


def components(raw: Path) -> list[tuple[str, float]]:
    """Share of the samples per COMPONENTS entry (the rest: server, framework, hand-offs)."""
    shares: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = _frames(stack)
        name = "HTTP server, framework, thread hand-offs"
        for frame in reversed(frames):
            match = next((label for label, key in COMPONENTS if key in frame), None)
            if match is not None:
                name = match
                break
        shares[name] += count
    return [(name, 100 * count / max(total, 1)) for name, count in shares.most_common()]


@contextlib.contextmanager
def store_location(server: str | None) -> Iterator[str | None]:
    """A new database on the PostgreSQL ``server`` for the emulator, which ``emulator start``
    finds in PREFCTL_STORE (as a user's shell would set it); None and nothing set for SQLite."""
    if server is None:
        yield None
        return
    with fresh_database(server) as url:
        os.environ["PREFCTL_STORE"] = url
        try:
            yield url
        finally:
            del os.environ["PREFCTL_STORE"]


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve_emulator(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--connections", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="emulator start --workers N: API processes on the port (the dispatcher runs in the "
        "supervising process, whose threads are then the ones named by thread)",
    )
    parser.add_argument(
        "--no-dispatcher",
        action="store_true",
        help="run the emulator without its embedded dispatcher (by default it runs, as with "
        "prefctl emulator start, and retries the closed port: its CPU is part of the figure)",
    )
    add_store_options(parser)
    parser.add_argument("--py-spy", help="path to py-spy: sample the server during the run")
    parser.add_argument("--py-spy-raw", help="keep py-spy's collapsed stacks in this file")
    options = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not on PATH (Debian: apt-get install -y wrk)")

    with (
        tempfile.TemporaryDirectory(prefix="prefctl-bench-api-") as tmp_name,
        postgres_server(options) as pg_server,
        store_location(pg_server) as postgres,
    ):
        tmp = Path(tmp_name)
        data_dir = tmp / "data"
        location = postgres or data_dir / "emulator.db"
        creds = prepare_store(data_dir, postgres)
        port = free_port()
        server = start_emulator(
            data_dir,
            port,
            tmp / "profiles.toml",
            dispatcher=not options.no_dispatcher,
            workers=options.workers,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            bearer = token(base, creds)
            api = f"{base}/api/v1/{creds['account']}"
            ids = create_profiles(api, bearer, PROFILES)
            wrk_args = [bearer, f"/api/v1/{creds['account']}/profiles", ",".join(map(str, ids))]
            run_wrk(base, wrk_args, options.connections[0], 2)  # warm-up
            results = []
            spy = None
            for connections in options.connections:
                before = store_counts(location)
                db_before = database_cpu_seconds(postgres)
                cpu_before = cpu_seconds(server.pid)
                threads_before = thread_cpu_seconds(server.pid)
                if options.py_spy and spy is None:
                    raw = tmp / "py-spy.txt"
                    spy = subprocess.Popen(
                        [
                            options.py_spy,
                            "record",
                            "--gil",
                            "--subprocesses",  # the writer process
                            "--pid",
                            str(server.pid),
                            "--format",
                            "raw",
                            "--duration",
                            str(int(options.duration)),
                            "--rate",
                            "200",
                            "--output",
                            str(raw),
                            "--nonblocking",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                stats = run_wrk(base, wrk_args, connections, options.duration)
                cpu = cpu_seconds(server.pid) - cpu_before
                threads_after = thread_cpu_seconds(server.pid)
                after = store_counts(location)
                db_after = database_cpu_seconds(postgres)
                written = max(after[0] - before[0], 1)
                ok = stats["requests"] - stats["status_errors"]
                seconds = stats["duration_us"] / 1e6
                results.append(
                    Result(
                        connections=connections,
                        patches_per_s=round(ok / seconds, 1),
                        p50_ms=round(stats["p50_us"] / 1000, 2),
                        p90_ms=round(stats["p90_us"] / 1000, 2),
                        p99_ms=round(stats["p99_us"] / 1000, 2),
                        non_2xx=stats["status_errors"],
                        socket_errors=stats["connect_errors"]
                        + stats["read_errors"]
                        + stats["write_errors"]
                        + stats["timeouts"],
                        events_per_patch=round((after[1] - before[1]) / written, 2),
                        deliveries_per_patch=round((after[2] - before[2]) / written, 2),
                        server_cpu_ms_per_patch=round(1000 * cpu / max(stats["requests"], 1), 3),
                        thread_cpu_ms_per_patch={
                            group: round(
                                1000
                                * (spent - threads_before.get(group, 0.0))
                                / max(stats["requests"], 1),
                                3,
                            )
                            for group, spent in sorted(threads_after.items())
                        },
                        db_cpu_ms_per_patch=None
                        if db_before is None or db_after is None
                        else round(1000 * (db_after - db_before) / max(stats["requests"], 1), 3),
                    )
                )
            hot: list[tuple[str, float, float]] = []
            parts: list[tuple[str, float]] = []
            if spy is not None:
                spy.wait(timeout=60)
                hot = hot_functions(tmp / "py-spy.txt")
                parts = components(tmp / "py-spy.txt")
                if options.py_spy_raw:
                    shutil.copyfile(tmp / "py-spy.txt", options.py_spy_raw)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)

    if options.json:
        print(
            json.dumps(
                {"results": [asdict(r) for r in results], "components": parts, "hot": hot},
                indent=2,
            )
        )
        return
    print(
        f"profile PATCH with event generation and fan-out to {SUBSCRIPTIONS} subscriptions, "
        f"{options.workers} API worker(s)"
    )
    print(
        f"{'conns':>5} {'PATCH/s':>8} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'non2xx':>6}"
        f" {'events/PATCH':>12} {'deliv/PATCH':>11} {'cpu ms/PATCH':>12}"
    )
    for r in results:
        print(
            f"{r.connections:>5} {r.patches_per_s:>8} {r.p50_ms:>7} {r.p90_ms:>7} {r.p99_ms:>7}"
            f" {r.non_2xx:>6} {r.events_per_patch:>12} {r.deliveries_per_patch:>11}"
            f" {r.server_cpu_ms_per_patch:>12}"
        )
    print(
        "server CPU ms per PATCH by thread: "
        + "; ".join(
            f"{r.connections} conns: "
            + ", ".join(f"{group} {ms}" for group, ms in r.thread_cpu_ms_per_patch.items())
            for r in results
        )
    )
    print(f"store: {backend_name(postgres)}")
    if any(r.db_cpu_ms_per_patch is not None for r in results):
        print(
            "PostgreSQL server CPU ms per PATCH: "
            + "; ".join(f"{r.connections} conns: {r.db_cpu_ms_per_patch}" for r in results)
        )
    target = "met" if max(r.patches_per_s for r in results) >= 500 else "NOT met"
    print(f"target ≥ 500 PATCH/s: {target}")
    if parts:
        print("\nwhere the server's time goes (py-spy, GIL-holding samples, first run):")
        for name, share in parts:
            print(f"{share:6.1f} %  {name}")
    if hot:
        print("\nhottest functions (same samples): own %  inclusive %")
        for function, own_share, inclusive_share in hot:
            print(f"{own_share:6.1f} {inclusive_share:6.1f}  {function}")


if __name__ == "__main__":
    main()
