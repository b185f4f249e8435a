"""Benchmark queued → delivered latency of an idle ``prefctl dispatcher run`` on SQLite and on
PostgreSQL (docs/dispatcher.md, "On PostgreSQL"; issue 29: no worse than on SQLite).

For each backend: a store with one account (Duration 1) and one subscription to a receiver on a
thread of this process (signatures verified), and one ``prefctl dispatcher run --store …``
process. Then, N times: wait a random 1.1–2.2 s (the dispatcher is idle: its last cycle found
nothing, and the new event falls anywhere in its cadence), queue one event (the transaction a
profile change commits: on PostgreSQL it sends the wake-up notification) and time until the
receiver has it. Printed per backend: p50, p90, max (ms). On SQLite the dispatcher finds the
event at its next cycle (about half a Duration on average); on PostgreSQL the notification wakes
it at once. (An event that comes less than a Duration after the previous cycle that sent waits
for the next cycle on both: cycles that send stay Duration apart.)

PostgreSQL: the server of ``--store URL`` or ``PREFCTL_TEST_POSTGRESQL`` (a superuser URL; a new
database there, dropped at the end), else a throwaway cluster started with scripts/pg_cluster.py
and stopped at the end.
Run: ``.venv/bin/python bench/wakeup_latency.py [--events 20] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import fresh_database, postgres_server

from dispatcher import ACCOUNT, HASHKEY, SIGNATURE_USER_ID, make_store

PREFCTL = str(Path(sys.executable).parent / "prefctl")


def _queue_one(location: str, n: int) -> None:
    from prefctl.store import deliveries, events
    from prefctl.store.db import connect
    from prefctl.store.subscriptions import list_subscriptions

    conn = connect(location)
    try:
        [subscription] = list_subscriptions(conn, ACCOUNT)
        event = events.NewEvent(
            event_id=f"00000000-0000-4000-9000-{n:012d}",
            event_type="profile.created",
            entity="Profile",
            profile_id=1000 + n,
            original_event_time=time.time(),
            data={"ProfileId": 1000 + n},
        )
        with conn.transaction():
            rowids = events.insert_events(conn, ACCOUNT, [event])
            new = [deliveries.NewDelivery(rowids[0], subscription.id)]
            deliveries.add_deliveries(conn, new, now=time.time())
    finally:
        conn.close()


def measure(location: str, events: int) -> list[float]:
    """Latencies (ms) of ``events`` events queued one at a time for an idle dispatcher."""
    from prefctl.receiver.serve import ReceiverConfig, start_in_thread
    from prefctl.webhooks.signature import SigningCredentials

    credentials = SigningCredentials(ACCOUNT, SIGNATURE_USER_ID, HASHKEY)
    latencies: list[float] = []
    with start_in_thread(ReceiverConfig(port=0, credentials=credentials)) as receiver:
        make_store(location, receiver.webhook_url, 0)
        command = [PREFCTL, "-q", "dispatcher", "run", "--store", location]
        dispatcher = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        try:
            time.sleep(2.0)  # started and idle (a benchmark, not a test: it may wait)
            rng = random.Random(7)
            for n in range(events):
                time.sleep(rng.uniform(1.1, 2.2))
                started = time.monotonic()
                _queue_one(location, n)
                [verdict] = receiver.wait_for(1, timeout=10)
                latencies.append((time.monotonic() - started) * 1000)
                assert verdict.signature == "valid"
        finally:
            dispatcher.send_signal(signal.SIGTERM)
            dispatcher.wait(15)
    return latencies


def _summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "max_ms": round(ordered[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--store",
        metavar="URL",
        default=os.environ.get("PREFCTL_TEST_POSTGRESQL"),
        help="a PostgreSQL server (a superuser URL; default: a throwaway cluster)",
    )
    args = parser.parse_args()

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PREFCTL_DATA_DIR"] = str(Path(tmp) / "data")
        results["sqlite"] = _summary(measure(str(Path(tmp) / "store.db"), args.events))
    # The server of --store (PREFCTL_TEST_POSTGRESQL by default), else a throwaway cluster.
    where = argparse.Namespace(store=args.store, postgres=True)
    with postgres_server(where) as server, fresh_database(str(server)) as url:
        results["postgresql"] = _summary(measure(url, args.events))
    if args.json:
        print(json.dumps(results))
        return
    for backend, figures in results.items():
        print(
            f"{backend:10} queued → delivered, idle dispatcher, Duration 1: "
            f"p50 {figures['p50_ms']} ms, p90 {figures['p90_ms']} ms, max {figures['max_ms']} ms"
        )


if __name__ == "__main__":
    main()
