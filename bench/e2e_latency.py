"""Benchmark PATCH → delivered latency through the emulator (docs/performance.md).

Two processes of our own on 127.0.0.1, each on a free port, with a temporary data dir and a
temporary ``PREFCTL_CONFIG``: ``prefctl emulator start`` (time scale 1, account settings left at
their defaults, so Duration 1 and the dispatcher runs inside the emulator) and ``prefctl -o json
-p local receive`` (signatures verified with the Hashkey that the emulator wrote into profile
``local``; its NDJSON lines go to a file). One subscription to the receiver is created through
the REST API, and once its handshake has Succeeded, profile merge PATCHes go out at a steady rate
(default 50/s for 10 s), each yielding 5 events (the selection of ``bench/api.py``).

Per event: the time the receiver logged its arrival (the line's ``time``) minus the event's
OriginalEventTime, read from the emulator's store (read-only) by EventId: the NDJSON lines carry
the EventId and EventTime but not OriginalEventTime. Printed: p50/p90/p99/max and the counts
(PATCHes, events, delivered, received). The dispatcher attempts what is due once per cycle and
then waits Duration (1 s), so an event waits about half a cycle on average: expect p50 ≈ 500 ms
plus the attempt itself, and p99 a little over one cycle.

``--postgres`` runs the emulator on a throwaway PostgreSQL cluster (``--store URL``: a new
database on that server), where new deliveries wake the dispatcher through LISTEN/NOTIFY.

Run: ``.venv/bin/python bench/e2e_latency.py [--rate 50] [--duration 10] [--postgres] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_store_options, backend_name, postgres_server

import api  # bench/api.py: free_port, start_emulator, request, token, create_profiles

PROFILES = 50
DRAIN_SECONDS = 60.0  # bound on waiting for the last deliveries after the PATCHes end


@dataclass
class Result:
    rate: float
    duration_s: float
    patches: int
    patches_per_s: float
    events: int
    delivered: int
    received: int
    not_delivered: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    duration_setting_s: int
    backend: str  # SQLite or PostgreSQL


def start_receiver(port: int, config: Path, output: Path) -> subprocess.Popen[bytes]:
    """``prefctl -o json -p local receive`` with verification on; NDJSON into ``output``."""
    env = {**os.environ, "PREFCTL_CONFIG": str(config), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "prefctl", "-o", "json", "-p", "local", "receive"]
    command += ["--port", str(port)]
    with output.open("wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.DEVNULL)
    wait_healthy(f"http://127.0.0.1:{port}/healthz", process, "the receiver")
    return process


def wait_healthy(url: str, process: subprocess.Popen[bytes], name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited early with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{name} did not become ready in 30 s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def local_credentials(config: Path) -> dict[str, str]:
    """The credentials ``emulator start`` wrote into profile ``local`` (the shape api.token takes)."""
    local = tomllib.loads(config.read_text())["profiles"]["local"]
    return {
        "account": local["service_client_id"],
        "user_id": local["user_id"],
        "client_id": local["client_id"],
        "client_secret": local["client_secret"],
    }


def subscribe(api_url: str, headers: dict[str, str], url: str) -> int:
    """Create the subscription and wait (bounded) until its handshake Succeeded."""
    body = {
        "Name": "e2e-latency",
        "Url": url,
        "State": "Active",
        "Subscriptions": [{"Entity": e, "EventType": t} for e, t in api.EVENT_TYPES],
    }
    created = api.request("POST", f"{api_url}/subscriptions", body, headers)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        record = api.request("GET", f"{api_url}/subscriptions/{created['Id']}", None, headers)
        if record["ProvisioningState"] == "Succeeded":
            return int(created["Id"])
        if record["ProvisioningState"] == "Failed":
            raise SystemExit(f"the handshake failed: {record.get('ProvisioningError')}")
        time.sleep(0.05)
    raise SystemExit("the subscription was not Succeeded within 30 s")


def send_patches(api_url: str, bearer: str, ids: list[int], rate: float, seconds: float) -> int:
    """One merge PATCH every 1/rate s on a fixed schedule (a late one does not shift the rest)."""
    headers = {"Authorization": f"Bearer {bearer}", "Content-Type": "application/merge-patch+json"}
    total = int(rate * seconds)
    start = time.monotonic()
    for number in range(total):
        delay = start + number / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        body = {"CustomerName": {"FirstName": f"N{number}"}, "Tags": [f"t{number}"]}
        api.request("PATCH", f"{api_url}/profiles/{ids[number % len(ids)]}", body, headers)
    return total


def open_store(store: Path | str) -> Any:
    """A read-only look at the emulator's store: its SQLite file, or a connection to its
    PostgreSQL database (a URL), for plain SELECTs."""
    if isinstance(store, str):
        from prefctl.store.db import connect

        return connect(store)
    return sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10)


def wait_drained(store: Path | str, subscription_id: int, output: Path) -> None:
    """Until no delivery of the subscription is still moving and the receiver logged them all."""
    deadline = time.monotonic() + DRAIN_SECONDS
    while time.monotonic() < deadline:
        conn = open_store(store)
        try:
            moving, delivered = conn.execute(
                "SELECT count(*) FILTER (WHERE state NOT IN ('delivered', 'dead_lettered')),"
                " count(*) FILTER (WHERE state = 'delivered') FROM deliveries"
                f" WHERE subscription_id = {int(subscription_id)}"
            ).fetchone()
        finally:
            conn.close()
        if not moving and len(received_at(output)) >= (delivered or 0):
            return
        time.sleep(0.2)


def received_at(output: Path) -> dict[str, float]:
    """EventId → first arrival (Unix seconds) of each authentic event the receiver logged."""
    arrivals: dict[str, float] = {}
    for line in output.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line still being written
        if record.get("type") != "request" or record.get("signature") != "valid":
            continue
        event_id = record.get("event_id")
        if event_id and event_id not in arrivals:
            arrivals[event_id] = datetime.fromisoformat(record["time"]).timestamp()
    return arrivals


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))
    return ordered[index]


def measure(store: Path | str, subscription_id: int, output: Path) -> tuple[int, int, list[float]]:
    """(events fanned out to the subscription, delivered, latencies in ms of those received)."""
    conn = open_store(store)
    try:
        rows = conn.execute(
            "SELECT e.event_id, e.original_event_time, d.state FROM deliveries d"
            " JOIN events e ON e.id = d.event_rowid"
            f" WHERE d.subscription_id = {int(subscription_id)}"
        ).fetchall()
    finally:
        conn.close()
    arrivals = received_at(output)
    latencies = [1000 * (arrivals[eid] - original) for eid, original, _ in rows if eid in arrivals]
    delivered = sum(1 for *_, state in rows if state == "delivered")
    return len(rows), delivered, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="PATCHes per second")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of PATCHes")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_store_options(parser)
    options = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="prefctl-bench-e2e-") as tmp_name,
        postgres_server(options) as pg_server,
        api.store_location(pg_server) as postgres,
    ):
        tmp = Path(tmp_name)
        config, output, data_dir = tmp / "profiles.toml", tmp / "receive.ndjson", tmp / "data"
        store = postgres or data_dir / "emulator.db"
        port, receiver_port = api.free_port(), api.free_port()
        emulator = api.start_emulator(data_dir, port, config)
        receiver = None
        try:
            receiver = start_receiver(receiver_port, config, output)
            creds = local_credentials(config)
            base = f"http://127.0.0.1:{port}"
            bearer = api.token(base, creds)
            api_url = f"{base}/api/v1/{creds['account']}"
            headers = {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"}
            settings = api.request("GET", f"{api_url}/settings/webhooks", None, headers)
            # Profiles first, so that their profile.created events reach no subscription.
            ids = api.create_profiles(api_url, bearer, PROFILES)
            subscription_id = subscribe(
                api_url, headers, f"http://127.0.0.1:{receiver_port}/webhooks"
            )
            started = time.monotonic()
            patches = send_patches(api_url, bearer, ids, options.rate, options.duration)
            sent_for = time.monotonic() - started
            wait_drained(store, subscription_id, output)
            events, delivered, latencies = measure(store, subscription_id, output)
        finally:
            if receiver is not None:
                stop(receiver)
            stop(emulator)

    if not latencies:
        raise SystemExit("no event reached the receiver")
    result = Result(
        rate=options.rate,
        duration_s=options.duration,
        patches=patches,
        patches_per_s=round(patches / sent_for, 1),
        events=events,
        delivered=delivered,
        received=len(latencies),
        not_delivered=events - delivered,
        p50_ms=round(percentile(latencies, 0.50), 1),
        p90_ms=round(percentile(latencies, 0.90), 1),
        p99_ms=round(percentile(latencies, 0.99), 1),
        max_ms=round(max(latencies), 1),
        duration_setting_s=int(settings["Duration"]),
        backend=backend_name(postgres),
    )
    if options.json:
        print(json.dumps(asdict(result), indent=2))
        return
    print(
        f"PATCH → delivered to prefctl receive (Duration {result.duration_setting_s}, time scale 1,"
        f" {result.backend})"
    )
    print(
        f"PATCHes {result.patches} at {result.patches_per_s}/s; events {result.events},"
        f" delivered {result.delivered}, received {result.received},"
        f" not delivered {result.not_delivered}"
    )
    print(
        f"received − OriginalEventTime: p50 {result.p50_ms} ms, p90 {result.p90_ms} ms,"
        f" p99 {result.p99_ms} ms, max {result.max_ms} ms"
    )
    print(
        "note: the dispatcher sends what is due once per cycle and then waits Duration, so with"
        " Duration 1 the expected p50 is about half a cycle (~500 ms) and p99 about one cycle."
    )


if __name__ == "__main__":
    main()
