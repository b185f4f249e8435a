"""``prefctl receive`` end to end: flags, output lines, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from prefctl.webhooks.signature import SigningCredentials, sign_header
from tests.helpers import CliResult, free_port, run_cli, wait_until
from tests.receiver.asgi import event_body, handshake_body

HASHKEY = "cli-receive-hashkey"
CREDS = SigningCredentials("DEMO_CORP", "events-signer", HASHKEY)
FLAGS = ("--client-id", "DEMO_CORP", "--signature-user-id", "events-signer")


@pytest.fixture(autouse=True)
def hashkey(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFCTL_HASHKEY", HASHKEY)


def healthy(base: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(base + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def run_receiving(*args: str, send: Callable[[str], None]) -> CliResult:
    """Run ``prefctl ARGS receive --port P …`` in a thread, call ``send(webhook_url)``, wait."""
    port = free_port()
    result: list[CliResult] = []
    global_args = [a for a in args if a in ("-o", "json")]
    command_args = [a for a in args if a not in ("-o", "json")]
    thread = threading.Thread(
        target=lambda: result.append(
            run_cli(*global_args, "receive", "--port", str(port), *command_args)
        )
    )
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: bool(result) or healthy(base)(), timeout=15)
        if not result:
            send(base + "/webhooks")
    finally:
        thread.join(30)
    assert result, "prefctl receive did not finish"
    return result[0]


def post(url: str, event_id: str, *, signed: bool = True) -> int:
    now = datetime.now(UTC)
    headers = {"content-type": "application/json"}
    if signed:
        headers["service-webhook"] = sign_header(CREDS, now)
    body = event_body(event_id, event_time=now)
    return httpx.post(url, content=body, headers=headers).status_code


def test_receive_json_prints_ready_then_requests_then_stopped() -> None:
    def send(url: str) -> None:
        assert httpx.post(url, content=handshake_body()).status_code == 200
        assert post(url, "evt-1") == 200
        assert post(url, "evt-forged", signed=False) == 401
        assert post(url, "evt-1") == 200

    result = run_receiving("-o", "json", *FLAGS, "--exit-after", "2", "--timeout", "20", send=send)
    assert result.exit_code == 0, result.stderr
    lines = result.ndjson
    ready, *requests, stopped = lines
    assert ready["type"] == "ready"
    assert ready["url"].endswith("/webhooks")
    assert ready["verify"] is True
    assert (ready["client_id"], ready["signature_user_id"]) == ("DEMO_CORP", "events-signer")
    assert [r["kind"] for r in requests] == ["handshake", "event", "event", "event"]
    first, forged, again = requests[1:]
    assert (first["status"], first["signature"], first["duplicate"]) == (200, "valid", False)
    assert (forged["status"], forged["signature"], forged["reason"]) == (401, "missing", "missing")
    assert (again["duplicate"], again["attempt"]) == (True, 2)
    expected_keys = {
        "type", "time", "kind", "method", "path", "status", "event_type", "event_id",
        "profile_id", "subscription_id", "event_time", "signature", "reason", "detail",
        "duplicate", "attempt", "out_of_order", "latency_ms", "fault", "validation_url",
        "validation_skipped", "forward",
    }  # fmt: skip
    assert set(first) == expected_keys
    assert stopped == {
        "type": "stopped",
        "requests": 4,
        "events": 2,
        "reason": "exit_after",
        "dropped": 0,
    }
    assert HASHKEY not in result.output


def test_receive_table_mode_prints_one_line_per_request() -> None:
    def send(url: str) -> None:
        post(url, "3f2a9c1e-aaaa-bbbb")

    result = run_receiving(*FLAGS, "--exit-after", "1", "--fail-first", "1", send=send)
    assert result.exit_code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert " 500  contacts.email.added" in line
    assert "profile=1001  event=3f2a9c1e…  sig=valid" in line
    assert "fault=fail-first 1/1" in line
    assert "receiving on http://127.0.0.1:" in result.stderr
    assert "faults: 1×500" in result.stderr


def test_receive_without_hashkey_is_a_startup_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFCTL_HASHKEY")
    result = run_cli("receive", "--port", "0", *FLAGS)
    assert result.exit_code == 2
    assert "no webhook Hashkey" in result.stderr
    assert "--no-verify" in result.stderr


def test_receive_no_verify_says_so_in_the_ready_line() -> None:
    def send(url: str) -> None:
        post(url, "evt-unsigned", signed=False)

    result = run_receiving("-o", "json", "--no-verify", "--exit-after", "1", send=send)
    assert result.exit_code == 0, result.stderr
    ready, request, _ = result.ndjson
    assert (ready["verify"], ready["client_id"]) == (False, None)
    assert (request["status"], request["signature"]) == (200, "unverified")


def test_receive_credentials_come_from_the_profile(config_path: Path) -> None:
    config_path.parent.mkdir(parents=True)
    config_path.write_text(
        'default = "dev"\n[profiles.dev]\nservice_client_id = "DEMO_CORP"\n'
        '[profiles.dev.webhooks]\nsignature_user_id = "events-signer"\n'
    )
    result = run_receiving("-o", "json", "--timeout", "0.2", send=lambda url: None)
    assert result.exit_code == 0, result.stderr
    assert result.ndjson[0]["client_id"] == "DEMO_CORP"


def test_receive_timeout_before_exit_after_exits_1() -> None:
    result = run_cli("receive", "--port", "0", *FLAGS, "--exit-after", "1", "--timeout", "0.2")
    assert result.exit_code == 1
    assert "timed out after 0.2 s: 0 of 1 events arrived" in result.stderr


def test_receive_bad_fault_plan_names_the_step(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text("steps = [{ count = 2, status = 503 }, { statuss = 500 }]\n")
    result = run_cli("receive", "--port", "0", *FLAGS, "--fault-plan", str(plan))
    assert result.exit_code == 2
    assert "step 2: unknown key 'statuss'" in result.stderr


def test_receive_busy_port_is_a_clean_error() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run_cli("receive", "--port", str(port), *FLAGS)
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: port {port} on 127.0.0.1 is already in use (another program is listening"
        " there) — choose another with --port\n"
    )


def test_receive_on_an_address_this_machine_does_not_have_says_so_in_words() -> None:
    result = run_cli("receive", "--host", "192.0.2.1", "--port", "0", *FLAGS)  # TEST-NET-1
    assert result.exit_code == 2
    assert result.stderr == (
        "error: cannot listen on 192.0.2.1: it is not an address of this machine — check --host"
        " (127.0.0.1 listens on this machine only)\n"
    )


def test_receive_certificate_for_another_host_is_one_line_exit_2(tmp_path: Path) -> None:
    from prefctl import certs

    certs.init_ca(tmp_path)
    other = certs.issue_server(tmp_path, "example.test")
    prefctl = Path(sys.executable).parent / "prefctl"

    tls = ("--tls-cert", str(other.certificate), "--tls-key", str(other.private_key))

    result = subprocess.run(
        [str(prefctl), "receive", "--port", "0", *FLAGS, *tls],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: the TLS certificate {other.certificate} covers example.test, not 127.0.0.1, "
        "the host in the receiver's URL; clients would refuse it — issue one for 127.0.0.1 "
        "with 'prefctl certs issue --server 127.0.0.1', or set --host to a name it covers"
    ]


def test_receive_record_writes_the_events(tmp_path: Path) -> None:
    recording = tmp_path / "events.ndjson"

    def send(url: str) -> None:
        post(url, "evt-rec")

    result = run_receiving(*FLAGS, "--exit-after", "1", "--record", str(recording), send=send)
    assert result.exit_code == 0, result.stderr
    (line,) = recording.read_text().splitlines()
    assert json.loads(line)["body"]["EventId"] == "evt-rec"


def test_receive_recording_into_a_file_another_receiver_records_is_refused(
    tmp_path: Path,
) -> None:
    # Each would write at its own offset, over the other's lines: the second is refused, one
    # line and exit 2, before it truncates the first one's recording.
    recording = tmp_path / "events.ndjson"
    second: list[subprocess.CompletedProcess[str]] = []

    def send(url: str) -> None:
        post(url, "evt-1")
        command = [sys.executable, "-m", "prefctl", "receive", "--port", "0", *FLAGS]
        second.append(
            subprocess.run(
                [*command, "--record", str(recording), "--timeout", "5"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        )
        post(url, "evt-2")

    result = run_receiving(*FLAGS, "--exit-after", "2", "--record", str(recording), send=send)

    assert result.exit_code == 0, result.stderr
    (refused,) = second
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        f"error: {recording} is being recorded by another prefctl receive — give each receiver"
        " its own --record FILE"
    ]
    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    assert [line["body"]["EventId"] for line in lines] == ["evt-1", "evt-2"]


def test_receive_help_lists_every_option() -> None:
    result = run_cli("receive", "--help")
    assert result.exit_code == 0
    for option in (
        "--no-verify", "--tolerance", "--manual-validation", "--auto-validate", "--respond",
        "--fail-first", "--fail-rate", "--delay", "--fault-plan", "--record", "--redact",
        "--forward-to", "--exit-after", "--timeout", "--tls-cert", "--client-ca",
    ):  # fmt: skip
        assert option in result.stdout


def test_receive_process_stops_cleanly_on_sigterm() -> None:
    port = free_port()
    prefctl = Path(sys.executable).parent / "prefctl"
    env = {**os.environ}
    process = subprocess.Popen(
        [str(prefctl), "-o", "json", "receive", "--port", str(port), *FLAGS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        ready = json.loads(process.stdout.readline())  # type: ignore[union-attr]
        assert ready["type"] == "ready"
        assert post(ready["url"], "evt-live") == 200
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["event_id"] == "evt-live"
    assert lines[-1] == {
        "type": "stopped",
        "requests": 1,
        "events": 1,
        "reason": "signal",
        "dropped": 0,
    }


def test_receive_every_option_is_documented() -> None:
    import re

    help_text = run_cli("receive", "--help").stdout
    options = set(re.findall(r"(--[a-z][a-z-]+)", help_text)) - {"--help"}
    docs = (Path(__file__).resolve().parents[2] / "docs" / "receiver.md").read_text()
    missing = sorted(option for option in options if f"`{option}" not in docs)
    assert not missing, f"options missing from docs/receiver.md: {missing}"


def _receive_process(*args: str) -> subprocess.Popen[str]:
    prefctl = Path(sys.executable).parent / "prefctl"
    return subprocess.Popen(
        [str(prefctl), "-o", "json", "receive", "--port", "0", *FLAGS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_receive_json_timeout_before_exit_after_still_prints_the_stopped_line() -> None:
    process = _receive_process("--exit-after", "5", "--timeout", "1")
    try:
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["type"] == "ready"
    assert lines[-1] == {
        "type": "stopped",
        "requests": 0,
        "events": 0,
        "reason": "timeout",
        "dropped": 0,
    }
    assert err.strip() == "error: timed out after 1 s: 0 of 5 events arrived"


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_receive_json_signal_before_exit_after_still_prints_the_stopped_line(
    stop: signal.Signals,
) -> None:
    process = _receive_process("--exit-after", "3")
    try:
        ready = json.loads(process.stdout.readline())  # type: ignore[union-attr]
        assert post(ready["url"], "evt-before-signal") == 200
        assert json.loads(process.stdout.readline())["event_id"] == "evt-before-signal"  # type: ignore[union-attr]
        process.send_signal(stop)
        out, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, err
    last = json.loads(out.splitlines()[-1])
    assert last == {"type": "stopped", "requests": 1, "events": 1, "reason": "signal", "dropped": 0}
    assert err.strip() == "error: stopped: 1 of 3 events arrived"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--timeout", "nan", "--timeout must be a number of seconds above 0"),
        ("--timeout", "inf", "--timeout must be a number of seconds above 0"),
        ("--timeout", "0", "--timeout must be a number of seconds above 0"),
        ("--timeout", "-1", "--timeout must be a number of seconds above 0"),
        ("--delay", "nan", "--delay: delay must be between 0 and 3600 s"),
        ("--delay", "inf", "--delay: delay must be between 0 and 3600 s"),
        ("--tolerance", "nan", "tolerance must be between 0 and 86400 seconds"),
        ("--tolerance", "inf", "tolerance must be between 0 and 86400 seconds"),
        ("--fail-rate", "nan", "--fail-rate must be between 0 and 1"),
        ("--fail-rate", "inf", "--fail-rate must be between 0 and 1"),
    ],
)
def test_receive_non_finite_or_non_positive_seconds_are_usage_errors(
    option: str, value: str, message: str
) -> None:
    result = run_cli("receive", "--port", "0", *FLAGS, option, value)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {message}")
    assert len(result.stderr.strip().splitlines()) == 1


def _post_signed(url: str, event_id: str, credentials: SigningCredentials) -> httpx.Response:
    now = datetime.now(UTC)
    headers = {"content-type": "application/json", "service-webhook": sign_header(credentials, now)}
    return httpx.post(url, content=event_body(event_id, event_time=now), headers=headers)


def test_receive_hex_signature_is_refused_by_default_with_the_encoding_to_try() -> None:
    hex_creds = SigningCredentials("DEMO_CORP", "events-signer", HASHKEY, encoding="hex")
    answers: list[httpx.Response] = []

    def send(url: str) -> None:
        answers.append(_post_signed(url, "evt-hex", hex_creds))
        # A refused event does not count for --exit-after: this one ends the run.
        answers.append(_post_signed(url, "evt-raw", CREDS))

    result = run_receiving(*FLAGS, "--exit-after", "1", "--timeout", "20", send=send)
    assert [a.status_code for a in answers] == [401, 200]
    assert "matches Base64 of the hex digest: try --signature-encoding hex" in answers[0].text
    line, accepted = result.stdout.splitlines()
    assert "sig=valid" in accepted
    assert "sig=invalid" in line
    assert "(mismatch: Signature does not match; it matches Base64 of the hex digest: " in line


def test_receive_signature_encoding_hex_accepts_hex_and_names_raw_for_raw() -> None:
    hex_creds = SigningCredentials("DEMO_CORP", "events-signer", HASHKEY, encoding="hex")
    answers: list[httpx.Response] = []

    def send(url: str) -> None:
        answers.append(_post_signed(url, "evt-raw", CREDS))
        answers.append(_post_signed(url, "evt-hex", hex_creds))

    args = ("-o", "json", *FLAGS, "--signature-encoding", "hex", "--exit-after", "1")
    result = run_receiving(*args, "--timeout", "10", send=send)
    assert result.exit_code == 0, result.stderr
    assert [a.status_code for a in answers] == [401, 200]
    ready, raw, hexed, _stopped = result.ndjson
    assert ready["signature_encoding"] == "hex"
    assert raw["detail"].endswith("try --signature-encoding raw")
    assert hexed["signature"] == "valid"
