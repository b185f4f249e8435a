"""``prefctl emulator revoke`` and ``emulator alerts enable/disable`` in a team sandbox: each test
twice, the emulator on SQLite and on PostgreSQL; the store named by ``--store`` (or found in
PREFCTL_STORE, as a team's shell has it: tests/fixtures/emulator.py), a subscription chosen within
one account (``--account``), and a PostgreSQL server that does not answer."""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from prefctl.config import ENV_STORE
from prefctl.config.paths import resolve_data_dir, store_path
from prefctl.emulator.serve import RunningEmulator
from tests.cli.test_emulator import one_line_error
from tests.helpers import free_port, run_cli


@pytest.fixture(scope="module")
def emulator_backend(emulator_on_both_backends: str) -> str:
    return emulator_on_both_backends


@pytest.fixture
def where(emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """``--store`` naming the emulator's store, with PREFCTL_STORE unset: the flag alone finds it."""
    monkeypatch.delenv(ENV_STORE, raising=False)
    return ("--store", str(emulator.store))


_NUMBERS = itertools.count(1)


def _team(config_path: Path, where: tuple[str, ...] = ()) -> dict[str, str]:
    """An account of its own, added to the module's emulator: its profile (name, client)."""
    name = f"TEAM_{next(_NUMBERS)}"
    result = run_cli("emulator", "accounts", "add", name, *where)
    assert result.exit_code == 0, result.output
    profile = tomllib.loads(config_path.read_text())["profiles"][name]
    return {"name": name, **profile}


def _token(emulator: RunningEmulator, client_id: str, secret: str, scope: str) -> str:
    issued = httpx.post(
        emulator.token_url,
        auth=(client_id, secret),
        data={"grant_type": "client_credentials", "scope": scope},
        timeout=10,
    )
    assert issued.status_code == 200, issued.text
    return str(issued.json()["access_token"])


def _programs(emulator: RunningEmulator, account: str, token: str) -> int:
    """The status of a REST API read with ``token``."""
    return httpx.get(
        f"{emulator.api_url}/{account}/programs",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).status_code


def _subscription(profile: str, name: str) -> dict[str, Any]:
    """A new subscription of the account of ``profile``, as the REST API returns it."""
    result = run_cli(
        "-p", profile, "-o", "json", "subscriptions", "create", "--name", name,
        "--url", f"http://127.0.0.1:9/{name}", "-e", "tag.deleted", "--no-wait",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return dict(result.json)


def _alerts(profile: str, name: str) -> Any:
    """The Alerts of a subscription, as the account's own REST API shows them."""
    shown = run_cli("-p", profile, "-o", "json", "subscriptions", "get", name)
    assert shown.exit_code == 0, shown.output
    return shown.json["Alerts"]


def test_revoke_with_store_makes_the_emulator_refuse_the_token_with_401(
    emulator: RunningEmulator, config_path: Path, where: tuple[str, str]
) -> None:
    team = _team(config_path, where)
    token = _token(emulator, team["client_id"], team["client_secret"], f"{team['name']}/admin")
    own = emulator.account
    default = own.service_client_id
    other = _token(emulator, own.client_id, own.client_secret, f"{default}/admin")
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    assert _programs(emulator, team["name"], token) == 200

    result = run_cli("-o", "json", "emulator", "revoke", jti, *where)

    assert result.exit_code == 0, result.output
    assert result.json["jti"] == jti
    assert result.json["scope"] == f"{team['name']}/admin"  # the account it was issued for
    assert result.json["already_revoked"] is False
    assert token not in result.output
    assert _programs(emulator, team["name"], token) == 401
    assert _programs(emulator, default, other) == 200  # other tokens keep working
    again = run_cli("-o", "json", "emulator", "revoke", jti, *where)
    assert again.json["already_revoked"] is True
    if isinstance(emulator.store, str):  # PostgreSQL: no SQLite store was made beside it
        assert not store_path(emulator.data_dir).exists()


def test_revoke_with_store_of_a_jti_it_never_issued_exits_4(
    emulator: RunningEmulator, where: tuple[str, str]
) -> None:
    result = run_cli("emulator", "revoke", "0" * 32, *where)

    assert f"no token with jti '{'0' * 32}'" in one_line_error(result, 4)
    assert result.stdout == ""


def test_alerts_enable_and_disable_with_account_change_only_that_accounts_subscription(
    emulator: RunningEmulator, config_path: Path, where: tuple[str, str]
) -> None:
    team, other = _team(config_path, where), _team(config_path, where)
    mine = _subscription(team["name"], "crm")
    _subscription(other["name"], "crm")  # the same Name in another account: not a second match

    enabled = run_cli(
        "-o", "json", "emulator", "alerts", "enable", "--subscription", "crm",
        "--recipient", "ops@example.com", "--account", team["name"], *where,
    )  # fmt: skip

    assert enabled.exit_code == 0, enabled.output
    assert enabled.json["subscription_id"] == mine["Id"]
    assert enabled.json["recipients"] == ["ops@example.com"]
    assert _alerts(team["name"], "crm") == {"Enabled": True, "Recipients": ["ops@example.com"]}
    assert _alerts(other["name"], "crm") == {"Enabled": False, "Recipients": []}
    by_id = run_cli(
        "emulator", "alerts", "disable", "-s", str(mine["Id"]), "--account", team["name"], *where
    )
    assert by_id.exit_code == 0, by_id.output
    assert _alerts(team["name"], "crm") == {"Enabled": False, "Recipients": []}


def test_alerts_of_another_accounts_subscription_is_not_found_exactly_like_a_missing_one(
    emulator: RunningEmulator, config_path: Path
) -> None:
    team, other = _team(config_path), _team(config_path)
    theirs = _subscription(other["name"], f"theirs-{other['name'].lower()}")
    account = ("--account", team["name"])
    recipient = ("-r", "ops@example.com")

    missing = run_cli("emulator", "alerts", "enable", "-s", "missing", *recipient, *account)
    by_name = run_cli("emulator", "alerts", "enable", "-s", theirs["Name"], *recipient, *account)
    by_id = run_cli("emulator", "alerts", "disable", "-s", str(theirs["Id"]), *account)
    from_default = run_cli("emulator", "alerts", "enable", "-s", theirs["Name"], *recipient)

    expected = one_line_error(missing, 4).replace("'missing'", "'{ref}'")
    assert one_line_error(by_name, 4) == expected.format(ref=theirs["Name"])
    assert one_line_error(by_id, 4) == expected.format(ref=theirs["Id"])
    assert other["name"] not in expected
    assert "no subscription named" in one_line_error(from_default, 4)
    assert by_name.stdout == by_id.stdout == from_default.stdout == ""
    assert _alerts(other["name"], theirs["Name"]) == {"Enabled": False, "Recipients": []}


def test_alerts_enable_with_an_unknown_account_exits_4(emulator: RunningEmulator) -> None:
    result = run_cli(
        "emulator", "alerts", "enable", "-s", "crm", "-r", "ops@example.com",
        "--account", "NO_SUCH_TEAM",
    )  # fmt: skip

    assert "no account 'NO_SUCH_TEAM'" in one_line_error(result, 4)


@pytest.mark.parametrize(
    "command",
    [
        ("revoke", "0123456789abcdef"),
        ("alerts", "enable", "-s", "crm", "-r", "ops@example.com", "--account", "TEAM_A"),
        ("alerts", "disable", "-s", "crm"),
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_revoke_and_alerts_with_an_unreachable_postgresql_store_exit_5(
    config_path: Path, command: tuple[str, ...]
) -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://prefctl@127.0.0.1:{port}/sandbox"

    result = run_cli("emulator", *command, "--store", url)

    assert f"127.0.0.1:{port}" in one_line_error(result, 5)
    assert not store_path(resolve_data_dir()).exists()
