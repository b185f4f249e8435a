"""``prefctl alerts list/show`` over a data dir holding a store and alerts.mbox, and the SMTP
options of ``prefctl emulator start``."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Mapping
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import typer
from aiosmtpd.controller import Controller

from prefctl.clock import FakeClock
from prefctl.dispatcher.alerts import AlertMonitor, DeadLetterNotice, observer
from prefctl.dispatcher.mail import (
    ENV_SMTP_PASSWORD,
    MBOX_FILE,
    SMTP_SETTING,
    Mailer,
    MboxSink,
    SmtpSettings,
)
from prefctl.dispatcher.observer import ObserverContext
from prefctl.emulator import admin, paths
from prefctl.emulator.serve import EmulatorConfig, start_in_thread
from prefctl.store import accounts, subscriptions
from prefctl.store.db import transaction
from tests.helpers import CliResult, free_port, run_cli

RECIPIENT = "ops@example.com"


class Sink:
    """An SMTP server's handler that keeps what it receives."""

    def __init__(self) -> None:
        self.received: list[bytes] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.received.append(envelope.content)
        return "250 OK"


@pytest.fixture(scope="module")
def smtp_port() -> Iterator[int]:
    controller = Controller(Sink(), hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield controller.port
    finally:
        controller.stop()


def data_dir() -> Path:
    return Path(os.environ["PREFCTL_DATA_DIR"])


def add_alerting_subscription(name: str, url: str) -> int:
    with admin.open_admin_store(data_dir()) as conn:
        account = admin.bootstrap(conn, FakeClock()).account.service_client_id
        with transaction(conn):
            record = subscriptions.create_subscription(
                conn,
                account,
                {
                    "Name": name,
                    "Url": url,
                    "Subscriptions": [{"Entity": "Profile", "EventType": "profile.created"}],
                    "Alerts": {"Enabled": True, "Recipients": [RECIPIENT]},
                },
                actor="admin",
                now=0,
            )
            subscriptions.set_provisioning_state(conn, record.id, "Succeeded", now=0)
    return record.id


def dead_letter(
    subscription_id: int, clock: FakeClock, mailer: Mailer, *, event_id: str = "evt-1"
) -> None:
    monitor = AlertMonitor.open(paths.store_path(data_dir()), mailer)
    try:
        notice = DeadLetterNotice(event_id, subscription_id, "PayloadTooLarge", 1, 413, "HTTP 413")
        monitor.dead_lettered(clock.now(), [notice])
    finally:
        monitor.close()


@pytest.fixture
def alerts(isolated_env: Path) -> dict[str, int]:
    """Two subscriptions with one alert each, 10 minutes apart, both in alerts.mbox."""
    clock = FakeClock()
    mailer = Mailer.for_data_dir(data_dir())
    orders = add_alerting_subscription("orders", "https://hooks.example/orders")
    crm = add_alerting_subscription("crm", "https://hooks.example/crm")
    dead_letter(orders, clock, mailer, event_id="evt-orders")
    clock.advance(600)
    dead_letter(crm, clock, mailer, event_id="evt-crm")
    return {"orders": orders, "crm": crm}


def listed(*args: str) -> CliResult:
    result = run_cli("alerts", "list", *args, "-o", "json")
    assert result.exit_code == 0, result.output
    return result


# -- list -----------------------------------------------------------------------------------------
def test_alerts_list_shows_each_alert_with_its_subscription_and_sink(
    alerts: dict[str, int],
) -> None:
    result = run_cli("alerts", "list")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "SUBSCRIPTION" in lines[0]
    assert f"orders ({alerts['orders']})" in lines[2]
    assert f"crm ({alerts['crm']})" in lines[3]
    assert all("opened" in line and "mbox" in line and RECIPIENT in line for line in lines[2:4])


def test_alerts_list_json_uses_snake_case_records(alerts: dict[str, int]) -> None:
    first, second = listed().json

    assert set(first) == {
        "id",
        "message_id",
        "created_at",
        "sent_at",
        "state",
        "sink",
        "smtp_error",
        "account",
        "environment",
        "subscription_id",
        "subscription_name",
        "incident_id",
        "kind",
        "dead_letters",
        "recipients",
        "subject",
    }
    assert first["created_at"] == "2026-01-01T00:00:00.000Z"
    assert second["created_at"] == "2026-01-01T00:10:00.000Z"
    assert (first["subscription_name"], first["dead_letters"]) == ("orders", 1)
    assert (first["state"], first["sink"], first["environment"]) == ("sent", "mbox", "Sandbox")
    assert first["recipients"] == [RECIPIENT]


def test_alerts_list_filters_by_subscription_name_or_id(alerts: dict[str, int]) -> None:
    by_name = listed("--subscription", "crm").json
    by_id = listed("-s", str(alerts["orders"])).json

    assert [a["subscription_name"] for a in by_name] == ["crm"]
    assert [a["subscription_name"] for a in by_id] == ["orders"]


def test_alerts_list_since_drops_older_alerts(alerts: dict[str, int]) -> None:
    recent = listed("--since", "2026-01-01T00:05:00Z").json

    assert [a["subscription_name"] for a in recent] == ["crm"]


def test_alerts_list_bad_since_is_a_usage_error(alerts: dict[str, int]) -> None:
    result = run_cli("alerts", "list", "--since", "yesterday-ish")

    assert result.exit_code == 2
    assert "--since" in result.stderr


def test_alerts_list_without_any_alert_says_so(isolated_env: Path) -> None:
    data_dir().mkdir(parents=True)
    result = run_cli("alerts", "list")

    assert (result.exit_code, result.stdout) == (0, "")
    assert "no alerts" in result.stderr
    assert listed().json == []
    assert not paths.store_path(data_dir()).exists()  # reading never creates a store


def test_alerts_list_unknown_subscription_exits_4(alerts: dict[str, int]) -> None:
    for ref in ("nosuch", "99"):
        result = run_cli("alerts", "list", "-s", ref)

        assert result.exit_code == 4, result.output
        assert result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith(f"error: subscription {ref} not found")


def test_alerts_list_known_subscription_without_alerts_in_the_window_says_none(
    alerts: dict[str, int],
) -> None:
    add_alerting_subscription("quiet", "https://hooks.example/quiet")

    assert listed("-s", "quiet").json == []
    assert listed("-s", "orders", "--since", "2026-01-01T00:05:00Z").json == []


def test_alerts_list_deleted_subscription_is_found_by_its_mbox_alerts(
    alerts: dict[str, int],
) -> None:
    with admin.open_admin_store(data_dir()) as conn, transaction(conn):
        for account in accounts.list_accounts(conn):
            subscriptions.delete_subscription(conn, account.service_client_id, alerts["orders"])

    by_name = listed("-s", "orders").json
    by_id = listed("-s", str(alerts["orders"])).json

    assert [a["subscription_name"] for a in by_name] == ["orders"]
    assert [a["sink"] for a in by_id] == ["mbox"]


def test_alerts_list_and_show_in_a_missing_data_dir_exit_2(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFCTL_DATA_DIR", str(isolated_env / "nonexistent"))

    for args in (("list",), ("show", "1"), ("list", "-s", "orders")):
        result = run_cli("alerts", *args)

        assert result.exit_code == 2, result.output
        assert "no data dir at" in result.stderr
    assert not (isolated_env / "nonexistent").exists()


def test_alerts_list_includes_alerts_sent_by_smtp(isolated_env: Path, smtp_port: int) -> None:
    orders = add_alerting_subscription("orders", "https://hooks.example/orders")
    mailer = Mailer.for_data_dir(data_dir(), SmtpSettings("127.0.0.1", smtp_port))
    dead_letter(orders, FakeClock(), mailer)

    [alert] = listed().json
    assert (alert["sink"], alert["smtp_error"]) == ("smtp", None)
    assert not (data_dir() / MBOX_FILE).exists()


def test_alerts_list_includes_mbox_alerts_of_an_earlier_store(alerts: dict[str, int]) -> None:
    with admin.open_admin_store(data_dir()):
        pass
    admin.reset_store(data_dir())
    MboxSink(data_dir() / MBOX_FILE).deliver(_foreign_message())  # not an alert: skipped

    result = listed()
    assert [(a["id"], a["sink"]) for a in result.json] == [(1, "mbox"), (2, "mbox")]


def _foreign_message() -> EmailMessage:
    message = EmailMessage()
    message["From"] = "someone@example.com"
    message["Subject"] = "hello"
    message["Message-ID"] = "<hello@example.com>"
    message.set_content("not an alert")
    return message


# -- show -----------------------------------------------------------------------------------------
def test_alerts_show_prints_the_email_as_recipients_read_it(alerts: dict[str, int]) -> None:
    result = run_cli("alerts", "show", "1")

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"To: {RECIPIENT}" in out
    assert "Subject: [Sandbox] " in out
    assert 'subscription "orders"' in out
    assert "Url:            https://hooks.example/orders" in out
    assert "  PayloadTooLarge  1" in out
    assert "  HTTP status:  413" in out
    assert "  evt-orders" in out


def test_alerts_show_by_message_id_in_json_has_the_full_text(alerts: dict[str, int]) -> None:
    message_id = listed().json[1]["message_id"]

    result = run_cli("alerts", "show", message_id.strip("<>"), "-o", "json")

    assert result.exit_code == 0, result.output
    record = result.json
    assert record["subscription_name"] == "crm"
    assert record["message"].startswith("From: ")
    assert f"Message-ID: {message_id}" in record["message"]
    assert "evt-crm" in record["body"]


def test_alerts_show_unknown_id_exits_4(alerts: dict[str, int]) -> None:
    result = run_cli("alerts", "show", "42")

    assert result.exit_code == 4
    assert "no alert 42" in result.stderr


# -- SMTP options of emulator start ---------------------------------------------------------------
def test_emulator_start_smtp_options_without_host_are_a_usage_error(isolated_env: Path) -> None:
    result = run_cli("emulator", "start", "--port", "0", "--smtp-starttls")

    assert result.exit_code == 2
    assert "need --smtp-host" in result.stderr


def test_emulator_start_smtp_user_without_password_variable_exits_2(isolated_env: Path) -> None:
    result = run_cli(
        "emulator", "start", "--port", "0", "--smtp-host", "127.0.0.1", "--smtp-user", "bot"
    )

    assert result.exit_code == 2
    assert ENV_SMTP_PASSWORD in result.stderr


def test_emulator_with_smtp_settings_gives_them_to_its_alert_observer(
    tmp_path: Path, smtp_port: int
) -> None:
    smtp = SmtpSettings("127.0.0.1", smtp_port, sender="alerts@demo.example")
    running = start_in_thread(EmulatorConfig(port=0, data_dir=tmp_path / "data", smtp=smtp))
    try:
        settings = running.context.settings
        assert settings[SMTP_SETTING] == smtp
        alerts = _observer_for(running.store_path, settings)
        assert alerts.monitor.mailer.smtp is not None
        assert alerts.monitor.mailer.smtp.settings == smtp
        assert alerts.monitor.mailer.mbox.path == running.data_dir / MBOX_FILE
        alerts.close()
    finally:
        running.stop()


def _observer_for(store_path: Path, settings: Mapping[str, Any]) -> Any:
    conn = sqlite3.connect(store_path)
    try:
        made = observer(ObserverContext(store_path, conn, FakeClock(), 1.0, settings))
    finally:
        conn.close()
    assert made is not None
    return made


def test_smtp_settings_cli_args_parse_back_to_the_same_settings() -> None:
    from prefctl.cli import emulator as emulator_cli

    smtp = SmtpSettings("mail.example", 587, starttls=True, user="bot", sender="a@example.com")
    command = typer.main.get_command(_start_only(emulator_cli.start))

    ctx = command.make_context("start", smtp.cli_args())
    params = ctx.params
    rebuilt = emulator_cli._smtp_settings(
        params["smtp_host"],
        params["smtp_port"],
        params["smtp_starttls"],
        params["smtp_user"],
        params["smtp_from"],
    )
    assert rebuilt == smtp


def _start_only(fn: Any) -> typer.Typer:
    app = typer.Typer()
    app.command()(fn)
    return app


def test_dispatcher_without_smtp_sends_alerts_to_the_mbox_beside_its_store(
    tmp_path: Path,
) -> None:
    store = tmp_path / "emulator.db"
    store.touch()
    alerts = _observer_for(store, {})
    try:
        assert alerts.monitor.mailer.smtp is None
        assert alerts.monitor.mailer.mbox.path == tmp_path / MBOX_FILE
    finally:
        alerts.close()
