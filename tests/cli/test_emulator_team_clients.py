"""``prefctl emulator clients`` and ``users`` with ``--account`` in a team sandbox: each test twice,
the emulator on SQLite and on PostgreSQL (whose URL the commands find in PREFCTL_STORE, as a team's
shell has it: tests/fixtures/emulator.py); and ``--store`` naming a store on either backend, or a
PostgreSQL server that does not answer."""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from prefctl import certs
from prefctl.clock import SystemClock
from prefctl.config.paths import resolve_data_dir, store_path
from prefctl.emulator import admin
from prefctl.emulator.serve import RunningEmulator
from tests.cli.test_emulator import one_line_error
from tests.helpers import free_port, run_cli


@pytest.fixture(scope="module")
def emulator_backend(emulator_on_both_backends: str) -> str:
    return emulator_on_both_backends


_NUMBERS = itertools.count(1)


def _team() -> str:
    """An account of its own, added to the module's emulator: its name."""
    name = f"TEAM_{next(_NUMBERS)}"
    result = run_cli("-o", "json", "emulator", "accounts", "add", name)
    assert result.exit_code == 0, result.output
    return name


def _json(*args: str) -> Any:
    result = run_cli("-o", "json", "emulator", *args)
    assert result.exit_code == 0, result.output
    return result.json


def _token(emulator: RunningEmulator, client: dict[str, Any], scope: str) -> httpx.Response:
    return httpx.post(
        emulator.token_url,
        auth=(client["client_id"], client["client_secret"]),
        data={"grant_type": "client_credentials", "scope": scope},
        timeout=10,
    )


def test_clients_add_with_account_registers_a_client_whose_tokens_are_that_accounts(
    emulator: RunningEmulator,
) -> None:
    team = _team()

    client = _json("clients", "add", "--account", team, "--name", "ci")

    assert client["service_client_id"] == team
    issued = _token(emulator, client, f"{team}/admin")
    assert issued.status_code == 200, issued.text
    token = issued.json()["access_token"]
    assert jwt.decode(token, options={"verify_signature": False})["scid"] == team
    programs = httpx.get(
        f"{emulator.api_url}/{team}/programs",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert programs.status_code == 200, programs.text
    default = emulator.account.service_client_id
    refused = _token(emulator, client, f"{default}/admin")
    assert refused.json().get("error") == "unauthorized_client"


def test_clients_list_with_account_shows_only_that_accounts_clients(
    emulator: RunningEmulator,
) -> None:
    team, other = _team(), _team()
    mine = _json("clients", "add", "--account", team, "--name", "mine")["client_id"]
    theirs = _json("clients", "add", "--account", other, "--name", "theirs")["client_id"]
    own = _json("clients", "add", "--name", "emulator's own")["client_id"]

    listed = _json("clients", "list", "--account", team)
    default_listed = _json("clients", "list")

    assert {row["service_client_id"] for row in listed} == {team}
    assert mine in [row["client_id"] for row in listed]
    assert len(listed) == 2  # the one 'accounts add' made, and mine
    assert not {theirs, own} & {row["client_id"] for row in listed}
    assert {row["service_client_id"] for row in default_listed} == {
        emulator.account.service_client_id
    }
    assert own in [row["client_id"] for row in default_listed]
    assert not {mine, theirs} & {row["client_id"] for row in default_listed}
    table = run_cli("emulator", "clients", "list", "--account", team)
    assert table.exit_code == 0, table.output
    assert mine in table.stdout
    assert own not in table.stdout


def test_clients_rotate_with_account_replaces_the_secret_and_updates_the_teams_profile(
    emulator: RunningEmulator, config_path: Path
) -> None:
    team = _team()
    profile = tomllib.loads(config_path.read_text())["profiles"][team]
    old = {"client_id": profile["client_id"], "client_secret": profile["client_secret"]}

    rotated = _json("clients", "rotate", old["client_id"], "--account", team, "--overlap", "0")

    assert rotated["client_id"] == old["client_id"]
    assert rotated["profiles_updated"] == [team]
    assert _token(emulator, rotated, f"{team}/admin").status_code == 200
    assert _token(emulator, old, f"{team}/admin").status_code == 401
    assert run_cli("-p", team, "programs", "list").exit_code == 0


def test_clients_rotate_of_another_accounts_client_is_not_found_and_changes_nothing(
    emulator: RunningEmulator,
) -> None:
    team, other = _team(), _team()
    theirs = _json("clients", "add", "--account", other)

    from_team = run_cli("emulator", "clients", "rotate", theirs["client_id"], "--account", team)
    from_default = run_cli("emulator", "clients", "rotate", theirs["client_id"])
    own = emulator.account.client_id
    into_team = run_cli("emulator", "clients", "rotate", own, "--account", team)

    line = one_line_error(from_team, 4)
    assert f"no client '{theirs['client_id']}' in account {team}" in line
    assert f"--account {team}" in line  # the command that lists the ones it has
    assert other not in line
    one_line_error(from_default, 4)
    one_line_error(into_team, 4)
    assert _token(emulator, theirs, f"{other}/admin").status_code == 200  # secret unchanged
    assert run_cli("programs", "list").exit_code == 0  # profile 'local''s client unchanged


def test_clients_add_of_a_certificate_another_account_registered_does_not_name_its_client(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    team, other = _team(), _team()
    certs.init_ca(tmp_path)
    certificate = str(certs.issue_client(tmp_path, "shared-bot").certificate)
    theirs = _json("clients", "add", "--account", other, "--certificate", certificate)

    again = run_cli("emulator", "clients", "add", "--account", team, "--certificate", certificate)

    line = one_line_error(again, 1)
    assert "already registered to a client of another account" in line
    assert theirs["client_id"] not in line


def test_users_add_and_list_with_account_act_on_that_account_only(
    emulator: RunningEmulator,
) -> None:
    team = _team()
    client = _json("clients", "add", "--account", team)
    user_id = f"reader-{team.lower()}"

    added = _json("users", "add", user_id, "--account", team, "-P", "profiles:read")
    listed = _json("users", "list", "--account", team)
    default_listed = _json("users", "list")

    assert (added["service_client_id"], added["permissions"]) == (team, ["profiles:read"])
    assert {row["user_id"] for row in listed} == {"admin", user_id}
    assert {row["service_client_id"] for row in listed} == {team}
    assert user_id not in [row["user_id"] for row in default_listed]
    issued = _token(emulator, client, f"{team}/{user_id}")
    assert issued.status_code == 200, issued.text
    default = emulator.account.service_client_id
    own = {"client_id": emulator.account.client_id, "client_secret": emulator.account.client_secret}
    assert _token(emulator, own, f"{default}/{user_id}").json()["error"] == "invalid_scope"


def test_users_add_an_existing_user_of_the_account_fails_with_exit_1(
    emulator: RunningEmulator,
) -> None:
    team = _team()
    result = run_cli("emulator", "users", "add", "admin", "--account", team)
    assert f"already exists in account {team}" in one_line_error(result, 1)


@pytest.mark.parametrize(
    "command",
    [
        ("clients", "add"),
        ("clients", "list"),
        ("clients", "rotate", "SOME_CLIENT"),
        ("users", "add", "reader"),
        ("users", "list"),
    ],
    ids=" ".join,
)
def test_clients_and_users_commands_with_an_unknown_account_exit_4(
    emulator: RunningEmulator, command: tuple[str, ...]
) -> None:
    result = run_cli("emulator", *command, "--account", "NO_SUCH_TEAM")

    assert "no account 'NO_SUCH_TEAM'" in one_line_error(result, 4)
    assert result.stdout == ""


def test_clients_and_users_commands_with_store_act_on_that_store_on_either_backend(
    store_location: str, tmp_path: Path
) -> None:
    with admin.open_admin_store(tmp_path, store_location) as conn:  # as an emulator made it
        default = admin.bootstrap(conn, SystemClock()).account.service_client_id
    where = ("--store", store_location)
    assert run_cli("emulator", "accounts", "add", "TEAM_A", *where).exit_code == 0

    client = _json("clients", "add", "--account", "TEAM_A", *where)
    rotated = _json("clients", "rotate", client["client_id"], "--account", "TEAM_A", *where)
    _json("users", "add", "auditor", "--account", "TEAM_A", "-P", "events:read", *where)

    assert rotated["client_id"] == client["client_id"]
    clients = _json("clients", "list", "--account", "TEAM_A", *where)
    assert client["client_id"] in [row["client_id"] for row in clients]
    users = _json("users", "list", "--account", "TEAM_A", *where)
    assert [row["user_id"] for row in users] == ["admin", "auditor"]
    defaults = _json("clients", "list", *where)
    assert {row["service_client_id"] for row in defaults} == {default}
    # The data dir's SQLite store was never made: everything went to the store named.
    assert not store_path(resolve_data_dir()).exists()


@pytest.mark.parametrize(
    "command",
    [("clients", "add"), ("clients", "list"), ("users", "add", "reader"), ("users", "list")],
    ids=" ".join,
)
def test_clients_and_users_commands_with_an_unreachable_postgresql_store_exit_5(
    config_path: Path, command: tuple[str, ...]
) -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://prefctl@127.0.0.1:{port}/sandbox"

    result = run_cli("emulator", *command, "--account", "TEAM_A", "--store", url)

    line = one_line_error(result, 5)
    assert f"127.0.0.1:{port}" in line
    assert not store_path(resolve_data_dir()).exists()


def test_clients_add_without_store_reaches_the_postgresql_store_its_data_dirs_emulator_serves(
    postgres_url: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "sandbox"
    where = ("--data-dir", str(data_dir))
    started = run_cli(
        "-o",
        "json",
        "emulator",
        "start",
        "--detach",
        "--port",
        "0",
        *where,
        "--store",
        postgres_url,
    )
    assert started.exit_code == 0, started.output
    try:
        added = run_cli("emulator", "accounts", "add", "TEAM_A", *where)
        assert added.exit_code == 0, added.output

        client = _json("clients", "add", "--account", "TEAM_A", *where)  # no --store, no env

        issued = httpx.post(
            f"{started.json['url']}/oauth2/v1/token",
            auth=(client["client_id"], client["client_secret"]),
            data={"grant_type": "client_credentials", "scope": "TEAM_A/admin"},
            timeout=10,
        )
        assert issued.status_code == 200, issued.text
        claims = jwt.decode(issued.json()["access_token"], options={"verify_signature": False})
        assert claims["scid"] == "TEAM_A"
        listed = _json("clients", "list", "--account", "TEAM_A", *where)
        assert client["client_id"] in [row["client_id"] for row in listed]
        assert not store_path(data_dir).exists()  # no SQLite store was made beside it
    finally:
        assert run_cli("emulator", "stop", *where).exit_code == 0
