"""Start-up time of the installed ``prefctl`` entry point.

Creates a fresh venv in a temporary folder, ``pip install``s this package into it (not editable,
as a user would), primes a token cache with the installed package itself, then times many runs of:

    python -c pass             the interpreter alone (the floor)
    prefctl --version          target <= 150 ms
    prefctl token get          a cached token, served by the fast path: target <= 250 ms
    prefctl token get --json   the same token through the full CLI (Typer, Rich), for comparison
    prefctl --help             target <= 250 ms (and each GROUP --help measured here)
    prefctl subscriptions list against a local emulator, token cached: target <= 300 ms
    prefctl settings get       the same: target <= 300 ms
    TAB …                      shell completion as bash's script asks for it (the words in
                               COMP_WORDS): a command name or an option, target <= 100 ms; a
                               value read from the emulator's store (subscription names and Ids,
                               dead letters' EventIds), target <= 250 ms
    aws --version              when installed, the reference CLI

Each row also shows its ratio to ``python -c pass``, the interpreter's own start-up. And, apart, the cost of prefctl's pytest plugin to a session that does not use its fixtures
(``pytest_plugin_load``): ``pytest`` on a one-test module with the plugin and with
``-p no:prefctl``, interleaved, in the same venv (pytest is installed into it). Target <= 50 ms.

Runs are interleaved round-robin so that load on the machine hits every command alike. Prints a
table of median / p90 / min wall time in ms and whether each target is met.

    python bench/startup.py                 # 40 runs each
    python bench/startup.py --runs 100 --venv /tmp/prefctl-bench   # reuse a venv between runs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS_MS = {
    "prefctl --version": 150.0,
    "prefctl token get": 250.0,
    "prefctl --help": 250.0,
    "prefctl subscriptions --help": 250.0,
    "prefctl deliveries --help": 250.0,
    "prefctl subscriptions list": 300.0,
    "prefctl settings get": 300.0,
    "TAB prefctl sub": 100.0,
    "TAB prefctl deliveries list --": 100.0,
    "TAB prefctl subscriptions get": 250.0,
    "TAB prefctl deadletters show": 250.0,
}
# What a TAB sends: the words typed so far, the last one being completed.
TABS = [
    "prefctl sub",
    "prefctl deliveries list --",
    "prefctl subscriptions get ",
    "prefctl deadletters show ",
]
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJiZW5jaCJ9.c2lnbmF0dXJl"

PRIME = """
import sys
from pathlib import Path
from prefctl.auth.cache import CachedToken, TokenCache
from prefctl.clock import SystemClock
from prefctl.config import ConfigFile, save_config

config_path, token = Path(sys.argv[1]), sys.argv[2]
profile = {
    "auth_url": "http://127.0.0.1:9",
    "service_client_id": "BENCH",
    "user_id": "admin",
    "client_id": "b" * 48,
}
save_config(ConfigFile(path=config_path, default="bench", profiles={"bench": profile}))
clock = SystemClock()
TokenCache.default(clock).store(
    CachedToken.from_response(profile["auth_url"], profile["client_id"], "BENCH/admin", token,
                              "Bearer", 24 * 3600, clock.now())
)
"""


def _make_venv(folder: Path) -> Path:
    python = folder / "bin" / "python"
    if python.exists() and (folder / "bin" / "prefctl").exists():
        print(f"reusing the venv {folder}; reinstalling prefctl from {REPO}", file=sys.stderr)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--force-reinstall",
                str(REPO),
            ],
            check=True,
        )
        return folder
    print(f"creating a venv in {folder} and installing {REPO} (not editable)…", file=sys.stderr)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(REPO)],
        check=True,
    )
    print(f"installed in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return folder


def _start_emulator(prefctl: str, env: dict[str, str], home: Path) -> dict[str, str]:
    """A detached emulator on a free port with the profile ``local`` it writes and its
    token cached (``token get`` once), so that REST commands are timed as a user runs them."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    emulator_env = {**env, "PREFCTL_DATA_DIR": str(home / "emulator")}
    subprocess.run(
        [prefctl, "emulator", "start", "--detach", "--port", str(port)],
        env=emulator_env,
        check=True,
        capture_output=True,
    )
    served = subprocess.run(
        [prefctl, "-p", "local", "token", "get"], env=emulator_env, capture_output=True
    )
    if served.returncode != 0:
        subprocess.run([prefctl, "emulator", "stop"], env=emulator_env, capture_output=True)
        raise SystemExit(f"no token from the bench emulator: {served.stderr.decode()}")
    env.update(emulator_env)
    return emulator_env


def _tab_env(words: str) -> dict[str, str]:
    """The environment bash's completion script gives prefctl for a TAB after ``words``."""
    current = len(words.split()) - (0 if words.endswith(" ") else 1)
    return {"_PREFCTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(current)}


def _subscribe(prefctl: str, env: dict[str, str]) -> None:
    """A few subscriptions in the bench emulator, for the TABs that offer their names."""
    for index in range(5):
        subprocess.run(
            [
                prefctl,
                "-p",
                "local",
                "subscriptions",
                "create",
                "--name",
                f"bench-{index}",
                "--url",
                f"http://127.0.0.1:9/hook{index}",
                "--event",
                "profile.created",
                "--no-wait",
            ],
            env=env,
            capture_output=True,
        )


def _time(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = (time.perf_counter() - started) * 1000
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {result.returncode}")
    return elapsed


PLUGIN_TARGET_MS = 50.0
PLUGIN_TEST = "def test_nothing():\n    pass\n"
# The module's own import, timed inside a process that has pytest loaded: the same figure without
# the noise of whole sessions (a loaded 2-core machine moves those by tens of ms).
PLUGIN_IMPORT = (
    "import time, pytest; t = time.perf_counter(); import prefctl.testing; "
    "print((time.perf_counter() - t) * 1000)"
)


def pytest_plugin_load(venv: Path, env: dict[str, str], runs: int, warmup: int) -> dict[str, float]:
    """Median wall time of a pytest session that runs one plain test, with prefctl's plugin
    loaded (its entry point) and with ``-p no:prefctl``; the difference is what loading costs."""
    python = str(venv / "bin" / "python")
    if subprocess.run([python, "-c", "import pytest"], capture_output=True).returncode != 0:
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "pytest"],
            check=True,
        )
    with tempfile.TemporaryDirectory(prefix="prefctl-plugin-") as tmp:
        (Path(tmp) / "test_plain.py").write_text(PLUGIN_TEST)
        base = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull]
        base += ["--rootdir", tmp, str(Path(tmp) / "test_plain.py")]
        argvs = {"with the plugin": base, "-p no:prefctl": [*base, "-p", "no:prefctl"]}
        for argv in argvs.values():
            for _ in range(warmup):
                _time(argv, env)
        samples: dict[str, list[float]] = {name: [] for name in argvs}
        for _ in range(runs):
            for name, argv in argvs.items():
                samples[name].append(_time(argv, env))
    with_plugin = statistics.median(samples["with the plugin"])
    without = statistics.median(samples["-p no:prefctl"])
    imports = [
        float(subprocess.run([python, "-c", PLUGIN_IMPORT], capture_output=True, text=True).stdout)
        for _ in range(runs)
    ]
    return {
        "import_ms": round(statistics.median(imports), 2),
        "with_plugin_ms": round(with_plugin, 1),
        "without_plugin_ms": round(without, 1),
        "load_ms": round(with_plugin - without, 1),
        "ratio": round(with_plugin / without, 3),
        "target_ms": PLUGIN_TARGET_MS,
    }


def _print_plugin_load(result: dict[str, float]) -> None:
    met = "ok" if result["load_ms"] <= PLUGIN_TARGET_MS else "MISSED"
    print(
        f"pytest session, one plain test: {result['with_plugin_ms']:.1f} ms with prefctl's plugin, "
        f"{result['without_plugin_ms']:.1f} ms with -p no:prefctl: the plugin costs "
        f"{result['load_ms']:.1f} ms (ratio {result['ratio']:.3f}; "
        f"target <= {PLUGIN_TARGET_MS:.0f} ms {met}); importing the plugin module into a "
        f"process with pytest loaded takes {result['import_ms']:.2f} ms"
    )


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="timed runs per command (default 40)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    parser.add_argument("--venv", type=Path, help="venv folder to create or reuse (default: temp)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="prefctl-startup-") as tmp:
        home = Path(tmp)
        venv = _make_venv(args.venv or home / "venv")
        bindir = venv / "bin"
        env = {
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": os.environ.get("HOME", str(home)),
            "PREFCTL_CONFIG": str(home / "config" / "profiles.toml"),
            "PREFCTL_CACHE_DIR": str(home / "cache"),
            "PREFCTL_DATA_DIR": str(home / "data"),
            "NO_COLOR": "1",
        }
        subprocess.run(
            [str(bindir / "python"), "-c", PRIME, env["PREFCTL_CONFIG"], TOKEN], env=env, check=True
        )
        served = subprocess.run(
            [str(bindir / "prefctl"), "token", "get"], env=env, capture_output=True, text=True
        )
        if served.stdout != TOKEN + "\n":
            raise SystemExit(f"prefctl token get did not print the cached token: {served.stderr}")

        prefctl = str(bindir / "prefctl")
        commands: dict[str, list[str]] = {
            "python -c pass": [str(bindir / "python"), "-c", "pass"],
            "prefctl --version": [prefctl, "--version"],
            "prefctl token get": [prefctl, "token", "get"],
            "prefctl token get --json": [prefctl, "token", "get", "--json"],
            "prefctl --help": [prefctl, "--help"],
            "prefctl subscriptions --help": [prefctl, "subscriptions", "--help"],
            "prefctl deliveries --help": [prefctl, "deliveries", "--help"],
        }
        emulator_env = _start_emulator(prefctl, env, home)
        for name in ("subscriptions list", "settings get"):
            commands[f"prefctl {name}"] = [prefctl, "-p", "local", *name.split()]
        _subscribe(prefctl, env)
        envs = {name: env for name in commands}
        for words in TABS:
            commands[f"TAB {words.strip()}"] = [prefctl]
            envs[f"TAB {words.strip()}"] = {**env, **_tab_env(words)}
        aws = shutil.which("aws")
        if aws:
            commands["aws --version"] = [aws, "--version"]
            env["PATH"] += os.pathsep + str(Path(aws).parent)
            envs["aws --version"] = env

        try:
            for name, argv in commands.items():
                for _ in range(args.warmup):
                    _time(argv, envs[name])
            samples: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(args.runs):
                for name, argv in commands.items():
                    samples[name].append(_time(argv, envs[name]))
            plugin = pytest_plugin_load(venv, env, args.runs, args.warmup)
        finally:
            subprocess.run([prefctl, "emulator", "stop"], env=emulator_env, capture_output=True)

    rows = []
    floor = statistics.median(samples["python -c pass"])
    for name, values in samples.items():
        target = TARGETS_MS.get(name)
        median = statistics.median(values)
        rows.append(
            {
                "command": name,
                "median_ms": round(median, 1),
                "ratio_to_python": round(median / floor, 1),
                "p90_ms": round(_percentile(values, 0.9), 1),
                "min_ms": round(min(values), 1),
                "target_ms": target,
                "met": None if target is None else median <= target,
                "runs": len(values),
            }
        )
    if args.json:
        print(json.dumps([*rows, {"command": "pytest plugin load", **plugin}], indent=2))
        return 0
    print(f"{'command':<30} {'median':>8} {'p90':>8} {'min':>8} {'× python':>8}  target")
    for row in rows:
        target = row["target_ms"]
        verdict = "" if target is None else f"<= {target:.0f} ms {'ok' if row['met'] else 'MISSED'}"
        print(
            f"{row['command']:<30} {row['median_ms']:>6.1f}ms {row['p90_ms']:>6.1f}ms "
            f"{row['min_ms']:>6.1f}ms {row['ratio_to_python']:>7.1f}x  {verdict}"
        )
    by_name = {row["command"]: row for row in rows}
    if "aws --version" in by_name:
        aws_median = by_name["aws --version"]["median_ms"]
        token_median = by_name["prefctl token get"]["median_ms"]
        print(f"cached token get is {aws_median / token_median:.1f}x faster than aws --version")
    _print_plugin_load(plugin)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"({args.runs} runs each, interleaved; {os.cpu_count()} CPUs, load average {load}; "
        f"Python {sys.version.split()[0]})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
