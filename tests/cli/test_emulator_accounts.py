"""``prefctl emulator accounts add / list / remove`` against a running emulator, and ``prefctl api``
with a second account's profile: each test twice, the emulator on SQLite and on PostgreSQL (whose
URL the commands find in PREFCTL_STORE, as a team's shell has it: tests/fixtures/emulator.py)."""

from __future__ import annotations

import itertools
import stat
import tomllib
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from prefctl.clock import SystemClock
from prefctl.config.paths import resolve_data_dir, store_path
from prefctl.emulator import admin
from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.store import Store
from prefctl.store.db import connect
from tests.cli.test_emulator import one_line_error
from tests.helpers import free_port, run_cli


@pytest.fixture(scope="module")
def emulator_backend(emulator_on_both_backends: str) -> str:
    return emulator_on_both_backends


_NUMBERS = itertools.count(1)


def _name() -> str:
    """An account name of its own: one emulator serves the whole module."""
    return f"TEAM_{next(_NUMBERS)}"


def _added(name: str, *extra: str) -> dict[str, Any]:
    result = run_cli("-o", "json", "emulator", "accounts", "add", name, *extra)
    assert result.exit_code == 0, result.output
    record: dict[str, Any] = result.json
    return record


def _token(emulator: RunningEmulator, record: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        emulator.token_url,
        auth=(record["client_id"], record["client_secret"]),
        data={"grant_type": "client_credentials", "scope": f"{record['account']}/admin"},
    )


def test_accounts_add_prints_the_credentials_once_and_writes_a_working_profile(
    emulator: RunningEmulator, config_path: Path
) -> None:
    name = _name()
    result = run_cli("-vvv", "-o", "json", "emulator", "accounts", "add", name)

    assert result.exit_code == 0, result.output
    record = result.json
    assert record["account"] == name
    assert record["profile"] == name
    assert record["environment"] == "Sandbox"
    assert len(record["client_id"]) == 48
    assert len(record["client_secret"]) == 64
    assert record["client_secret"] not in result.stderr
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    config = tomllib.loads(config_path.read_text())
    assert config["default"] == "local"  # the new profile is used with -p NAME only
    profile = config["profiles"][name]
    assert profile["api_url"] == emulator.api_url
    assert profile["service_client_id"] == name

    programs = run_cli("-p", name, "-o", "json", "programs", "list")
    assert programs.exit_code == 0, programs.output
    assert programs.json


def test_accounts_add_production_and_list_shows_accounts_without_secrets(
    emulator: RunningEmulator,
) -> None:
    name = _name()
    secret = _added(name, "--environment", "Production")["client_secret"]

    listed = run_cli("-o", "json", "emulator", "accounts", "list")

    assert listed.exit_code == 0, listed.output
    assert secret not in listed.stdout
    rows = {row["account"]: row for row in listed.json}
    assert rows[name]["environment"] == "Production"
    assert rows[name]["default"] is False
    assert rows[name]["clients"] == 1
    assert rows[emulator.account.service_client_id]["default"] is True
    assert "hashkey" not in rows[name]
    table = run_cli("emulator", "accounts", "list")
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0].split("\t")[:3] == ["ACCOUNT", "ENVIRONMENT", "DEFAULT"]
    assert any(line.startswith(f"{name}\tProduction") for line in table.stdout.splitlines())


def test_accounts_add_an_existing_account_fails_and_leaves_it_unchanged(
    emulator: RunningEmulator,
) -> None:
    name = _name()
    first = _added(name)
    run_cli("config", "remove", name, "--yes")

    again = run_cli("emulator", "accounts", "add", name)

    assert "already exists" in one_line_error(again, 1)
    assert _token(emulator, first).status_code == 200


def test_accounts_add_refuses_a_bad_name_an_existing_profile_or_a_bad_environment(
    emulator: RunningEmulator,
) -> None:
    assert "invalid account name" in one_line_error(
        run_cli("emulator", "accounts", "add", "no/slash"), 2
    )
    assert "default account" in one_line_error(run_cli("emulator", "accounts", "add", "local"), 2)
    taken = _name()
    assert (
        run_cli(
            "config",
            "init",
            taken,
            "--service-client-id",
            "X",
            "--user-id",
            "u",
            "--client-id",
            "x" * 48,
        ).exit_code
        == 0
    )
    assert "already exists" in one_line_error(run_cli("emulator", "accounts", "add", taken), 2)
    bad = run_cli("emulator", "accounts", "add", _name(), "--environment", "Staging")
    assert bad.exit_code == 2
    listed = run_cli("-o", "json", "emulator", "accounts", "list").json
    assert [
        row["account"] for row in listed if "/" in row["account"] or row["account"] == taken
    ] == []


def test_accounts_remove_without_yes_off_a_terminal_refuses_and_keeps_the_account(
    emulator: RunningEmulator,
) -> None:
    record = _added(_name())

    refused = run_cli("emulator", "accounts", "remove", record["account"], stdin="")

    assert "--yes" in one_line_error(refused, 2)
    assert _token(emulator, record).status_code == 200


def test_accounts_remove_an_unknown_account_exits_4(emulator: RunningEmulator) -> None:
    result = run_cli("emulator", "accounts", "remove", "NO_SUCH_TEAM", "--yes")
    assert "no account 'NO_SUCH_TEAM'" in one_line_error(result, 4)


def test_accounts_remove_refuses_the_default_account(emulator: RunningEmulator) -> None:
    default = emulator.account.service_client_id
    result = run_cli("emulator", "accounts", "remove", default, "--yes")
    assert "default account" in one_line_error(result, 1)
    assert run_cli("programs", "list").exit_code == 0


def test_accounts_remove_deletes_the_account_everything_it_owns_and_its_profile(
    emulator: RunningEmulator, config_path: Path
) -> None:
    name = _name()
    record = _added(name)
    token = _token(emulator, record).json()["access_token"]
    api = httpx.Client(
        base_url=f"{emulator.api_url}/{name}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    with api:
        created = api.post("/profiles", json={"Emails": [{"Address": "ann@example.com"}]})
        assert created.status_code == 201, created.text
        subscription = {
            "Name": "crm",
            "Url": "http://127.0.0.1:9/hook",
            "Subscriptions": [{"Entity": "Profile", "EventType": "profile.created"}],
        }
        assert api.post("/subscriptions", json=subscription).status_code == 201
        assert api.put("/settings/webhooks", json={"MaxDeliveryAttempts": 3}).status_code == 200

        result = run_cli("-o", "json", "emulator", "accounts", "remove", name, "--yes")

        assert result.exit_code == 0, result.output
        assert result.json == {"account": name, "removed": True, "profile_removed": True}
        assert api.get("/programs").status_code == 401  # its token is refused at once
    assert _token(emulator, record).status_code == 401
    assert name not in tomllib.loads(config_path.read_text())["profiles"]
    assert _rows_naming(emulator.store, name) == {}
    with closing(connect(str(emulator.store))) as conn:
        issued = "SELECT count(*) FROM issued_tokens WHERE client_id = ?"
        assert conn.execute(issued, (record["client_id"],)).fetchone()[0] == 0
    listed = run_cli("-o", "json", "emulator", "accounts", "list").json
    assert name not in [row["account"] for row in listed]


def _tables_naming_accounts(conn: Store) -> list[str]:
    """The store's tables that have a service_client_id column."""
    if conn.dialect == "postgresql":
        rows = conn.execute(
            "SELECT table_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND column_name = 'service_client_id'"
        )
        return [str(row[0]) for row in rows]
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return [
        table
        for table in tables
        if "service_client_id" in [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    ]


def _rows_naming(store: Path | str, account: str) -> dict[str, int]:
    """Rows of every table that still name ``account``, and (SQLite, whose foreign keys a
    connection may leave unchecked) the store's foreign-key damage."""
    left: dict[str, int] = {}
    with closing(connect(str(store))) as conn:
        for table in _tables_naming_accounts(conn):
            count = conn.execute(
                f"SELECT count(*) FROM {table} WHERE service_client_id = ?",
                (account,),
            ).fetchone()[0]
            if count:
                left[table] = count
        if conn.dialect == "sqlite":
            damage = conn.execute("PRAGMA foreign_key_check").fetchall()
            if damage:
                left["foreign_key_check"] = len(damage)
    return left


def test_api_command_with_a_second_accounts_profile_sees_none_of_the_first_accounts_data(
    emulator: RunningEmulator,
) -> None:
    mine = run_cli(
        "-o",
        "json",
        "api",
        "POST",
        "profiles",
        "--data",
        '{"Emails": [{"Address": "a@x.example"}]}',
    )
    assert mine.exit_code == 0, mine.output
    profile_id = mine.json["ProfileId"]
    other = _added(_name())["profile"]

    read = run_cli("-p", other, "api", "GET", f"profiles/{profile_id}")
    assert read.exit_code == 4, read.output
    changed = run_cli(
        "-p", other, "api", "PUT", f"profiles/{profile_id}", "--data", '{"Emails": []}'
    )
    assert changed.exit_code == 4, changed.output
    deleted = run_cli("-p", other, "api", "DELETE", f"profiles/{profile_id}")
    assert deleted.exit_code == 4, deleted.output
    found = run_cli("-p", other, "-o", "json", "api", "GET", "profiles?email=a@x.example")
    assert found.exit_code == 0, found.output
    assert found.json["Profiles"] == []
    owners_path = f"{emulator.api_url}/{emulator.account.service_client_id}/profiles/{profile_id}"
    forbidden = run_cli("-p", other, "api", "GET", owners_path)
    assert forbidden.exit_code == 3, forbidden.output

    still = run_cli("-o", "json", "api", "GET", f"profiles/{profile_id}")
    assert still.exit_code == 0, still.output
    assert still.json["Emails"][0]["Address"] == "a@x.example"


def test_accounts_profile_follows_the_emulator_when_it_starts_on_another_port(
    tmp_path: Path, config_path: Path
) -> None:
    data_dir = tmp_path / "sandbox"
    first = start_in_thread(
        EmulatorConfig(port=free_port(), data_dir=data_dir, config_path=config_path)
    )
    try:
        name = _added(_name(), "--data-dir", str(data_dir))["profile"]
    finally:
        first.stop()
    second = start_in_thread(
        EmulatorConfig(port=free_port(), data_dir=data_dir, config_path=config_path)
    )
    try:
        profile = tomllib.loads(config_path.read_text())["profiles"][name]
        assert (profile["auth_url"], profile["api_url"]) == (second.auth_url, second.api_url)
        assert run_cli("-p", name, "programs", "list").exit_code == 0
    finally:
        second.stop()


def test_accounts_add_with_force_replaces_a_profile_of_that_name(
    emulator: RunningEmulator, config_path: Path
) -> None:
    name = _name()
    made = run_cli(
        "config",
        "init",
        name,
        "--service-client-id",
        "X",
        "--user-id",
        "u",
        "--client-id",
        "x" * 48,
    )
    assert made.exit_code == 0, made.output

    record = _added(name, "--force")

    profile = tomllib.loads(config_path.read_text())["profiles"][name]
    assert (profile["service_client_id"], profile["client_id"]) == (name, record["client_id"])
    assert run_cli("-p", name, "programs", "list").exit_code == 0


def test_accounts_commands_with_store_act_on_that_store_on_either_backend(
    store_location: str, tmp_path: Path
) -> None:
    with admin.open_admin_store(tmp_path, store_location) as conn:  # as an emulator made it
        default = admin.bootstrap(conn, SystemClock()).account.service_client_id
    name = _name()

    added = run_cli("-o", "json", "emulator", "accounts", "add", name, "--store", store_location)
    assert added.exit_code == 0, added.output
    listed = run_cli("-o", "json", "emulator", "accounts", "list", "--store", store_location)
    assert listed.exit_code == 0, listed.output
    assert {row["account"] for row in listed.json} == {default, name}
    removed = run_cli("emulator", "accounts", "remove", name, "--yes", "--store", store_location)
    assert removed.exit_code == 0, removed.output

    assert _rows_naming(store_location, name) == {}
    # The data dir's SQLite store was never made: everything went to the store named.
    assert not store_path(resolve_data_dir()).exists()


def test_accounts_add_with_store_that_is_no_store_fails_and_creates_none(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    result = run_cli("emulator", "accounts", "add", _name(), "--store", str(missing))
    assert "no store at" in one_line_error(result, 2)
    assert not missing.exists()


def test_accounts_add_without_store_reaches_the_postgresql_store_its_data_dirs_emulator_serves(
    postgres_url: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "sandbox"
    where = ("--data-dir", str(data_dir))
    started = run_cli(
        "emulator", "start", "--detach", "--port", "0", *where, "--store", postgres_url
    )
    assert started.exit_code == 0, started.output
    try:
        name = _added(_name(), *where)["profile"]  # neither --store nor PREFCTL_STORE

        # The emulator serves the new account at once: it is in the store it serves.
        assert run_cli("-p", name, "programs", "list").exit_code == 0
        listed = run_cli("-o", "json", "emulator", "accounts", "list", *where)
        assert name in [row["account"] for row in listed.json]
        assert not store_path(data_dir).exists()  # no SQLite store was made beside it
    finally:
        assert run_cli("emulator", "stop", *where).exit_code == 0
