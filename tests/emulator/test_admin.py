"""Support-team operations on the store: bootstrap, clients, users, reset."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from prefctl.clock import FakeClock
from prefctl.config import paths
from prefctl.emulator import admin
from prefctl.errors import EXIT_USAGE, ConfigError, PrefctlError, UsageError
from prefctl.store import accounts
from prefctl.store.accounts import PERMISSIONS


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_bootstrap_creates_account_client_and_admin(data_dir: Path, clock: FakeClock) -> None:
    with admin.open_admin_store(data_dir) as conn:
        boot = admin.bootstrap(conn, clock)
        user = accounts.get_user(conn, "DEMO_CORP", "admin")
        client = accounts.get_client(conn, boot.credentials.client_id)

    assert boot.created
    assert boot.account.service_client_id == "DEMO_CORP"
    assert boot.account.signature_user_id == "events-signer"
    assert len(boot.account.hashkey) == 64
    assert len(boot.credentials.client_id) == 48
    assert len(boot.credentials.client_secret) == 64
    assert user is not None
    assert user.permissions == PERMISSIONS
    assert client is not None
    assert accounts.secret_matches(client, boot.credentials.client_secret)


def test_bootstrap_twice_keeps_the_first_account(data_dir: Path, clock: FakeClock) -> None:
    with admin.open_admin_store(data_dir) as conn:
        first = admin.bootstrap(conn, clock)
    with admin.open_admin_store(data_dir) as conn:
        second = admin.bootstrap(conn, clock)

    assert not second.created
    assert second.credentials == first.credentials
    assert second.account.hashkey == first.account.hashkey


def test_store_file_is_private(data_dir: Path, clock: FakeClock) -> None:
    with admin.open_admin_store(data_dir) as conn:
        admin.bootstrap(conn, clock)

    assert stat.S_IMODE(paths.store_path(data_dir).stat().st_mode) == 0o600
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700


def test_added_client_secret_is_stored_only_hashed(data_dir: Path, clock: FakeClock) -> None:
    with admin.open_admin_store(data_dir) as conn:
        new = admin.add_client(conn, clock, name="ci")
    assert new.secret is not None
    assert len(new.secret) == 64
    assert len(new.client.client_id) == 48

    files = [paths.store_path(data_dir), Path(f"{paths.store_path(data_dir)}-wal")]
    stored = b"".join(f.read_bytes() for f in files if f.exists())
    assert new.secret.encode() not in stored


def test_added_client_has_its_token_lifetime(data_dir: Path, clock: FakeClock) -> None:
    with admin.open_admin_store(data_dir) as conn:
        admin.add_client(conn, clock, name="short", token_lifetime_minutes=5)
        listed = admin.list_clients(conn, clock)

    assert [c.token_lifetime_minutes for c in listed if c.name == "short"] == [5]


@pytest.mark.parametrize("minutes", [0, -1, 24 * 60 + 1])
def test_client_token_lifetime_out_of_range_is_usage_error(
    data_dir: Path, clock: FakeClock, minutes: int
) -> None:
    with admin.open_admin_store(data_dir) as conn, pytest.raises(UsageError):
        admin.add_client(conn, clock, token_lifetime_minutes=minutes)


def test_malformed_certificate_is_a_one_line_config_error(
    data_dir: Path, clock: FakeClock, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")

    with admin.open_admin_store(data_dir) as conn, pytest.raises(ConfigError) as caught:
        admin.add_client(conn, clock, certificate=bad)

    assert caught.value.exit_code == EXIT_USAGE
    assert "\n" not in caught.value.message


def test_same_certificate_cannot_be_registered_twice(
    data_dir: Path, clock: FakeClock, tmp_path: Path
) -> None:
    from prefctl import certs

    certs.init_ca(tmp_path / "pki", clock=clock)
    issued = certs.issue_client(tmp_path / "pki", "ci-bot", clock=clock)
    with admin.open_admin_store(data_dir) as conn:
        first = admin.add_client(conn, clock, certificate=issued.certificate)
        with pytest.raises(PrefctlError, match="already registered"):
            admin.add_client(conn, clock, certificate=issued.certificate)

    assert first.secret is None
    assert first.client.auth_method == "certificate"
    assert first.client.certificate_thumbprint == issued.sha256


def test_user_with_unknown_permission_lists_the_valid_ones(
    data_dir: Path, clock: FakeClock
) -> None:
    with admin.open_admin_store(data_dir) as conn, pytest.raises(UsageError) as caught:
        admin.add_user(conn, clock, "reader", ["profiles:read", "profiles:delete"])

    assert "profiles:delete" in caught.value.message
    assert caught.value.hint is not None
    assert all(p in caught.value.hint for p in PERMISSIONS)


def test_user_is_added_with_its_permissions(data_dir: Path, clock: FakeClock) -> None:
    with admin.open_admin_store(data_dir) as conn:
        user = admin.add_user(conn, clock, "reader", ["events:read", "profiles:read"])
        users = admin.list_users(conn, clock)

    assert user.permissions == ("profiles:read", "events:read")
    assert [u.user_id for u in users] == ["admin", "reader"]


def test_existing_user_cannot_be_added_again(data_dir: Path, clock: FakeClock) -> None:
    with admin.open_admin_store(data_dir) as conn, pytest.raises(PrefctlError, match="exists"):
        admin.add_user(conn, clock, "admin", [])


@pytest.mark.parametrize("user_id", ["", "a/b", "has space", "x" * 65])
def test_invalid_user_id_is_usage_error(data_dir: Path, clock: FakeClock, user_id: str) -> None:
    with admin.open_admin_store(data_dir) as conn, pytest.raises(UsageError):
        admin.add_user(conn, clock, user_id, [])


def test_reset_wipes_the_store_and_next_bootstrap_starts_anew(
    data_dir: Path, clock: FakeClock
) -> None:
    with admin.open_admin_store(data_dir) as conn:
        before = admin.bootstrap(conn, clock)

    assert admin.reset_store(data_dir)
    assert not paths.store_path(data_dir).exists()
    with admin.open_admin_store(data_dir) as conn:
        after = admin.bootstrap(conn, clock)

    assert after.created
    assert after.credentials.client_id != before.credentials.client_id
