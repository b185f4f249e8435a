"""``emulator clients rotate``: a client's new secret, and the old one accepted for the overlap.

The token endpoint is a real emulator on 127.0.0.1 with an injected clock (the real one shifted, as
background services sleep on it), so the end of the overlap is a step of the clock, not a wait.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from prefctl.clock import SystemClock
from prefctl.config import load_config
from prefctl.emulator import admin
from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.errors import NotFoundError, UsageError
from tests.emulator.routes._api import ShiftedClock
from tests.helpers import free_port, run_cli

GRANT = {"grant_type": "client_credentials", "scope": "DEMO_CORP/admin"}


@pytest.fixture
def clock() -> ShiftedClock:
    return ShiftedClock()


@pytest.fixture
def clocked(tmp_path: Path, clock: ShiftedClock) -> Iterator[RunningEmulator]:
    running = start_in_thread(
        EmulatorConfig(port=free_port(), data_dir=tmp_path / "data", clock=clock)
    )
    try:
        yield running
    finally:
        running.stop()


def token_status(emulator: RunningEmulator, client_id: str, secret: str) -> int:
    """The token endpoint's status for these credentials, checked with Basic and in the body
    (both must agree)."""
    basic = httpx.post(emulator.token_url, data=GRANT, auth=(client_id, secret), timeout=10)
    form = {**GRANT, "client_id": client_id, "client_secret": secret}
    body = httpx.post(emulator.token_url, data=form, timeout=10)
    assert basic.status_code == body.status_code
    if basic.status_code == 401:
        assert basic.json()["error"] == "invalid_client"
    return basic.status_code


def add_client(emulator: RunningEmulator, clock: ShiftedClock) -> tuple[str, str]:
    with admin.open_admin_store(emulator.data_dir) as conn:
        new = admin.add_client(conn, clock, name="ci")
    assert new.secret is not None
    return new.client.client_id, new.secret


def rotate(
    emulator: RunningEmulator,
    clock: ShiftedClock,
    client_id: str,
    overlap_minutes: int = admin.DEFAULT_ROTATION_OVERLAP_MINUTES,
) -> admin.RotatedSecret:
    with admin.open_admin_store(emulator.data_dir) as conn:
        return admin.rotate_client_secret(conn, clock, client_id, overlap_minutes=overlap_minutes)


def test_rotate_old_secret_is_accepted_until_the_overlap_ends_then_refused(
    clocked: RunningEmulator, clock: ShiftedClock
) -> None:
    client_id, old = add_client(clocked, clock)
    rotated = rotate(clocked, clock, client_id, overlap_minutes=30)

    assert rotated.secret != old
    assert len(rotated.secret) == 64
    assert token_status(clocked, client_id, rotated.secret) == 200
    assert token_status(clocked, client_id, old) == 200
    clock.offset = 29 * 60
    assert token_status(clocked, client_id, old) == 200
    clock.offset = 30 * 60
    assert token_status(clocked, client_id, old) == 401  # as a wrong secret is
    assert token_status(clocked, client_id, "x" * 64) == 401
    assert token_status(clocked, client_id, rotated.secret) == 200


def test_rotate_default_overlap_is_60_minutes(
    clocked: RunningEmulator, clock: ShiftedClock
) -> None:
    client_id, old = add_client(clocked, clock)
    rotated = rotate(clocked, clock, client_id)

    assert rotated.previous_valid_until == pytest.approx(clock.now().timestamp() + 3600, abs=5)
    clock.offset = 59 * 60
    assert token_status(clocked, client_id, old) == 200
    clock.offset = 60 * 60
    assert token_status(clocked, client_id, old) == 401


def test_rotate_with_no_overlap_refuses_the_old_secret_at_once(
    clocked: RunningEmulator, clock: ShiftedClock
) -> None:
    client_id, old = add_client(clocked, clock)
    rotated = rotate(clocked, clock, client_id, overlap_minutes=0)

    assert token_status(clocked, client_id, old) == 401
    assert token_status(clocked, client_id, rotated.secret) == 200


def test_rotate_again_ends_the_overlap_of_the_secret_before(
    clocked: RunningEmulator, clock: ShiftedClock
) -> None:
    client_id, first = add_client(clocked, clock)
    second = rotate(clocked, clock, client_id).secret
    third = rotate(clocked, clock, client_id).secret

    assert token_status(clocked, client_id, first) == 401
    assert token_status(clocked, client_id, second) == 200
    assert token_status(clocked, client_id, third) == 200


def test_rotate_unknown_client_is_not_found(clocked: RunningEmulator, clock: ShiftedClock) -> None:
    with pytest.raises(NotFoundError, match="no client 'nope'"):
        rotate(clocked, clock, "nope")


@pytest.mark.parametrize("overlap", [-1, 7 * 24 * 60 + 1])
def test_rotate_overlap_out_of_range_is_a_usage_error(
    clocked: RunningEmulator, clock: ShiftedClock, overlap: int
) -> None:
    client_id, old = add_client(clocked, clock)
    with pytest.raises(UsageError, match="overlap must be 0 to 10080 minutes"):
        rotate(clocked, clock, client_id, overlap_minutes=overlap)
    assert token_status(clocked, client_id, old) == 200  # nothing changed


def test_rotate_local_client_keeps_its_restart_credentials_current(
    clocked: RunningEmulator, clock: ShiftedClock
) -> None:
    rotated = rotate(clocked, clock, clocked.account.client_id, overlap_minutes=0)

    assert rotated.local_client
    with admin.open_admin_store(clocked.data_dir) as conn:
        boot = admin.bootstrap(conn, clock)  # what the next start writes into profile 'local'
    assert boot.credentials.client_secret == rotated.secret


# -- the command ----------------------------------------------------------------------------------
@pytest.fixture
def own_emulator(
    tmp_path: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningEmulator]:
    """An emulator of this test alone, profile 'local' written: rotating its local client must
    not change the credentials other tests use."""
    running = start_in_thread(EmulatorConfig(port=free_port(), data_dir=tmp_path / "own"))
    monkeypatch.setenv("PREFCTL_DATA_DIR", str(running.data_dir))
    try:
        yield running.write_profile(Path(os.environ["PREFCTL_CONFIG"]))
    finally:
        running.stop()


def test_clients_rotate_command_updates_profile_local_and_token_get_keeps_working(
    own_emulator: RunningEmulator,
) -> None:
    old = own_emulator.account.client_secret
    client_id = own_emulator.account.client_id

    result = run_cli("-o", "json", "emulator", "clients", "rotate", client_id, "--overlap", "0")

    assert result.exit_code == 0, result.output
    record = result.json
    new = record["client_secret"]
    assert (record["client_id"], record["overlap_minutes"]) == (client_id, 0)
    assert record["profiles_updated"] == ["local"]
    assert len(new) == 64
    assert new not in result.stderr  # shown once, on stdout only
    assert "the old secret is refused from now on" in result.stderr
    profile = load_config(Path(os.environ["PREFCTL_CONFIG"])).profiles["local"]
    assert profile["client_secret"] == new
    assert token_status(own_emulator, client_id, old) == 401
    token = run_cli("token", "get")
    assert token.exit_code == 0, token.output


def test_clients_rotate_command_table_shows_the_secret_once_and_the_overlap(
    own_emulator: RunningEmulator,
) -> None:
    with admin.open_admin_store(own_emulator.data_dir) as conn:
        new = admin.add_client(conn, SystemClock(), name="ci")
    assert new.secret is not None
    client_id = new.client.client_id

    result = run_cli("emulator", "clients", "rotate", client_id, "-v")

    assert result.exit_code == 0, result.output
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines())
    secret = lines["client_secret"]
    assert lines["client_id"] == client_id
    assert lines["overlap_minutes"] == "60"
    assert "profiles_updated" not in lines  # no profile holds this client's secret
    assert secret not in result.stderr
    assert new.secret not in result.output
    assert "the old secret works until" in result.stderr
    assert token_status(own_emulator, client_id, new.secret) == 200
    assert token_status(own_emulator, client_id, secret) == 200


def test_clients_rotate_command_unknown_client_exits_4(own_emulator: RunningEmulator) -> None:
    result = run_cli("emulator", "clients", "rotate", "no-such-client")
    assert result.exit_code == 4, result.output
    assert "no client 'no-such-client'" in result.stderr


def test_clients_rotate_command_negative_overlap_exits_2(own_emulator: RunningEmulator) -> None:
    client_id = own_emulator.account.client_id
    result = run_cli("emulator", "clients", "rotate", client_id, "--overlap", "-5")
    assert result.exit_code == 2, result.output
    assert "overlap must be 0 to 10080 minutes" in result.stderr
