"""Simulation speed (docs/performance.md): a simulated day of 100k events with a 2-hour outage.

Target on this 2-core machine: <= 30 s wall and < 500 MB peak RSS for the whole
``prefctl simulate`` run (store built, load written, every delivery final, report made).

The scenario: 69.45 events/minute for 1440 minutes (about 100,000 events, one subscription), an
endpoint answering 200 (99.5 %) or 503 (0.5 %) with a lognormal latency (p50 80 ms, p99 900 ms),
refusing connections from minute 600 to 720; default settings (Duration 1 s, 500 per cycle,
30 attempts, TTL 240 min).

Each run is a fresh child process, so the peak RSS is the simulation's own. With
``--breakdown`` the child also times where the wall time goes: building the store, the engine's
store calls (claims, results, settings), the model endpoint and the observers, and the report.

    python bench/simulate.py                 # one run
    python bench/simulate.py --runs 3 --breakdown
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_SECONDS = 30.0
TARGET_RSS_MB = 500.0

SCENARIO = """
name = "bench-day"
description = "a day of 100k events with a 2-hour outage"
seed = 1

[load]
events_per_minute = 69.45
duration_minutes = 1440
event_mix = { "profile.updated" = 6, "contacts.email.updated" = 2, "preference.updated" = 2 }

[endpoint]
status_mix = { 200 = 0.995, 503 = 0.005 }
latency_ms = { distribution = "lognormal", p50 = 80, p99 = 900 }

[[endpoint.outages]]
start_minute = 600
end_minute = 720
status = "connection_error"
"""

# Runs in the child: simulate, measure, print one JSON line.
CHILD = r"""
import asyncio, functools, json, resource, sys, time
from pathlib import Path

breakdown = sys.argv[2] == "1"
spent = {}

def timed(owner, name, label):
    original = getattr(owner, name)
    if asyncio.iscoroutinefunction(original):
        @functools.wraps(original)
        async def waiter(*args, **kwargs):
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                entry = spent.setdefault(label, [0.0, 0])
                entry[0] += time.perf_counter() - started
                entry[1] += 1
        setattr(owner, name, waiter)
        return
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            entry = spent.setdefault(label, [0.0, 0])
            entry[0] += time.perf_counter() - started
            entry[1] += 1
    setattr(owner, name, wrapper)

import prefctl.dispatcher.engine as engine
import prefctl.dispatcher.transport as transport
import prefctl.dispatcher.turns as turns
import prefctl.sim.observers as observers
import prefctl.sim.run as run

if breakdown:
    timed(run, "build_store", "build the store and write the load")
    timed(run, "build_report", "build the report")
    timed(engine.Engine, "run_cycle", "engine.run_cycle (all of a cycle)")
    timed(turns, "claim_due", "  store.claim_due")
    timed(engine, "record_results", "  store.record_results")
    timed(engine.ConfigCache, "refresh", "  store: has the account configuration changed")
    timed(engine.dispatcher_state, "due_exists", "  store.dispatcher_state.due_exists")
    timed(transport.FunctionTransport, "send", "  model endpoint (transport.send)")
    timed(observers.AlertFeed, "on_results", "  alert observer")
    timed(observers.ProbationWatch, "on_results", "  probation observer")

from prefctl.sim.scenario import load_scenario

scenario = load_scenario(Path(sys.argv[1]))
started = time.perf_counter()
report = run.simulate(scenario)
wall = time.perf_counter() - started
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({
    "wall_seconds": wall,
    "peak_rss_mb": rss_mb,
    "events": report["events"],
    "deliveries": report["deliveries"],
    "cycles": report["run"]["cycles"],
    "dead_letters": report["dead_letters"],
    "attempts": report["attempts"]["by_outcome"],
    "probation": report["probation"],
    "breakdown": {k: v for k, v in sorted(spent.items(), key=lambda kv: -kv[1][0])},
}))
"""


def run_once(scenario: Path, breakdown: bool) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(scenario), "1" if breakdown else "0"],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="fresh processes to time")
    parser.add_argument("--breakdown", action="store_true", help="time the parts of a run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scenario = Path(folder) / "day.toml"
        scenario.write_text(SCENARIO)
        results = [run_once(scenario, args.breakdown) for _ in range(args.runs)]
    walls = [float(r["wall_seconds"]) for r in results]  # type: ignore[arg-type]
    rss = max(float(r["peak_rss_mb"]) for r in results)  # type: ignore[arg-type]
    last = results[-1]
    print(f"events {last['events']}, cycles run {last['cycles']}")
    print(f"deliveries {json.dumps(last['deliveries'])}")
    print(
        f"attempts {json.dumps(last['attempts'])}, dead letters {json.dumps(last['dead_letters'])}"
    )
    print(f"probation {json.dumps(last['probation'])}")
    wall = statistics.median(walls)
    runs = ", ".join(f"{w:.1f}" for w in walls)
    print(
        f"wall  median {wall:.1f} s  (runs: {runs})  target <= {TARGET_SECONDS:.0f} s: "
        f"{'met' if wall <= TARGET_SECONDS else 'NOT met'}"
    )
    print(
        f"peak RSS {rss:.0f} MB  target < {TARGET_RSS_MB:.0f} MB: "
        f"{'met' if rss < TARGET_RSS_MB else 'NOT met'}"
    )
    if args.breakdown:
        print("\nwhere the time goes (last run; nested rows are inside engine.run_cycle):")
        for label, (seconds, calls) in last["breakdown"].items():  # type: ignore[union-attr]
            share = 100 * seconds / float(last["wall_seconds"])  # type: ignore[arg-type]
            print(
                f"  {label:42s} {seconds:6.2f} s {share:5.1f} %  {calls:7d} calls"
                f"  {seconds / calls * 1e6:7.1f} us/call"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
