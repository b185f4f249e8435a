"""Alert emails: their content, the mbox sink, and SMTP against a real aiosmtpd server on loopback
(plain, and STARTTLS with a login, on a certificate from the development PKI)."""

from __future__ import annotations

import logging
import mailbox
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from prefctl import certs
from prefctl.dispatcher.alerts.mail import (
    DEFAULT_SENDER,
    ENV_SMTP_PASSWORD,
    MBOX_FILE,
    Mailer,
    MboxSink,
    SmtpSettings,
    SmtpSink,
    parse_message,
    read_mbox,
)
from prefctl.dispatcher.alerts.message import AlertContent, compose
from prefctl.dispatcher.alerts.monitor import AlertMonitor, DeadLetterNotice
from prefctl.errors import UsageError
from prefctl.store import alerts as store
from prefctl.store.alert_incidents import Batch, PendingDeadLetter
from tests.helpers import free_port
from tests.store.service_helpers import add_subscription, open_service_store, subscription_body

USER, PASSWORD = "alerts-bot", "smtp-password-for-tests"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@dataclass
class Inbox:
    """What the SMTP server received: one entry per message."""

    messages: list[dict[str, Any]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(
            {
                "mail_from": envelope.mail_from,
                "rcpt_tos": list(envelope.rcpt_tos),
                "message": parse_message(envelope.content),
                "authenticated": bool(session.authenticated),
                "tls": session.ssl is not None,
            }
        )
        return "250 Message accepted for delivery"

    def by_id(self, message_id: str) -> dict[str, Any]:
        [entry] = [m for m in self.messages if m["message"]["Message-ID"] == message_id]
        return entry


@dataclass
class SmtpServer:
    port: int
    inbox: Inbox
    ca_file: Path | None = None


@pytest.fixture(scope="module")
def plain_smtp() -> Iterator[SmtpServer]:
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield SmtpServer(controller.port, inbox)
    finally:
        controller.stop()


def _authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
        USER.encode(),
        PASSWORD.encode(),
    )
    return AuthResult(success=ok, handled=False)


@pytest.fixture(scope="module")
def tls_smtp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmtpServer]:
    pki = tmp_path_factory.mktemp("pki")
    ca = certs.init_ca(pki)
    server_cert = certs.issue_server(pki, "127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server_cert.certificate, server_cert.private_key)
    inbox = Inbox()
    controller = Controller(
        inbox,
        hostname="127.0.0.1",
        port=free_port(),
        tls_context=context,
        require_starttls=True,
        authenticator=_authenticate,
        auth_required=True,
    )
    controller.start()
    try:
        yield SmtpServer(controller.port, inbox, ca.certificate)
    finally:
        controller.stop()


def content(**changes: Any) -> AlertContent:
    latest = PendingDeadLetter(
        event_id="6f1c0a7e-0000-4000-8000-000000000003",
        reason="PayloadTooLarge",
        attempts=1,
        last_status=413,
        last_error="HTTP 413 Payload Too Large",
        first_attempt_at=T0 + 60,
        last_attempt_at=T0 + 60,
        dead_lettered_at=T0 + 60,
    )
    values: dict[str, Any] = {
        "alert_id": 7,
        "kind": "opened",
        "account": "DEMO_CORP",
        "environment": "Production",
        "subscription_id": 12,
        "subscription_name": "orders",
        "url": "https://hooks.example/events",
        "recipients": ("ops@example.com", "oncall@example.com"),
        "incident_id": 3,
        "incident_opened_at": T0,
        "incident_dead_letters": 3,
        "sequence": 1,
        "batch": Batch(
            count=3,
            by_reason={"MaxDeliveryAttemptsExceeded": 2, "PayloadTooLarge": 1},
            first_at=T0,
            last_at=T0 + 60,
            latest=latest,
            sample_event_ids=[
                "6f1c0a7e-0000-4000-8000-000000000001",
                "6f1c0a7e-0000-4000-8000-000000000002",
                "6f1c0a7e-0000-4000-8000-000000000003",
            ],
        ),
        "created_at": T0 + 60,
        "next_alert_at": T0 + 360,
        "recovered_at": None,
        "frequency_min": 5,
        "frequency_max": 30,
        "threshold_max": 15,
    }
    values.update(changes)
    return AlertContent(**values)


def message(message_id: str = "<alert.3.1.1@demo-corp.prefctl>", **changes: Any) -> EmailMessage:
    return compose(content(**changes), message_id=message_id, sender=DEFAULT_SENDER)


# -- content --------------------------------------------------------------------------------------
def test_compose_alert_names_account_environment_subscription_and_url() -> None:
    email = message()

    assert email["To"] == "ops@example.com, oncall@example.com"
    assert email["Subject"] == (
        '[Production] DEMO_CORP: 3 webhook events dead-lettered for subscription "orders" (12)'
    )
    assert email["Date"] == "Thu, 01 Jan 2026 00:01:00 +0000"
    assert email["X-Prefctl-Subscription-Id"] == "12"
    assert email["Auto-Submitted"] == "auto-generated"
    text = email.get_content()
    for expected in (
        "Account:        DEMO_CORP",
        "Environment:    Production",
        "Subscription:   orders (Id 12)",
        "Url:            https://hooks.example/events",
        "Window:         2026-01-01T00:00:00.000Z to 2026-01-01T00:01:00.000Z",
        "Dead letters:   3 in this alert, 3 in the incident",
        "  MaxDeliveryAttemptsExceeded  2",
        "  PayloadTooLarge              1",
        "  HTTP status:  413",
        "  Reason:       PayloadTooLarge",
        "  Error:        HTTP 413 Payload Too Large",
        "Sample EventIds (3 of 3):",
        "  6f1c0a7e-0000-4000-8000-000000000002",
    ):
        assert expected in text, expected


def test_compose_without_http_status_says_there_was_no_response() -> None:
    batch = content().batch
    latest = replace(batch.latest, last_status=None, last_error="connection\nrefused")
    text = message(batch=replace(batch, latest=latest)).get_content()

    assert "HTTP status:  none (no HTTP response)" in text
    assert "Error:        connection refused" in text


def test_compose_with_a_non_ascii_name_round_trips() -> None:
    email = message(subscription_name="Commandes é")

    parsed = parse_message(email.as_bytes())
    assert "Commandes é" in parsed["Subject"]
    assert "Subscription:   Commandes é (Id 12)" in parsed.get_content()


@pytest.mark.parametrize("name_length", range(1, 40))
def test_a_long_subject_folds_after_words_never_before_its_first(name_length: int) -> None:
    """Subjects of 70 to 77 characters, which the email package alone moves whole onto a
    continuation line (``Subject:`` left empty), and longer ones: the first line starts the
    text, every line fits 78 columns, and a reader unfolds the text as it was."""
    email = message(subscription_name="n" * name_length, environment="Sandbox")
    for text in (email.as_string(), email.as_bytes().decode()):
        head = text.split("\n\n", 1)[0]
        subject_line = next(line for line in head.splitlines() if line.startswith("Subject:"))
        assert subject_line.startswith("Subject: [Sandbox] DEMO_CORP:")
        assert max(len(line) for line in head.splitlines()) <= 78
        assert parse_message(text.encode())["Subject"] == email["Subject"]


def test_a_name_longer_than_a_line_stays_on_its_header_s_line_whole() -> None:
    name = "a-very-long-subscription-name-" + "x" * 80
    email = message(subscription_name=name)
    head = email.as_string().split("\n\n", 1)[0].splitlines()
    assert f"X-Prefctl-Subscription-Name: {name}" in head
    assert any(line.startswith("Subject: [Production] DEMO_CORP:") for line in head)
    assert parse_message(email.as_bytes())["X-Prefctl-Subscription-Name"] == name


# -- the mbox -------------------------------------------------------------------------------------
def test_mbox_sink_appends_private_messages_that_mailbox_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "data" / MBOX_FILE
    sink = MboxSink(path)
    sink.deliver(message("<one@demo-corp.prefctl>"))
    sink.deliver(message("<two@demo-corp.prefctl>", kind="paused"))

    assert path.stat().st_mode & 0o777 == 0o600
    box = mailbox.mbox(path)
    assert [m["Message-ID"] for m in box] == ["<one@demo-corp.prefctl>", "<two@demo-corp.prefctl>"]
    assert [m["Message-ID"] for m in read_mbox(path)] == [m["Message-ID"] for m in box]
    assert "alerting paused" in read_mbox(path)[1]["Subject"]


def test_mbox_sink_writes_the_bytes_mailbox_would_without_reading_the_file(
    tmp_path: Path,
) -> None:
    # The sink appends without mailbox.mbox.add, which reads the whole file first on every
    # alert; its bytes must be the ones mailbox writes, quoting included.
    messages = [message("<a@demo-corp.prefctl>"), message("<b@demo-corp.prefctl>")]
    tricky = EmailMessage()
    tricky["Subject"] = "no final newline"
    tricky.set_payload("From the start\nFrom here on, and no newline at the end")
    for email in [*messages, tricky]:
        email.set_unixfrom("From MAILER-DAEMON Thu Jan  1 00:00:00 2026")
    ours, theirs = tmp_path / "ours.mbox", tmp_path / "theirs.mbox"
    for email in [*messages, tricky]:
        MboxSink(ours).deliver(email)
    box = mailbox.mbox(theirs)
    for email in [*messages, tricky]:
        box.add(email)
    box.close()
    assert ours.read_bytes() == theirs.read_bytes()
    assert b"\n>From the start" in ours.read_bytes()


def test_read_mbox_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_mbox(tmp_path / MBOX_FILE) == []


# -- SMTP -----------------------------------------------------------------------------------------
def test_smtp_sink_delivers_to_every_recipient(plain_smtp: SmtpServer) -> None:
    sink = SmtpSink(SmtpSettings("127.0.0.1", plain_smtp.port, sender="alerts@demo.example"))
    sink.deliver(message("<plain@demo-corp.prefctl>"))

    received = plain_smtp.inbox.by_id("<plain@demo-corp.prefctl>")
    assert received["mail_from"] == "alerts@demo.example"
    assert received["rcpt_tos"] == ["ops@example.com", "oncall@example.com"]
    assert "PayloadTooLarge" in received["message"].get_content()


def test_smtp_starttls_with_login_delivers(
    tls_smtp: SmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SMTP_PASSWORD, PASSWORD)
    settings = SmtpSettings(
        "127.0.0.1", tls_smtp.port, starttls=True, user=USER, ca_file=tls_smtp.ca_file
    )
    sent = Mailer(MboxSink(Path("unused.mbox")), SmtpSink(settings)).send(
        message("<tls@demo-corp.prefctl>")
    )

    assert sent.sink == "smtp"
    received = tls_smtp.inbox.by_id("<tls@demo-corp.prefctl>")
    assert received["tls"]
    assert received["authenticated"]


def test_smtp_wrong_password_falls_back_to_the_mbox_without_leaking_it(
    tls_smtp: SmtpServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(ENV_SMTP_PASSWORD, "not-the-password")
    settings = SmtpSettings(
        "127.0.0.1", tls_smtp.port, starttls=True, user=USER, ca_file=tls_smtp.ca_file
    )
    mailer = Mailer(MboxSink(tmp_path / MBOX_FILE), SmtpSink(settings))
    with caplog.at_level(logging.WARNING, logger="prefctl.dispatcher.alerts.mail"):
        sent = mailer.send(message("<refused@demo-corp.prefctl>"))

    assert sent.sink == "mbox"
    assert sent.smtp_error is not None
    assert "refused the login" in sent.smtp_error
    assert "not-the-password" not in sent.smtp_error + caplog.text
    assert "went to" in caplog.text
    assert [m["Message-ID"] for m in read_mbox(tmp_path / MBOX_FILE)] == [
        "<refused@demo-corp.prefctl>"
    ]


def test_smtp_starttls_with_an_untrusted_certificate_falls_back(
    tls_smtp: SmtpServer, tmp_path: Path
) -> None:
    settings = SmtpSettings("127.0.0.1", tls_smtp.port, starttls=True)  # no CA for the dev cert
    sent = Mailer(MboxSink(tmp_path / MBOX_FILE), SmtpSink(settings)).send(message())

    assert sent.sink == "mbox"
    assert sent.smtp_error is not None
    assert sent.smtp_error.endswith(
        "the server's TLS certificate is not trusted (unable to get local issuer certificate)"
    )


def test_smtp_server_down_falls_back_to_the_mbox(tmp_path: Path) -> None:
    settings = SmtpSettings("127.0.0.1", free_port(), timeout=2)
    sent = Mailer(MboxSink(tmp_path / MBOX_FILE), SmtpSink(settings)).send(message())

    assert sent.sink == "mbox"
    assert sent.smtp_error is not None
    assert sent.smtp_error.startswith("cannot send through the SMTP server 127.0.0.1:")
    assert len(read_mbox(tmp_path / MBOX_FILE)) == 1


def test_smtp_without_recipients_goes_to_the_mbox(plain_smtp: SmtpServer, tmp_path: Path) -> None:
    mailer = Mailer(
        MboxSink(tmp_path / MBOX_FILE), SmtpSink(SmtpSettings("127.0.0.1", plain_smtp.port))
    )
    sent = mailer.send(message(recipients=()))

    assert (sent.sink, sent.smtp_error) == ("mbox", "the alert has no recipients")


def test_smtp_user_without_password_variable_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=ENV_SMTP_PASSWORD):
        SmtpSettings("mail.example", 587, starttls=True, user=USER).validate(env={})


def test_smtp_user_without_starttls_to_a_remote_host_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="clear text"):
        SmtpSettings("mail.example", 25, user=USER).validate(env={ENV_SMTP_PASSWORD: "x" * 8})


def test_smtp_user_without_starttls_on_loopback_is_allowed() -> None:
    SmtpSettings("127.0.0.1", 25, user=USER).validate(env={ENV_SMTP_PASSWORD: "x" * 8})


# -- the monitor sending by SMTP ------------------------------------------------------------------
def test_monitor_alert_by_smtp_is_recorded_with_its_message_id(
    plain_smtp: SmtpServer, tmp_path: Path
) -> None:
    conn = open_service_store(tmp_path / "emulator.db")
    body = subscription_body(name="orders")
    body["Alerts"] = {"Enabled": True, "Recipients": ["ops@example.com"]}
    subscription_id = add_subscription(conn, body)
    mailer = Mailer.for_data_dir(tmp_path, SmtpSettings("127.0.0.1", plain_smtp.port))
    monitor = AlertMonitor(conn, mailer)

    monitor.dead_lettered(T0, [DeadLetterNotice("evt-1", subscription_id, "BadRequest", 1, 400)])

    [alert] = store.list_alerts(conn)
    assert (alert.sink, alert.state, alert.smtp_error) == ("smtp", "sent", None)
    received = plain_smtp.inbox.by_id(alert.message_id)
    assert received["rcpt_tos"] == ["ops@example.com"]
    assert received["message"]["X-Prefctl-Alert-Id"] == str(alert.id)
    assert not (tmp_path / MBOX_FILE).exists()
    conn.close()


def test_mbox_writers_and_readers_in_threads_of_one_process_never_collide(tmp_path: Path) -> None:
    import threading
    from email.message import EmailMessage

    from prefctl.dispatcher.alerts.mail import MboxSink, read_mbox

    sink = MboxSink(tmp_path / "alerts.mbox")
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(10):
                message = EmailMessage()
                message["Subject"] = f"alert {n}.{i}"
                message.set_content("body")
                sink.deliver(message)
                read_mbox(sink.path)
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len(read_mbox(sink.path)) == 40
