"""``prefctl emulator start --store postgresql://…``: the emulator serves a PostgreSQL database
(a team's shared sandbox) and its dispatcher delivers from it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from prefctl.emulator.serve import EmulatorConfig, start_in_thread
from prefctl.receiver.serve import ReceiverConfig
from prefctl.receiver.serve import start_in_thread as start_receiver
from prefctl.webhooks.signature import SigningCredentials
from tests.helpers import free_port, run_cli, wait_until


def test_emulator_on_postgresql_delivers_a_new_profile_to_its_subscriber(
    postgres_url: str, tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    monkeypatch.setenv("PREFCTL_DATA_DIR", str(data_dir))
    running = start_in_thread(EmulatorConfig(port=0, data_dir=data_dir, store=postgres_url))
    try:
        running.write_profile(Path(os.environ["PREFCTL_CONFIG"]))
        assert running.store == postgres_url
        assert not (data_dir / "emulator.db").exists()  # nothing kept in a SQLite file
        account = running.account
        credentials = SigningCredentials(
            account.service_client_id, account.signature_user_id, account.hashkey
        )
        with start_receiver(ReceiverConfig(port=0, credentials=credentials)) as receiver:
            created = run_cli(
                "subscriptions", "create", "--name", "crm", "--url", receiver.webhook_url,
                "--event", "profile.created",
            )  # fmt: skip
            assert created.exit_code == 0, created.stderr
            profile = tmp_path / "ada.json"
            profile.write_bytes(orjson.dumps({"Emails": [{"Address": "ada@example.com"}]}))
            assert run_cli("profiles", "create", "-f", profile).exit_code == 0

            seen = []

            def delivered() -> bool:
                while not receiver.verdicts.empty():
                    seen.append(receiver.verdicts.get())
                return any(v.event_type == "profile.created" for v in seen)

            wait_until(delivered, 15, what="the new profile's event was not delivered")
        [event] = [v for v in seen if v.event_type == "profile.created"]
        assert event.signature == "valid"
    finally:
        running.stop()


def test_emulator_start_with_postgresql_unreachable_exits_5_naming_the_host(
    tmp_path: Path, isolated_env: Path
) -> None:
    url = f"postgresql://prefctl@127.0.0.1:{free_port()}/prefctl"
    result = run_cli("emulator", "start", "--port", "0", "--data-dir", tmp_path, "--store", url)
    assert result.exit_code == 5
    [line] = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert "cannot reach PostgreSQL at 127.0.0.1:" in line


def test_emulator_start_with_a_wrong_password_exits_3_without_the_password(
    tmp_path: Path, isolated_env: Path, postgres_password_url: str
) -> None:
    from tests.fixtures.postgres import WRONG_PASSWORD

    result = run_cli(
        "emulator", "start", "--port", "0", "--data-dir", tmp_path, "--store", postgres_password_url
    )
    assert result.exit_code == 3
    assert WRONG_PASSWORD not in result.stdout + result.stderr


def test_emulator_start_store_takes_a_postgresql_url_only(
    tmp_path: Path, isolated_env: Path
) -> None:
    result = run_cli(
        "emulator", "start", "--port", "0", "--data-dir", tmp_path, "--store", tmp_path / "x.db"
    )
    assert result.exit_code == 2
    assert "--data-dir" in result.stderr


def test_emulator_writer_process_command_line_never_holds_the_stores_password(
    postgres_url: str, tmp_path: Path, isolated_env: Path
) -> None:
    # The test cluster trusts local logins, so a password in the URL connects and is ignored.
    with_password = postgres_url.replace("://prefctl@", "://prefctl:s3cret-in-url@", 1)
    assert with_password != postgres_url
    running = start_in_thread(
        EmulatorConfig(port=0, data_dir=tmp_path / "data", store=with_password)
    )
    try:
        writers = _children_running("prefctl.emulator.write_process")
        wait_until(lambda: bool(writers()), 15, what="no writer process started")
        for command_line in writers():
            assert b"s3cret-in-url" not in command_line
    finally:
        running.stop()


def _children_running(module: str) -> Callable[[], list[bytes]]:
    """The command lines of this process's children that run ``module``."""

    def found() -> list[bytes]:
        lines = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
            if ppid == os.getpid() and module.encode() in cmdline:
                lines.append(cmdline)
        return lines

    return found
