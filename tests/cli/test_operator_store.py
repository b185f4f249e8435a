"""The operator commands (``deliveries``, ``deadletters``, ``replay``, ``alerts``, ``dispatcher
tls``) on either backend: ``--store PATH|URL`` and ``PREFCTL_STORE`` as ``dispatcher run`` takes
them, and the PostgreSQL database of the emulator serving from the data dir by default."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from prefctl.clock import FakeClock
from prefctl.dispatcher.alerts.mail import Mailer
from prefctl.dispatcher.alerts.monitor import AlertMonitor, DeadLetterNotice
from prefctl.receiver.serve import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.store import Store
from prefctl.store.db import connect
from tests.dispatcher.engine_helpers import CREDENTIALS, queue_events
from tests.dispatcher.ops_helpers import event_id, finish, queue_event
from tests.helpers import free_port, run_cli
from tests.store.service_helpers import add_subscription, open_service_store, subscription_body


@dataclass
class Sandbox:
    """A store with one subscription to a real receiver: event 1 dead-lettered after 2 × 503
    (delivery 1), event 2 queued and due (delivery 2)."""

    store: str
    conn: Store
    receiver: RunningReceiver
    subscription_id: int

    def received(self) -> list[str]:
        seen = []
        while not self.receiver.verdicts.empty():
            verdict = self.receiver.verdicts.get()
            assert verdict.signature == "valid"
            seen.append(str(verdict.event_id))
        return seen


@pytest.fixture
def sandbox(store_location: str) -> Iterator[Sandbox]:
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS)) as receiver:
        conn = open_service_store(store_location)
        body = subscription_body(receiver.webhook_url, name="crm")
        body["Alerts"] = {"Enabled": True, "Recipients": ["ops@example.com"]}
        subscription = add_subscription(conn, body)
        now = time.time()
        [first] = queue_event(conn, 1, [subscription], at=now)
        finish(conn, first.delivery_id, status=503, attempts=2, at=now)
        queue_event(conn, 2, [subscription], at=now)
        try:
            yield Sandbox(store_location, conn, receiver, subscription)
        finally:
            conn.close()


def test_deliveries_list_and_show_read_the_store_given_with_store(sandbox: Sandbox) -> None:
    listed = run_cli("deliveries", "list", "--store", sandbox.store, "-o", "json")
    shown = run_cli("deliveries", "show", "1", "--store", sandbox.store, "-o", "json")

    assert listed.exit_code == 0, listed.stderr
    assert [(r["delivery_id"], r["state"]) for r in listed.json] == [
        (1, "dead_lettered"),
        (2, "queued"),
    ]
    assert shown.exit_code == 0, shown.stderr
    assert [(a["attempt"], a["status"]) for a in shown.json["timeline"]] == [(1, 503), (2, 503)]


def test_deadletters_redrive_requeues_and_dispatcher_run_delivers_it(sandbox: Sandbox) -> None:
    listed = run_cli("deadletters", "list", "--store", sandbox.store, "-o", "json")
    assert listed.exit_code == 0, listed.stderr
    assert [r["event_id"] for r in listed.json] == [event_id(1)]

    redriven = run_cli(
        "deadletters", "redrive", "--subscription", "crm", "--store", sandbox.store, "-o", "json"
    )
    assert redriven.exit_code == 0, redriven.stderr
    assert redriven.json["event_ids"] == [event_id(1)]
    assert "no emulator" in redriven.stderr  # nothing delivers it until a dispatcher runs

    ran = run_cli("dispatcher", "run", "--store", sandbox.store, "--once", "-o", "json")
    assert ran.exit_code == 0, ran.stderr
    assert ran.json["delivered"] == 2
    assert sorted(sandbox.received()) == [event_id(1), event_id(2)]
    after = run_cli("deadletters", "list", "--store", sandbox.store, "-o", "json")
    assert after.json == []


def test_replay_dead_lettered_delivers_them_from_the_store_given(sandbox: Sandbox) -> None:
    result = run_cli(
        "replay", "--dead-lettered", "--store", sandbox.store, "--timeout", "30", "-o", "json"
    )

    assert result.exit_code == 0, result.stderr
    assert (result.json["dispatcher"], result.json["delivered"]) == ("in_process", 1)
    assert event_id(1) in sandbox.received()


def test_alerts_list_and_show_read_the_alerts_of_the_store_given(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    data_dir = tmp_path / "alerts-data"
    monitor = AlertMonitor.open(sandbox.store, Mailer.for_data_dir(data_dir))
    try:
        notice = DeadLetterNotice(event_id(1), sandbox.subscription_id, "PayloadTooLarge", 1, 413)
        monitor.dead_lettered(FakeClock().now(), [notice])
    finally:
        monitor.close()

    listed = run_cli("alerts", "list", "--store", sandbox.store, "-o", "json")
    assert listed.exit_code == 0, listed.stderr
    [alert] = listed.json
    assert (alert["subscription_name"], alert["recipients"]) == ("crm", ["ops@example.com"])
    shown = run_cli("alerts", "show", str(alert["id"]), "--store", sandbox.store, "-o", "json")
    assert shown.exit_code == 0, shown.stderr
    assert event_id(1) in shown.json["body"]


def test_operator_commands_take_the_store_from_prefctl_store(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefctl.cli import _complete

    monkeypatch.setenv("PREFCTL_STORE", sandbox.store)

    listed = run_cli("deliveries", "list", "--state", "queued", "-o", "json")
    dead = run_cli("deadletters", "list", "-o", "json")

    assert listed.exit_code == 0, listed.stderr
    assert [r["delivery_id"] for r in listed.json] == [2]
    assert [r["event_id"] for r in dead.json] == [event_id(1)]
    no_typed_store = SimpleNamespace(params={})
    assert _complete.delivery_ids(no_typed_store, "") == ["2", "1"]
    assert _complete.subscription_refs(no_typed_store, "c") == ["crm"]


def test_dispatcher_tls_show_reads_the_store_given(sandbox: Sandbox) -> None:
    result = run_cli(
        "dispatcher", "tls", "show", "--store", sandbox.store, "--account", "DEMO_CORP",
        "-o", "json",
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    assert (result.json["account"], result.json["client_certificate"]) == ("DEMO_CORP", None)


COMMANDS = [
    ("deliveries", "list"),
    ("deadletters", "list"),
    ("deadletters", "redrive", "--all"),
    ("replay", "--dead-lettered"),
    ("alerts", "list"),
    ("dispatcher", "tls", "show"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_operator_command_with_postgresql_unreachable_says_so_in_one_line_exit_5(
    command: tuple[str, ...],
) -> None:
    url = f"postgresql://prefctl@127.0.0.1:{free_port()}/prefctl"
    result = run_cli(*command, "--store", url)

    assert result.exit_code == 5, result.stderr
    [line] = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert "cannot reach PostgreSQL at 127.0.0.1:" in line
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", COMMANDS[:2], ids=" ".join)
def test_operator_command_with_a_wrong_password_exits_3_without_the_password(
    command: tuple[str, ...], postgres_password_url: str
) -> None:
    from tests.fixtures.postgres import WRONG_PASSWORD

    result = run_cli(*command, "--store", postgres_password_url)

    assert result.exit_code == 3
    assert "refused the credentials" in result.stderr
    assert WRONG_PASSWORD not in result.stderr + result.stdout


def test_operator_command_on_a_database_that_is_no_store_exits_2_and_creates_nothing(
    postgres_url: str,
) -> None:
    result = run_cli("deliveries", "list", "--store", postgres_url)

    assert result.exit_code == 2
    assert "is not a prefctl store" in result.stderr
    conn = connect(postgres_url)
    try:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    finally:
        conn.close()
    assert tables[0] == 0


def test_operator_commands_find_the_postgresql_store_of_the_running_emulator(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    secret = "secret-in-env-7c1d"  # trust authentication ignores it; it must not reach the disk
    monkeypatch.setenv("PREFCTL_DATA_DIR", str(data_dir))
    monkeypatch.setenv("PREFCTL_STORE", f"{postgres_url}?password={secret}")
    started = run_cli("emulator", "start", "--detach", "--port", "0")
    assert started.exit_code == 0, started.stderr
    try:
        monkeypatch.delenv("PREFCTL_STORE")
        conn = connect(postgres_url)
        try:
            [account] = [
                row[0] for row in conn.execute("SELECT service_client_id FROM accounts").fetchall()
            ]
            subscription = add_subscription(conn, subscription_body(name="crm"), account=account)
            [queued] = queue_events(conn, subscription, 1, at=time.time() + 3600, account=account)
            listed = run_cli("deliveries", "list", "-o", "json")
        finally:
            conn.close()
        pid_file = (data_dir / "emulator.pid").read_text(encoding="utf-8")
    finally:
        assert run_cli("emulator", "stop").exit_code == 0

    assert listed.exit_code == 0, listed.stderr
    assert [r["delivery_id"] for r in listed.json] == [queued]
    assert not (data_dir / "emulator.db").exists()  # no SQLite store was made or read
    assert secret not in pid_file
    assert postgres_url in pid_file


def test_without_a_running_emulator_the_default_store_is_the_data_dirs_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    monkeypatch.setenv("PREFCTL_DATA_DIR", str(data_dir))

    result = run_cli("deliveries", "list")

    assert result.exit_code == 2
    assert f"no store at {data_dir}" in result.stderr
    assert os.environ.get("PREFCTL_STORE") is None


def test_deadletters_export_and_purge_act_on_the_store_given(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    exported = tmp_path / "dead.ndjson"

    export = run_cli("deadletters", "export", "--store", sandbox.store, "--file", exported)
    purge = run_cli("deadletters", "purge", "--all", "--yes", "--store", sandbox.store)

    assert export.exit_code == 0, export.stderr
    assert event_id(1) in exported.read_text(encoding="utf-8")
    assert purge.exit_code == 0, purge.stderr
    assert run_cli("deadletters", "list", "--store", sandbox.store, "-o", "json").json == []
