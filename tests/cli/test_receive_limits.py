"""``prefctl receive`` against hostile input and a stuck reader (issue 18, points 1 and 3)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.test_receive import FLAGS, post, run_receiving
from tests.helpers import run_cli, wait_until


@pytest.fixture(autouse=True)
def hashkey(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFCTL_HASHKEY", "cli-receive-hashkey")


def test_receive_auto_validate_without_any_trusted_host_exits_2() -> None:
    result = run_cli("receive", "--port", "0", "--no-verify", "--auto-validate")
    assert result.exit_code == 2
    assert "--auto-validate needs a trusted host" in result.stderr
    assert "--validation-host" in result.stderr


def test_receive_auto_validate_trusts_the_profile_hosts_and_validation_hosts(
    config_path: Path,
) -> None:
    config_path.parent.mkdir(parents=True)
    config_path.write_text(
        'default = "dev"\n[profiles.dev]\nservice_client_id = "DEMO_CORP"\n'
        'api_url = "http://127.0.0.1:8750/api/v1"\nauth_url = "https://login.example.com"\n'
        '[profiles.dev.webhooks]\nsignature_user_id = "events-signer"\n'
    )
    result = run_receiving(
        "-o", "json", "--auto-validate", "--validation-host", "hooks.example.org",
        "--timeout", "0.2", send=lambda url: None,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.ndjson[0]["validation_hosts"] == [
        "127.0.0.1:8750",
        "login.example.com:443",
        "hooks.example.org",
    ]


def test_receive_validation_host_that_is_a_url_is_a_usage_error() -> None:
    result = run_cli(
        "receive", "--port", "0", *FLAGS, "--auto-validate",
        "--validation-host", "https://evil.example/x",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "is not HOST or HOST:PORT" in result.stderr


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _big_unsigned(http: httpx.Client, url: str, n: int) -> int:
    """An unsigned request with a 1 MiB EventType: answered 401, shown, and 1 MiB in -o json."""
    body = json.dumps({"EventType": "x" * (1024 * 1024 - 200), "EventId": f"evt-{n}"})
    return http.post(url, content=body, headers={"content-type": "application/json"}).status_code


def _start(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    """``prefctl -o json receive`` whose stdout is a pipe this test reads only when it says so."""
    prefctl = Path(sys.executable).parent / "prefctl"
    process = subprocess.Popen(
        [str(prefctl), "-o", "json", "receive", "--port", "0", *FLAGS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    ready = json.loads(process.stdout.readline())
    return process, ready["url"]


def test_receive_reader_that_never_reads_bounds_memory_and_sigterm_still_stops_it() -> None:
    process, url = _start()
    base = url.rsplit("/", 1)[0]
    try:
        with httpx.Client(timeout=30) as http:
            before = _rss_mb(process.pid)
            for n in range(150):  # 150 MiB of lines for a reader that never reads
                assert _big_unsigned(http, url, n) == 401
            # Still answering while stdout is stuck.
            assert post(url, "evt-while-stuck") == 200
            assert http.get(base + "/healthz").status_code == 200
            grown = _rss_mb(process.pid) - before
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        took = time.monotonic() - started
        assert process.stderr is not None
        err = process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert grown < 80, f"RSS grew by {grown:.0f} MB"
    assert took < 15, f"stopped {took:.1f} s after SIGTERM"
    assert process.returncode == 0
    assert "stdout is not being read" in err
    assert "lines not shown" in err


def test_receive_slow_reader_gets_a_dropped_record_then_the_next_lines() -> None:
    process, url = _start()
    assert process.stdout is not None
    try:
        with httpx.Client(timeout=30) as http:
            for n in range(40):  # 40 MiB while nobody reads: most are dropped
                assert _big_unsigned(http, url, n) == 401
            reading: list[dict[str, Any]] = []
            reader = threading.Thread(
                target=lambda: reading.extend(json.loads(line) for line in process.stdout)  # type: ignore[union-attr]
            )
            reader.start()
            wait_until(lambda: len(reading) >= 2, timeout=20)  # the backlog drains
            assert post(url, "evt-after-the-stall") == 200
            wait_until(lambda: any(r.get("event_id") == "evt-after-the-stall" for r in reading))
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        reader.join(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    notices = [n for n, record in enumerate(reading) if record["type"] == "dropped"]
    lost = sum(reading[n]["lines"] for n in notices)
    assert notices
    assert lost > 0
    # Each notice comes right before the first line written after the ones it counts.
    assert all(reading[n + 1]["type"] == "request" for n in notices)
    assert reading[-1]["type"] == "stopped"
    assert reading[-1]["dropped"] == lost
    shown = [r["event_id"] for r in reading if r["type"] == "request"]
    assert len(shown) + lost == 41
    assert shown[-1] == "evt-after-the-stall"
    assert process.returncode == 0
