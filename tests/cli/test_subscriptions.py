"""``prefctl subscriptions`` against a real emulator and real receivers.

The emulator runs at --time-scale 50 here, so the handshake's 5 s retry delay and 5-minute
manual-validation window take 0.1 s and 6 s.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.receiver.serve import ReceiverConfig, RunningReceiver
from prefctl.receiver.serve import start_in_thread as start_receiver
from prefctl.receiver.validation import TrustedHosts
from prefctl.webhooks.signature import SigningCredentials
from tests.helpers import free_port, run_in_terminal

TIME_SCALE = 50.0


@pytest.fixture(scope="module")
def fast_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    data_dir = tmp_path_factory.mktemp("subscriptions") / "data"
    running = start_in_thread(
        EmulatorConfig(port=free_port(), data_dir=data_dir, time_scale=TIME_SCALE)
    )
    yield running
    running.stop()


@pytest.fixture
def emulator(
    fast_server: RunningEmulator, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> RunningEmulator:
    monkeypatch.setenv("PREFCTL_DATA_DIR", str(fast_server.data_dir))
    return fast_server.write_profile(Path(os.environ["PREFCTL_CONFIG"]))


def receiver_for(emulator: RunningEmulator, **options: Any) -> RunningReceiver:
    account = emulator.account
    credentials = SigningCredentials(
        account.service_client_id, account.signature_user_id, account.hashkey
    )
    return start_receiver(ReceiverConfig(port=0, credentials=credentials, **options))


@pytest.fixture(scope="module")
def receiver(fast_server: RunningEmulator) -> Iterator[RunningReceiver]:
    with receiver_for(fast_server) as running:
        yield running


def create(cli, *args: str) -> Any:
    return cli("-o", "json", "subscriptions", "create", *args)


def test_subscriptions_create_waits_for_the_handshake_and_exits_0_on_succeeded(
    emulator: RunningEmulator, receiver: RunningReceiver, cli
) -> None:
    url = receiver.webhook_url + "?case=create"
    result = create(
        cli, "--name", "crm", "--url", url, "--event", "contacts.email.added:Work,Home",
        "--event", "preference.added", "--event", "tag.added", "--catch-up",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    record = result.json
    assert record["ProvisioningState"] == "Succeeded"
    assert record["CatchUpOnResume"] is True
    assert record["Subscriptions"] == [
        {
            "Entity": "Contacts",
            "EventType": "contacts.email.added",
            "ContactTypes": ["Work", "Home"],
        },
        {"Entity": "Preferences", "EventType": "preference.added", "Filters": ["AllFilters"]},
        {"Entity": "Tags", "EventType": "tag.added"},
    ]
    assert "provisioned (Succeeded)" in result.stderr


def test_subscriptions_create_with_a_proxy_in_the_environment_still_handshakes_direct(
    isolated_env: Path, cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # HTTP(S)_PROXY set on a corporate laptop (before the emulator starts): its handshake, like
    # its deliveries, goes to the subscriber direct, and the CLI reaches it on 127.0.0.1 direct.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{free_port()}")
    config = EmulatorConfig(port=free_port(), data_dir=tmp_path / "data", time_scale=TIME_SCALE)
    running = start_in_thread(config)
    try:
        running.write_profile(Path(os.environ["PREFCTL_CONFIG"]))
        with receiver_for(running) as receiver:
            result = create(
                cli, "--name", "proxied", "--url", receiver.webhook_url, "-e", "tag.added"
            )
    finally:
        running.stop()
    assert result.exit_code == 0, result.output
    assert result.json["ProvisioningState"] == "Succeeded"


def test_subscriptions_create_verbose_on_a_terminal_logs_above_the_spinner(
    emulator: RunningEmulator, receiver: RunningReceiver
) -> None:
    # -v logs while the provisioning spinner runs: each log line on a line of its own, never
    # written into the spinner's line.
    url = receiver.webhook_url + "?case=tty-logs"
    result = run_in_terminal(
        "-v", "subscriptions", "create", "--name", "tty-logs", "--url", url, "-e", "tag.added"
    )
    assert result.exit_code == 0, result.output
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", result.output)
    logs = [line for line in re.split(r"\r\n|\r|\n", shown) if " INFO " in line]
    assert any("/subscriptions/" in line for line in logs), shown  # a GET while it waited
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:", line) for line in logs), shown


def test_subscriptions_create_no_wait_returns_at_once(
    emulator: RunningEmulator, receiver: RunningReceiver, cli
) -> None:
    url = receiver.webhook_url + "?case=nowait"
    result = create(cli, "--name", "nowait", "--url", url, "-e", "tag.deleted", "--no-wait")
    assert result.exit_code == 0, result.output
    assert result.json["ProvisioningState"] == "Creating"


def test_subscriptions_create_to_a_dead_endpoint_exits_1_with_the_reason(
    emulator: RunningEmulator, cli
) -> None:
    url = f"http://127.0.0.1:{free_port()}/hooks"
    result = cli("subscriptions", "create", "--name", "dead", "--url", url, "-e", "tag.added")
    assert result.exit_code == 1
    assert "failed provisioning: " in result.stderr
    assert "Failed" in result.stdout


def test_subscriptions_create_handshake_answered_404_exits_1_after_the_retries(
    emulator: RunningEmulator, cli
) -> None:
    # The emulator itself answers 404 to a POST on an unknown path.
    url = emulator.url + "/no-such-hook"
    result = create(cli, "--name", "answers-404", "--url", url, "-e", "tag.added")
    assert result.exit_code == 1
    assert result.json["ProvisioningState"] == "Failed"
    assert "404" in result.json["ProvisioningError"]
    assert f"subscription {result.json['Id']} failed provisioning: " in result.stderr


def test_subscriptions_failed_hint_update_with_a_new_url_provisions_it(
    emulator: RunningEmulator, receiver: RunningReceiver, cli
) -> None:
    failed = create(cli, "--name", "retry-url", "--url", emulator.url + "/wrong", "-e", "tag.added")
    subscription_id = failed.json["Id"]
    assert failed.exit_code == 1
    assert f"'prefctl subscriptions update {subscription_id} --url URL' with a new Url" in (
        failed.stderr
    )

    fixed = receiver.webhook_url + "?case=failed-new-url"
    result = cli("-o", "json", "subscriptions", "update", str(subscription_id), "--url", fixed)

    assert result.exit_code == 0, result.output
    assert result.json["ProvisioningState"] == "Succeeded"


def test_subscriptions_failed_hint_same_url_needs_delete_and_create(
    emulator: RunningEmulator, cli
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}{ReceiverConfig.path}"  # nothing listens there yet
    failed = create(cli, "--name", "retry-same", "--url", url, "-e", "tag.added")
    subscription_id = str(failed.json["Id"])
    assert failed.exit_code == 1
    assert f"'prefctl subscriptions delete {subscription_id}' and create it again" in (
        failed.stderr
    )
    account = emulator.account
    credentials = SigningCredentials(
        account.service_client_id, account.signature_user_id, account.hashkey
    )
    with start_receiver(ReceiverConfig(port=port, credentials=credentials)) as fixed:
        assert fixed.webhook_url == url
        same = cli("subscriptions", "update", subscription_id, "--url", url)
        assert same.exit_code == 2
        assert "nothing to change" in same.stderr

        assert cli("subscriptions", "delete", subscription_id, "--yes").exit_code == 0
        again = create(cli, "--name", "retry-same", "--url", url, "-e", "tag.added")

    assert again.exit_code == 0, again.output
    assert again.json["ProvisioningState"] == "Succeeded"


def test_subscriptions_create_manual_validation_not_done_times_out_with_the_hint(
    emulator: RunningEmulator, cli
) -> None:
    with receiver_for(emulator, manual_validation=True) as manual:
        result = cli(
            "subscriptions", "create", "--name", "manual", "--url", manual.webhook_url,
            "-e", "tag.added", "--wait-timeout", "1",
        )  # fmt: skip
    assert result.exit_code == 1
    assert "a GET of the validationUrl it received is needed before" in result.stderr
    assert "still AwaitingManualAction after 1 s" in result.stderr


def test_subscriptions_create_manual_validation_done_by_the_endpoint_succeeds(
    emulator: RunningEmulator, cli
) -> None:
    with receiver_for(
        emulator,
        manual_validation=True,
        auto_validate=True,
        validation_hosts=(TrustedHosts.of_url(emulator.api_url),),
    ) as manual:
        result = create(cli, "--name", "auto", "--url", manual.webhook_url, "-e", "tag.added")
    assert result.exit_code == 0, result.output
    assert result.json["ProvisioningState"] == "Succeeded"


def test_subscriptions_create_same_url_and_type_twice_exits_1(
    emulator: RunningEmulator, receiver: RunningReceiver, cli
) -> None:
    url = receiver.webhook_url + "?case=twice"
    assert create(cli, "--name", "one", "--url", url, "-e", "group.added").exit_code == 0
    again = create(cli, "--name", "two", "--url", url, "-e", "group.added")
    assert again.exit_code == 1
    assert "already sends group.added" in again.stderr
    assert "HTTP 409" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "x", "--url", "http://h.example", "-e", "tag.nope"], "unknown event type"),
        (["--name", "x", "--url", "http://h.example", "-e", "tag.added:Vip"], "no filter"),
        (["--url", "http://h.example", "-e", "tag.added"], "missing --name"),
        (
            ["--name", "x", "--url", "ftp://h.example", "-e", "tag.added"],
            "is not an https:// (or http://) URL",
        ),
    ],
)
def test_subscriptions_create_bad_input_is_refused(
    emulator: RunningEmulator, cli, args: list[str], message: str
) -> None:
    result = cli("subscriptions", "create", *args)
    assert result.exit_code in (1, 2)
    assert message in result.stderr


def test_subscriptions_create_from_a_saved_record_with_flags_overriding(
    emulator: RunningEmulator, receiver: RunningReceiver, cli, tmp_path: Path
) -> None:
    # A saved record works as a body: the read-only fields are left out.
    body = {
        "Id": 99,
        "Name": "from-file",
        "Url": receiver.webhook_url + "?case=file",
        "ProvisioningState": "Succeeded",
        "Subscriptions": [{"Entity": "Groups", "EventType": "group.updated"}],
        "Edited": {"CreateDate": "2026-11-21T19:20:30.123Z"},
    }
    path = tmp_path / "sub.json"
    path.write_text(json.dumps(body))
    result = create(cli, "--file", str(path), "--name", "overridden")
    assert result.exit_code == 0, result.output
    assert result.json["Name"] == "overridden"
    assert result.json["Subscriptions"][0]["Groups"] == ["AllGroups"]


def test_subscriptions_list_and_get_by_id_or_name(
    emulator: RunningEmulator, receiver: RunningReceiver, cli
) -> None:
    url = receiver.webhook_url + "?case=list"
    created = create(cli, "--name", "listed", "--url", url, "-e", "customfield.added").json
    listed = cli("-o", "json", "subscriptions", "list")
    assert created["Id"] in [s["Id"] for s in listed.json]
    table = cli("subscriptions", "list")
    assert "listed" in table.stdout
    assert "customfield.added" in table.stdout
    by_name = cli("-o", "json", "subscriptions", "get", "listed")
    by_id = cli("-o", "json", "subscriptions", "get", str(created["Id"]))
    assert by_name.json == by_id.json
    assert by_name.json["Id"] == created["Id"]
    missing = cli("subscriptions", "get", "nobody")
    assert missing.exit_code == 4
    assert "no subscription named 'nobody'" in missing.stderr


def test_subscriptions_update_events_and_url_rerun_the_handshake(
    emulator: RunningEmulator, receiver: RunningReceiver, cli
) -> None:
    url = receiver.webhook_url + "?case=update"
    create(cli, "--name", "upd", "--url", url, "-e", "consent.added", "-e", "consent.updated")
    events = cli(
        "-o", "json", "subscriptions", "update", "upd",
        "--add-event", "consent.deactivated:Marketing", "--remove-event", "consent.added",
    )  # fmt: skip
    assert events.exit_code == 0, events.output
    assert [s["EventType"] for s in events.json["Subscriptions"]] == [
        "consent.updated",
        "consent.deactivated",
    ]
    assert events.json["Subscriptions"][1]["ConsentTypes"] == ["Marketing"]
    moved = cli(
        "-o", "json", "subscriptions", "update", "upd", "--url", url + "&moved=1",
        "--description", "moved",
    )  # fmt: skip
    assert moved.exit_code == 0, moved.output
    assert moved.json["Url"].endswith("&moved=1")
    assert moved.json["ProvisioningState"] == "Succeeded"
    assert "provisioned (Succeeded)" in moved.stderr
    same = cli("subscriptions", "update", "upd", "--description", "moved")
    assert same.exit_code == 2
    assert "nothing to change: the subscription already has these values" in same.stderr
    bare = cli("subscriptions", "update", "upd")
    assert bare.exit_code == 2
    assert "error: nothing to change — pass --url" in bare.stderr


def test_subscriptions_pause_and_resume_set_the_state(
    emulator: RunningEmulator, receiver: RunningReceiver, cli
) -> None:
    url = receiver.webhook_url + "?case=pause"
    create(cli, "--name", "pausing", "--url", url, "-e", "group.deactivated")
    paused = cli("-o", "json", "subscriptions", "pause", "pausing")
    assert paused.exit_code == 0, paused.output
    assert paused.json["State"] == "Paused"
    resumed = cli("-o", "json", "subscriptions", "resume", "pausing")
    assert resumed.json["State"] == "Active"


def test_subscriptions_delete_needs_yes_off_a_terminal(
    emulator: RunningEmulator, receiver: RunningReceiver, cli
) -> None:
    url = receiver.webhook_url + "?case=delete"
    created = create(cli, "--name", "doomed", "--url", url, "-e", "tag.added").json
    assert cli("subscriptions", "delete", "doomed").exit_code == 2
    result = cli("-o", "json", "subscriptions", "delete", "doomed", "--yes")
    assert result.exit_code == 0, result.output
    assert result.json == {
        "id": created["Id"],
        "subscription_id": created["Id"],
        "deleted": True,
    }
    assert cli("subscriptions", "get", str(created["Id"])).exit_code == 4


def test_subscriptions_create_not_a_url_is_a_usage_error_before_any_request(cli) -> None:
    # No emulator runs: a request would fail with exit 5, not 2.
    result = cli("subscriptions", "create", "--name", "x", "--url", "not-a-url", "-e", "tag.added")
    assert result.exit_code == 2
    assert "--url 'not-a-url' is not an https:// (or http://) URL" in result.stderr


@pytest.mark.parametrize(
    ("reason", "hint"),
    [
        (
            "cannot reach https://127.0.0.1:8443/h: the server's TLS certificate is not trusted",
            "prefctl dispatcher tls set --ca",
        ),
        (
            "cannot reach https://127.0.0.1:8443/h: the server closed the connection without "
            "answering",
            "prefctl dispatcher tls set --cert",
        ),
    ],
)
def test_subscriptions_failed_on_tls_in_the_emulators_words_names_the_tls_setting(
    reason: str, hint: str
) -> None:
    from prefctl.api.subscriptions import provisioning_error

    record = {
        "Id": 7,
        "ProvisioningState": "Failed",
        "ProvisioningError": f"3 handshake attempts failed; the last could not connect: {reason}",
    }
    error = provisioning_error(record, 120)
    assert error is not None
    assert hint in (error.hint or "")


def test_subscriptions_failed_on_an_untrusted_certificate_names_the_trust_setting() -> None:
    from prefctl.api.subscriptions import provisioning_error

    record = {
        "Id": 7,
        "ProvisioningState": "Failed",
        "ProvisioningError": "connection failed (ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED]"
        " certificate verify failed: unable to get local issuer certificate)",
    }
    error = provisioning_error(record, 120)
    assert error is not None
    assert "prefctl dispatcher tls set --ca" in (error.hint or "")
    assert "'prefctl subscriptions delete 7' removes it" in (error.hint or "")
