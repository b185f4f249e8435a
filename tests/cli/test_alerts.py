"""``prefctl alerts list/show`` over a data dir holding a store and alerts.mbox, and the SMTP
options of ``prefctl emulator start``."""

from __future__ import annotations

import mailbox
import os
from collections.abc import Iterator, Mapping
from email import message_from_bytes, message_from_string
from email.message import EmailMessage
from email.policy import default
from email.utils import getaddresses
from pathlib import Path
from typing import Any

import pytest
import typer
from aiosmtpd.controller import Controller

from prefctl.clock import FakeClock
from prefctl.config import paths
from prefctl.dispatcher.alerts.mail import (
    ENV_SMTP_PASSWORD,
    MBOX_FILE,
    SMTP_SETTING,
    Mailer,
    MboxSink,
    SmtpSettings,
)
from prefctl.dispatcher.alerts.monitor import AlertMonitor, DeadLetterNotice, observer
from prefctl.dispatcher.observer import ObserverContext
from prefctl.emulator import admin
from prefctl.emulator.serve import EmulatorConfig, start_in_thread
from prefctl.store import accounts, subscriptions
from prefctl.store import alerts as alert_store
from prefctl.store.db import connect, open_store, transaction
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
    assert f"orders ({alerts['orders']})" in lines[1]
    assert f"crm ({alerts['crm']})" in lines[2]
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


# -- a store and an mbox kept across a reset, non-ASCII names -------------------------------------
ZURICH = "Bestellungen – Zürich"
JAPANESE = "注文サービス"
LONG = "a-very-long-subscription-name-that-folds-the-subject-" + "x" * 40


@pytest.fixture
def mixed_alerts(isolated_env: Path) -> dict[str, str]:
    """Alerts of a first store, kept only in alerts.mbox after a reset, then alerts of the new
    store (one whose SMTP server refused, so it went to the mbox with its error), subscriptions
    with non-ASCII and long names, and a message in the mbox that is not an alert. Returns the
    Message-IDs of the mbox-only alerts by subscription name."""
    clock = FakeClock()
    mailer = Mailer.for_data_dir(data_dir())
    for name in ("orders", ZURICH):
        url = f"https://hooks.example/{len(name)}"
        dead_letter(add_alerting_subscription(name, url), clock, mailer)
        clock.advance(600)
    old = {alert["subscription_name"]: alert["message_id"] for alert in listed().json}
    admin.reset_store(data_dir())
    MboxSink(data_dir() / MBOX_FILE).deliver(_foreign_message())
    for name in (ZURICH, JAPANESE, LONG):
        subscription = add_alerting_subscription(name, f"https://hooks.example/ü/{len(name)}")
        dead_letter(subscription, clock, mailer, event_id=f"evt-{len(name)}")
        clock.advance(600)
    refusing = Mailer.for_data_dir(data_dir(), SmtpSettings("127.0.0.1", free_port(), timeout=5))
    clock.advance(1800)  # at most one alert per AlertFrequencyMax (30 min) of a subscription
    dead_letter(subscription, clock, refusing, event_id="evt-refused")
    return old


def alert_emails() -> dict[str, EmailMessage]:
    """Every alert email of the data dir, read in full by the email package, by Message-ID: the
    store's text, else the mbox's first."""
    emails: dict[str, EmailMessage] = {}
    for message in mailbox.mbox(data_dir() / MBOX_FILE):
        parsed = message_from_bytes(message.as_bytes(), policy=default)
        if parsed["X-Prefctl-Alert-Id"] is not None:
            emails.setdefault(str(parsed["Message-ID"]), parsed)
    with open_store(paths.store_path(data_dir())) as conn:
        for record in alert_store.list_alerts(conn):
            emails[record.message_id] = message_from_string(record.message, policy=default)
    return emails


def as_its_email_says(message: EmailMessage) -> dict[str, Any]:
    """The listed fields an alert email gives, as the email package reads them."""

    def text(name: str) -> str | None:
        value = message[name]
        return None if value is None else str(value).strip()

    def number(name: str) -> int | None:
        value = message[name]
        return None if value is None else int(str(value))

    return {
        "message_id": str(message["Message-ID"]),
        "account": text("X-Prefctl-Account"),
        "environment": text("X-Prefctl-Environment"),
        "subscription_id": number("X-Prefctl-Subscription-Id"),
        "subscription_name": str(message["X-Prefctl-Subscription-Name"]),
        "incident_id": number("X-Prefctl-Incident-Id"),
        "kind": text("X-Prefctl-Alert-Kind"),
        "dead_letters": number("X-Prefctl-Dead-Letters"),
        "recipients": [address for _, address in getaddresses(message.get_all("To", []))],
        "subject": text("Subject"),
    }


def test_alerts_list_reads_every_alert_as_its_email_says_once(
    mixed_alerts: dict[str, str],
) -> None:
    alerts = listed().json
    emails = alert_emails()

    assert sorted(a["message_id"] for a in alerts) == sorted(emails)
    for alert in alerts:
        email_fields = as_its_email_says(emails[alert["message_id"]])
        assert {key: alert[key] for key in email_fields} == email_fields
    assert [a["created_at"] for a in alerts] == sorted(a["created_at"] for a in alerts)
    names = [a["subscription_name"] for a in alerts]
    assert names == ["orders", ZURICH, ZURICH, JAPANESE, LONG, LONG]
    assert ZURICH in alerts[1]["subject"]
    assert JAPANESE in alerts[3]["subject"]


def test_alerts_list_after_a_reset_gives_mbox_only_alerts_no_sending_record(
    mixed_alerts: dict[str, str],
) -> None:
    alerts = listed().json

    sending = [(a["id"], a["sink"], a["sent_at"] is not None, a["smtp_error"]) for a in alerts]
    assert sending[:5] == [
        (1, "mbox", False, None),  # the first store's, in the mbox only
        (2, "mbox", False, None),
        (1, "mbox", True, None),  # the new store's
        (2, "mbox", True, None),
        (3, "mbox", True, None),
    ]
    assert sending[5][:3] == (4, "mbox", True)
    assert "cannot send through the SMTP server 127.0.0.1" in sending[5][3]
    assert [a["message_id"] for a in alerts[:2]] == list(mixed_alerts.values())


def test_alerts_list_filters_non_ascii_names_across_a_reset(
    mixed_alerts: dict[str, str],
) -> None:
    by_name = listed("--subscription", ZURICH).json
    by_id = listed("-s", "3").json  # LONG in the new store

    assert [(a["id"], a["sent_at"] is None) for a in by_name] == [(2, True), (1, False)]
    assert [a["subscription_name"] for a in by_id] == [LONG, LONG]
    assert listed("-s", JAPANESE, "--since", "2026-01-01T00:35:00Z").json == []


def test_alerts_show_id_shows_the_new_stores_alert_and_the_old_one_by_message_id(
    mixed_alerts: dict[str, str],
) -> None:
    new = run_cli("alerts", "show", "1", "-o", "json")
    old = run_cli("alerts", "show", mixed_alerts["orders"], "-o", "json")

    assert (new.exit_code, old.exit_code) == (0, 0), new.output + old.output
    assert (new.json["subscription_name"], new.json["sent_at"] is None) == (ZURICH, False)
    assert (old.json["id"], old.json["subscription_name"], old.json["sent_at"]) == (
        1,
        "orders",
        None,
    )
    assert old.json["message"] == alert_emails()[mixed_alerts["orders"]].as_string()
    assert "evt-1" in old.json["body"]


def test_alerts_show_prints_non_ascii_text_decoded(mixed_alerts: dict[str, str]) -> None:
    by_id = run_cli("alerts", "show", "2")
    by_message_id = run_cli("alerts", "show", mixed_alerts[ZURICH])

    assert by_id.exit_code == 0, by_id.output
    assert (
        "Subject: [Sandbox] DEMO_CORP: 1 webhook event dead-lettered for subscription"
        in by_id.stdout
    )
    assert f"Subscription:   {JAPANESE} (Id 2)" in by_id.stdout
    assert f"Url:            https://hooks.example/ü/{len(JAPANESE)}" in by_id.stdout
    assert by_message_id.exit_code == 0, by_message_id.output
    assert f"Subscription:   {ZURICH} (Id 2)" in by_message_id.stdout
    assert "sent at" not in by_message_id.stdout


def test_alerts_show_message_id_with_or_without_angle_brackets_is_the_same_alert(
    mixed_alerts: dict[str, str],
) -> None:
    message_id = listed().json[4]["message_id"]

    shown = [run_cli("alerts", "show", ref, "-o", "json") for ref in (message_id, message_id[1:-1])]

    assert [result.exit_code for result in shown] == [0, 0]
    assert shown[0].stdout == shown[1].stdout
    assert shown[0].json["subscription_name"] == LONG


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
    conn = connect(store_path)
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
