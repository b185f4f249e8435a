"""Benchmark the dispatcher (results and targets in docs/performance.md).

With MaxConcurrentRequests 5000 and Duration 1, in one process (this one): queue N events in a
temporary store, then run the real engine (``dispatcher.run``, ``--once``: claims, check_due,
probation, bodies, a fresh signature per attempt, libcurl, one results transaction per cycle)
until all are delivered. Three targets, in the same run:

- ``nginx``: nginx answering 200 to everything, one worker, its own config on a free port
  (the machine's ceiling for the receiving side);
- ``receive``: ``prefctl -o json receive`` with signature verification on, its NDJSON to a file;
- ``slow-1s``: an endpoint on a thread of this process that answers every POST after 1 s, with
  MaxConcurrentRequests 500: deliveries/s and the most requests it held at once ("peak in
  flight"; target: it reaches the setting and never exceeds it).

Printed: deliveries/s over the run (delivered / time from the first cycle to the last result
recorded: with 5000 per 1 s cycle its ceiling is N / (N/5000 − 1 + the last cycle's time)), the
steady rate (between results batches, leaving out the first and last 1.5 s), cycles, resident memory of this process with the whole queue in the store (before the
run, once warm after two batches, at its peak and at the end: the queue is never loaded into
memory, so it stays flat whatever its length), the 1-minute load average (the machine is shared),
the dispatcher's CPU time per delivery (this process: it does not depend on what else runs), and
the checks (every delivery delivered; the receiver verified every signature).

Target (docs/performance.md): ≥ 5,000 deliveries/s into nginx and into ``prefctl receive`` (the spec's
maximum: 5000 per 1 s cycle); against the 1 s endpoint a peak in flight of exactly 500.

Needs nginx on PATH for the first target (Debian: ``apt-get install -y nginx``); this script does
not install it and skips that target with a note when it is missing.
On PostgreSQL (docs/performance.md, "Team sandbox on PostgreSQL"): ``--postgres`` starts a
throwaway cluster (scripts/pg_cluster.py) and also prints its server's CPU per delivery;
``--store postgresql://…`` uses a server of yours (a new database per target, dropped after).
``--accounts N`` deals the events to N accounts, each with its own ceiling; ``--dispatchers N``
runs N dispatcher processes at once on the store (this script with ``--engine``): deliveries/s
is then their total, from the first one's first cycle to the last result, and CPU per delivery
the sum of theirs.

Run: ``.venv/bin/python bench/dispatcher.py [--events 100000] [--receiver-events 50000]
[--slow-events 5000] [--targets nginx receive slow-1s] [--accounts N] [--dispatchers N]
[--postgres | --store URL] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from _common import (
    add_store_options,
    backend_name,
    database_cpu_seconds,
    free_port,
    fresh_database,
    own_cpu_seconds,
    postgres_server,
    start_nginx,
    wait_healthy,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

ACCOUNT = "BENCH_CORP"
SIGNATURE_USER_ID = "bench-signer"
HASHKEY = "bench-hashkey-0123456789abcdef0123456789abcdef"
HASHKEY_ENV = "PREFCTL_BENCH_HASHKEY"


@dataclass
class Result:
    target: str
    backend: str  # SQLite or PostgreSQL
    dispatchers: int  # processes sharing the queue (one: this process)
    accounts: int
    events: int
    delivered: int
    seconds: float
    deliveries_per_s: float
    steady_per_s: float
    cycles: int
    largest_batch: int
    rss_start_mib: float
    rss_warm_mib: float
    rss_peak_mib: float
    rss_end_mib: float
    load_average: float
    max_concurrent_requests: int
    cpu_us_per_delivery: float  # the dispatcher processes, user + system
    # The PostgreSQL server's CPU (postmaster and backends) per delivery, when it is a throwaway
    # cluster of --postgres: on PostgreSQL the store's work is there, not in the dispatcher.
    db_cpu_us_per_delivery: float | None = None
    peak_in_flight: int | None = None  # as the endpoint saw it (the slow endpoint only)
    checks: dict[str, Any] = field(default_factory=dict)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def account_name(number: int, accounts: int) -> str:
    """The ``number``-th of ``accounts`` bench accounts (one: plain ``ACCOUNT``)."""
    return ACCOUNT if accounts == 1 else f"{ACCOUNT}_{number + 1}"


def make_store(
    location: Path | str, url: str, events: int, max_concurrent: int = 5000, accounts: int = 1
) -> None:
    """A store (a SQLite path or a PostgreSQL URL) with ``accounts`` accounts (each with
    MaxConcurrentRequests ``max_concurrent``, Duration 1, and one subscription to ``url``) and
    ``events`` queued profile.created events of about 1 KB, dealt to the accounts in turn."""
    from prefctl.store import deliveries, subscriptions
    from prefctl.store import events as event_store
    from prefctl.store.accounts import Account, add_account
    from prefctl.store.db import connect, transaction
    from prefctl.store.migrations import migrate
    from prefctl.store.settings import update_settings

    now = time.time()
    conn = connect(location)
    migrate(conn)
    body = {
        "Name": "bench",
        "Url": url,
        "State": "Active",
        "CatchUpOnResume": False,
        "Subscriptions": [{"Entity": "Profile", "EventType": "profile.created"}],
        "Alerts": {"Enabled": False, "Recipients": []},
    }
    subscription_ids = []
    with transaction(conn):
        for number in range(accounts):
            name = account_name(number, accounts)
            add_account(conn, Account(name, HASHKEY, SIGNATURE_USER_ID, created_at=now))
            settings = {"MaxConcurrentRequests": max_concurrent, "Duration": 1}
            update_settings(conn, name, settings)
            record = subscriptions.create_subscription(conn, name, body, actor="bench", now=now)
            subscriptions.set_provisioning_state(conn, record.id, "Succeeded", now=now)
            subscription_ids.append(record.id)
    filler = "x" * 700
    for start in range(0, events, 10_000):
        for number in range(accounts):
            batch = [
                event_store.NewEvent(
                    event_id=f"00000000-0000-4000-8000-{n:012d}",
                    event_type="profile.created",
                    entity="Profile",
                    profile_id=100_000 + n,
                    original_event_time=now,
                    data={
                        "ProfileId": 100_000 + n,
                        "Emails": [{"Address": f"p{n}@example.com"}],
                        "Notes": filler,
                    },
                )
                for n in range(start, min(start + 10_000, events))
                if n % accounts == number
            ]
            with transaction(conn):
                name = account_name(number, accounts)
                rowids = event_store.insert_events(conn, name, batch)
                subscription_id = subscription_ids[number]
                deliveries.add_deliveries(
                    conn, [deliveries.NewDelivery(r, subscription_id) for r in rowids], now=now
                )
    conn.close()


class Meter:
    """An engine observer: deliveries per results batch and this process's memory (after the
    second batch, when the engine is warm, and at its peak)."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.samples: list[tuple[float, int]] = []  # (time, delivered so far) after each batch
        self.first: float | None = None
        self.last: float | None = None
        self.rss_warm = 0.0
        self.rss_peak = 0.0

    def on_results(self, now: datetime, results: Any) -> None:
        delivered = sum(1 for r in results.recorded if r.state == "delivered")
        if delivered:
            self.batches.append(delivered)
            self.last = time.monotonic()
            self.samples.append((self.last, sum(self.batches)))
            if len(self.batches) == 2:
                self.rss_warm = rss_mib()

    def on_cycle(self, now: datetime) -> None:
        if self.first is None:
            self.first = time.monotonic()
        self.rss_peak = max(self.rss_peak, rss_mib())


class SlowEndpoint:
    """An HTTP/1.1 endpoint on 127.0.0.1 that answers every POST 200 after ``delay`` seconds, on
    a thread of this process (its own event loop); ``peak`` is the most requests it held at
    once."""

    def __init__(self, delay: float = 1.0) -> None:
        self.delay = delay
        self.holding = self.peak = 0
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> SlowEndpoint:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        start = asyncio.start_server(self._connection, "127.0.0.1", self.port, backlog=4096)
        server = self._loop.run_until_complete(start)
        self._started.set()
        self._loop.run_forever()
        server.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    (int(line[15:]) for line in head.lower().split(b"\r\n")
                     if line.startswith(b"content-length:")),
                    0,
                )  # fmt: skip
                await reader.readexactly(length)
                self.holding += 1
                self.peak = max(self.peak, self.holding)
                await asyncio.sleep(self.delay)
                self.holding -= 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def run_engine(location: Path | str) -> dict[str, Any]:
    """One dispatcher (``dispatcher.run --once``) in this process over the store at
    ``location``, until nothing is due: what it delivered, its CPU seconds, its results batches
    (monotonic time, the same clock in every process) and its memory."""
    from prefctl.dispatcher.run import DispatcherConfig, run

    meter = Meter()
    rss_start = rss_mib()
    cpu_start = own_cpu_seconds("self")
    config = DispatcherConfig(store_path=location, once=True, plugins=False, observers=[meter])
    totals = run(config)
    rss_end = rss_mib()
    return {
        "delivered": totals.delivered,
        "failed": totals.failed,
        "timed_out": totals.timed_out,
        "cycles": totals.cycles,
        "cpu": own_cpu_seconds("self") - cpu_start,
        "first": meter.first,
        "batches": meter.batches,
        "samples": meter.samples,
        "rss": [rss_start, meter.rss_warm, max(meter.rss_peak, rss_end), rss_end],
    }


def run_engines(location: Path | str, dispatchers: int) -> list[dict[str, Any]]:
    """``run_engine`` here (one dispatcher), or in ``dispatchers`` processes of their own at
    once (``--engine``: this script), which share the store's queue and its ceilings."""
    if dispatchers == 1:
        return [run_engine(location)]
    command = [sys.executable, __file__, "--engine", str(location)]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE) for _ in range(dispatchers)]
    runs = []
    for process in processes:
        out, _ = process.communicate(timeout=1800)
        if process.returncode != 0:
            raise SystemExit(f"a dispatcher process exited with code {process.returncode}")
        runs.append(json.loads(out))
    return runs


def steady(samples: list[tuple[float, int]]) -> float:
    """Deliveries/s between two results batches, leaving out the first and last 1.5 s (the
    first cycle's start and the last one's tail)."""
    if not samples:
        return 0.0
    low, high = samples[0][0] + 1.5, samples[-1][0] - 1.5
    inside = [sample for sample in samples if low <= sample[0] <= high]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def measure(
    target: str,
    store: Path | str,
    events: int,
    max_concurrent: int = 5000,
    dispatchers: int = 1,
    accounts: int = 1,
) -> Result:
    from prefctl.store.db import connect

    location = store if isinstance(store, str) else None
    db_before = database_cpu_seconds(location)
    runs = run_engines(store, dispatchers)
    db_after = database_cpu_seconds(location)
    delivered = sum(run["delivered"] for run in runs)
    # All dispatchers' results batches on one time line: deliveries so far after each.
    batches = sorted((at, count) for run in runs for at, count in _batch_counts(run))
    counts = itertools.accumulate(count for _, count in batches)
    samples = list(zip([at for at, _ in batches], counts, strict=True))
    firsts = [run["first"] for run in runs if run["first"] is not None]
    seconds = (samples[-1][0] - min(firsts)) if samples and firsts else 0.0
    conn = connect(store)
    states = dict(conn.execute("SELECT state, count(*) FROM deliveries GROUP BY state").fetchall())
    conn.close()
    cpu = sum(run["cpu"] for run in runs)
    return Result(
        target=target,
        backend=backend_name(location),
        dispatchers=dispatchers,
        accounts=accounts,
        events=events,
        delivered=delivered,
        seconds=round(seconds, 3),
        deliveries_per_s=round(delivered / seconds) if seconds else 0.0,
        steady_per_s=round(steady(samples)),
        cycles=sum(run["cycles"] for run in runs),
        largest_batch=max((count for _, count in batches), default=0),
        rss_start_mib=round(max(run["rss"][0] for run in runs), 1),
        rss_warm_mib=round(max(run["rss"][1] for run in runs), 1),
        rss_peak_mib=round(max(run["rss"][2] for run in runs), 1),
        rss_end_mib=round(max(run["rss"][3] for run in runs), 1),
        load_average=round(os.getloadavg()[0], 2),
        max_concurrent_requests=max_concurrent,
        cpu_us_per_delivery=round(cpu / delivered * 1e6, 1) if delivered else 0.0,
        db_cpu_us_per_delivery=(
            round((db_after - db_before) / delivered * 1e6, 1)
            if db_before is not None and db_after is not None and delivered
            else None
        ),
        checks={
            "states": states,
            "failed": sum(run["failed"] for run in runs),
            "timed_out": sum(run["timed_out"] for run in runs),
        },
    )


def _batch_counts(run: dict[str, Any]) -> list[tuple[float, int]]:
    """(time, deliveries) of each results batch of one dispatcher's run."""
    return [(at, count) for (at, _), count in zip(run["samples"], run["batches"], strict=True)]


def start_receiver(port: int, output: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, HASHKEY_ENV: HASHKEY}
    prefctl = Path(sys.executable).parent / "prefctl"
    command = [
        str(prefctl), "-o", "json", "receive", "--port", str(port), "--client-id", ACCOUNT,
        "--signature-user-id", SIGNATURE_USER_ID, "--hashkey-env", HASHKEY_ENV,
    ]  # fmt: skip
    with output.open("wb") as sink:
        return subprocess.Popen(command, env=env, stdout=sink)


def receiver_checks(output: Path) -> dict[str, Any]:
    signatures: dict[str, int] = {}
    events = 0
    with output.open() as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("type") != "request":
                continue
            events += 1
            signatures[record["signature"]] = signatures.get(record["signature"], 0) + 1
    return {"requests_seen": events, "signatures": signatures}


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


TARGETS = ("nginx", "receive", "slow-1s")


def main() -> None:
    if sys.argv[1:2] == ["--engine"]:  # one of run_engines' dispatcher processes
        print(json.dumps(run_engine(sys.argv[2])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="events queued for nginx")
    parser.add_argument(
        "--receiver-events", type=int, default=50_000, help="events queued for prefctl receive"
    )
    parser.add_argument(
        "--slow-events", type=int, default=5000, help="events queued for the 1 s endpoint"
    )
    parser.add_argument(
        "--targets", nargs="+", choices=TARGETS, default=list(TARGETS), help="what to measure"
    )
    parser.add_argument(
        "--accounts", type=int, default=1, help="accounts sharing the events, each with its ceiling"
    )
    parser.add_argument(
        "--dispatchers",
        type=int,
        default=1,
        help="dispatcher processes sharing the queue (one: in this process)",
    )
    add_store_options(parser)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    results: list[Result] = []
    notes: list[str] = []
    shape = {"dispatchers": args.dispatchers, "accounts": args.accounts}
    with (
        tempfile.TemporaryDirectory(prefix="prefctl-bench-") as tmp_name,
        postgres_server(args) as server,
    ):
        tmp = Path(tmp_name)

        @contextlib.contextmanager
        def new_store(name: str) -> Iterator[Path | str]:
            if server is None:
                yield tmp / f"{name}.db"
            else:
                with fresh_database(server) as url:
                    yield url

        if "nginx" in args.targets and shutil.which("nginx"):
            port = free_port()
            nginx = start_nginx(tmp, port)
            try:
                wait_healthy(f"http://127.0.0.1:{port}/", nginx)
                with new_store("nginx") as store:
                    url = f"http://127.0.0.1:{port}/webhooks"
                    make_store(store, url, args.events, accounts=args.accounts)
                    results.append(measure("nginx", store, args.events, **shape))
            finally:
                stop(nginx)
        elif "nginx" in args.targets:
            notes.append(
                "nginx is not installed: the nginx target was skipped "
                "(Debian: apt-get install -y nginx)"
            )
        if "receive" in args.targets:
            port = free_port()
            output = tmp / "receive.ndjson"
            receiver = start_receiver(port, output)
            try:
                wait_healthy(f"http://127.0.0.1:{port}/healthz", receiver)
                with new_store("receive") as store:
                    url = f"http://127.0.0.1:{port}/webhooks"
                    make_store(store, url, args.receiver_events, accounts=args.accounts)
                    result = measure("receive", store, args.receiver_events, **shape)
            finally:
                stop(receiver)
            result.checks |= receiver_checks(output)
            results.append(result)
        if "slow-1s" in args.targets:
            with SlowEndpoint(delay=1.0) as endpoint, new_store("slow") as store:
                url = f"http://127.0.0.1:{endpoint.port}/webhooks"
                make_store(store, url, args.slow_events, max_concurrent=500, accounts=args.accounts)
                result = measure("slow-1s", store, args.slow_events, max_concurrent=500, **shape)
                result.peak_in_flight = endpoint.peak
            results.append(result)
    if args.json:
        print(json.dumps({"results": [asdict(r) for r in results], "notes": notes}, indent=2))
        return
    print(
        f"{results[0].backend if results else ''}, {args.dispatchers} dispatcher(s),"
        f" {args.accounts} account(s)"
    )
    print(
        "target    events  delivered  seconds  deliveries/s  steady/s  cycles  largest batch"
        "  RSS MiB start/warm/peak/end  load  CPU µs/delivery (+ PostgreSQL's)"
    )
    for r in results:
        rss = f"{r.rss_start_mib:.0f}/{r.rss_warm_mib:.0f}/{r.rss_peak_mib:.0f}/{r.rss_end_mib:.0f}"
        print(
            f"{r.target:<9} {r.events:>6} {r.delivered:>10} {r.seconds:>8.2f} "
            f"{r.deliveries_per_s:>13,.0f} {r.steady_per_s:>9,.0f} {r.cycles:>7}"
            f" {r.largest_batch:>14}"
            f"  {rss:<27}  {r.load_average:.1f}  {r.cpu_us_per_delivery:.0f}"
            + ("" if r.db_cpu_us_per_delivery is None else f" + {r.db_cpu_us_per_delivery:.0f}")
        )
        if r.peak_in_flight is not None:
            print(
                f"         peak in flight {r.peak_in_flight}"
                f" (MaxConcurrentRequests {r.max_concurrent_requests})"
            )
        print(f"         checks: {r.checks}")
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
