"""The first write after ``prefctl emulator start``: a profile created, or a bulk import.

The emulator's profile writes run in a writer process (``emulator.group_writer``), which imports
the write and import code when it starts. Started with the first write, it made that write wait
for it; it now starts with the server. For each of ``--runs`` fresh emulators (a new data dir
each), this waits ``--pause`` seconds after the ready line (a client's first request rarely comes
sooner), then times three writes of one kind, the first of them the emulator's first write:
``POST /profiles`` on one emulator, a one-record import (execute until Completed) on another.
Prints each in milliseconds, and the first against the later ones.

Run: ``.venv/bin/python bench/first_write.py [--runs 4] [--pause 1.0]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PREFCTL = str(Path(sys.executable).parent / "prefctl")


def one_emulator(kind: str, pause: float) -> list[float]:
    from prefctl.api.client import ApiClient
    from prefctl.api.imports import ImportsApi
    from prefctl.clock import SystemClock
    from prefctl.config import load_config, resolve_profile

    tmp = Path(tempfile.mkdtemp(prefix="prefctl-first-write-"))
    env = {
        "PREFCTL_CONFIG": str(tmp / "profiles.toml"),
        "PREFCTL_DATA_DIR": str(tmp / "data"),
        "PREFCTL_CACHE_DIR": str(tmp / "cache"),
    }
    os.environ.update(env)
    process = subprocess.Popen(
        [PREFCTL, "-o", "json", "emulator", "start", "--port", "0"],
        env={**os.environ},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()  # the ready line
        profile = resolve_profile(load_config(Path(env["PREFCTL_CONFIG"])), "local")
        times: list[float] = []
        with ApiClient.for_profile(profile, clock=SystemClock()) as client:
            client.get("/settings/webhooks")  # the token, so that it is not timed below
            time.sleep(pause)
            api = ImportsApi(client)
            for index in range(3):
                start = time.perf_counter()
                if kind == "create":
                    client.resource("POST", "/profiles", body={"Tags": [f"first-{index}"]})
                else:
                    import_id = int(api.initiate()["ImportId"])
                    api.stage(import_id, [{"Tags": [f"first-{index}"]}])
                    start = time.perf_counter()
                    api.execute(import_id)
                    while api.status(import_id)["State"] not in ("Completed", "Failed"):
                        time.sleep(0.002)
                times.append((time.perf_counter() - start) * 1000)
        return times
    finally:
        process.terminate()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--pause", type=float, default=1.0)
    args = parser.parse_args()
    firsts: dict[str, list[float]] = {"create": [], "import": []}
    laters: dict[str, list[float]] = {"create": [], "import": []}
    for _ in range(args.runs):
        for kind in firsts:
            times = one_emulator(kind, args.pause)
            print(f"{kind:6}  " + "  ".join(f"{t:7.1f} ms" for t in times))
            firsts[kind].append(times[0])
            laters[kind].extend(times[1:])
    for kind in firsts:
        print(
            f"{kind}: the first write after start, median {statistics.median(firsts[kind]):.1f} ms;"
            f" the later ones {statistics.median(laters[kind]):.1f} ms"
        )


if __name__ == "__main__":
    main()
