"""``prefctl dispatcher run`` and ``prefctl dispatcher tls``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from prefctl import certs
from prefctl.receiver.faults import plan_from_options
from prefctl.receiver.serve import ReceiverConfig, start_in_thread
from prefctl.store.db import connect
from tests.dispatcher.engine_helpers import (
    CREDENTIALS,
    new_store,
    queue_events,
    states,
    subscribe,
)
from tests.helpers import free_port, run_cli


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    new_store(path).close()
    return path


def test_dispatcher_run_once_delivers_what_is_due_and_prints_a_summary(store: Path) -> None:
    faults = plan_from_options(respond=413)
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS)) as good:
        bad = start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS, faults=faults))
        conn = connect(store)
        queue_events(conn, subscribe(conn, good.webhook_url), 3, at=time.time())
        queue_events(
            conn, subscribe(conn, bad.webhook_url, name="b"), 1, at=time.time(), prefix="1" * 8
        )
        result = run_cli("dispatcher", "run", "--store", store, "--once", "-o", "json")
        bad.stop()
    assert result.exit_code == 0, result.stderr
    summary = result.json
    assert (summary["delivered"], summary["dead_lettered"]) == (3, 1)
    assert summary["dead_letter_reasons"] == {"PayloadTooLarge": 1}
    assert states(conn) == {"delivered": 3, "dead_lettered": 1}
    conn.close()


def test_dispatcher_run_summary_goes_to_stderr_in_table_mode(store: Path) -> None:
    result = run_cli("dispatcher", "run", "--store", store, "--once")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "delivered: 0" in result.stderr


def test_dispatcher_run_once_on_a_store_without_accounts_has_nothing_to_do(
    tmp_path: Path,
) -> None:
    from prefctl.store.db import open_store

    path = tmp_path / "empty.db"
    with open_store(path):
        pass
    result = run_cli("dispatcher", "run", "--store", path, "--once", "-o", "json")
    assert result.exit_code == 0
    assert result.json["cycles"] == 0


def test_dispatcher_run_without_a_store_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli("dispatcher", "run", "--store", tmp_path / "none.db", "--once")
    assert result.exit_code == 2
    assert "no store at" in result.stderr


def test_dispatcher_run_rejects_a_bad_time_scale(store: Path) -> None:
    result = run_cli("dispatcher", "run", "--store", store, "--once", "--time-scale", "0")
    assert result.exit_code == 2


def test_dispatcher_run_unknown_account_is_not_found(store: Path) -> None:
    result = run_cli("dispatcher", "run", "--store", store, "--once", "--account", "NOPE")
    assert result.exit_code == 4


def test_dispatcher_tls_set_show_and_clear(store: Path, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    ca = certs.init_ca(pki)
    client = certs.issue_client(pki, "dispatcher")
    common = ("--store", str(store), "--account", "DEMO_CORP")
    result = run_cli(
        "dispatcher", "tls", "set", "--cert", client.certificate, "--key", client.private_key,
        "--ca", ca.certificate, *common, "-o", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    record = result.json
    assert record["client_certificate"]["subject"] == "CN=dispatcher"
    assert record["client_certificate"]["sha256"] == client.sha256
    assert len(record["extra_cas"]) == 1
    assert "PRIVATE KEY" not in result.stdout + result.stderr
    shown = run_cli("dispatcher", "tls", "show", *common, "-o", "json")
    assert shown.json == record
    cleared = run_cli("dispatcher", "tls", "clear", *common, "--yes")
    assert cleared.exit_code == 0
    assert (
        run_cli("dispatcher", "tls", "show", *common, "-o", "json").json["client_certificate"]
        is None
    )


def test_dispatcher_tls_set_rejects_a_key_of_another_certificate(
    store: Path, tmp_path: Path
) -> None:
    pki = tmp_path / "pki"
    certs.init_ca(pki)
    one = certs.issue_client(pki, "one")
    other = certs.issue_client(pki, "other")
    result = run_cli(
        "dispatcher", "tls", "set", "--cert", one.certificate, "--key", other.private_key,
        "--store", store, "--account", "DEMO_CORP",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "does not belong" in result.stderr


def test_dispatcher_tls_needs_an_account_when_the_store_has_several(
    store: Path, tmp_path: Path
) -> None:
    result = run_cli("dispatcher", "tls", "show", "--store", store)
    assert result.exit_code == 2
    assert "--account" in result.stderr


def test_dispatcher_tls_set_takes_cert_and_key_together(store: Path, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    certs.init_ca(pki)
    client = certs.issue_client(pki, "one")
    result = run_cli(
        "dispatcher", "tls", "set", "--cert", client.certificate, "--store", store,
        "--account", "DEMO_CORP",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "go together" in result.stderr


def test_dispatcher_run_on_postgresql_delivers_what_is_due(postgres_url: str) -> None:
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS)) as receiver:
        conn = new_store(postgres_url)
        queue_events(conn, subscribe(conn, receiver.webhook_url), 3, at=time.time())
        result = run_cli("dispatcher", "run", "--store", postgres_url, "--once", "-o", "json")
    assert result.exit_code == 0, result.stderr
    assert result.json["delivered"] == 3
    assert states(conn) == {"delivered": 3}
    conn.close()


def test_dispatcher_run_takes_its_store_from_prefctl_store(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_store(postgres_url).close()
    monkeypatch.setenv("PREFCTL_STORE", postgres_url)
    result = run_cli("dispatcher", "run", "--once")
    assert result.exit_code == 0, result.stderr
    assert f"dispatcher on {postgres_url}" in result.stderr


def test_dispatcher_run_with_postgresql_unreachable_says_so_in_one_line_exit_5() -> None:
    url = f"postgresql://prefctl@127.0.0.1:{free_port()}/prefctl"
    result = run_cli("dispatcher", "run", "--store", url, "--once")
    assert result.exit_code == 5
    [line] = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert "cannot reach PostgreSQL at 127.0.0.1:" in line
    assert "Traceback" not in result.stderr


def test_dispatcher_run_with_a_wrong_password_exits_3_without_the_password(
    postgres_password_url: str,
) -> None:
    from tests.fixtures.postgres import WRONG_PASSWORD

    result = run_cli("dispatcher", "run", "--store", postgres_password_url, "--once")
    assert result.exit_code == 3
    assert "refused the credentials" in result.stderr
    assert WRONG_PASSWORD not in result.stderr + result.stdout
