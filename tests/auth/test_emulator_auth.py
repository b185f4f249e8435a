"""The client side of authentication end to end against the real emulator on loopback.

Issued tokens are checked independently with PyJWT against the emulator's JWKS.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import jwt
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from prefctl import certs
from prefctl.auth.httpx_auth import BearerAuth
from prefctl.auth.provider import TokenProvider
from prefctl.clock import SystemClock
from prefctl.config import config_path, load_config, resolve_profile
from prefctl.emulator import admin
from prefctl.emulator.oauth import InvalidTokenError, authenticate_bearer
from prefctl.emulator.serve import RunningEmulator
from tests.helpers import run_cli


def _claims(emulator: RunningEmulator, token: str) -> dict[str, object]:
    """Verify ``token`` with PyJWT and the emulator's published keys, independently of prefctl."""
    keys = httpx.get(f"{emulator.auth_url}/oauth2/v1/keys").json()
    kid = jwt.get_unverified_header(token)["kid"]
    key = next(k for k in jwt.PyJWKSet.from_dict(keys).keys if k.key_id == kid)
    return jwt.decode(token, key.key, algorithms=["RS256"], audience="prefctl-api")


def _token(*args: str) -> str:
    result = run_cli("token", "get", *args)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1
    return result.stdout.strip()


def test_client_secret_basic_gets_a_verifiable_token(emulator: RunningEmulator) -> None:
    claims = _claims(emulator, _token())
    account = emulator.account
    assert claims["sub"] == account.client_id
    assert claims["scope"] == f"{account.service_client_id}/{account.user_id}"
    assert claims["iss"] == emulator.auth_url


def test_client_secret_post_gets_a_verifiable_token(
    emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFCTL_AUTH_METHOD", "client_secret_post")
    claims = _claims(emulator, _token("--force"))
    assert claims["sub"] == emulator.account.client_id


@pytest.mark.parametrize("key_type", ["ec", "rsa"])
def test_certificate_client_registered_with_the_emulator_gets_a_token(
    emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key_type: str
) -> None:
    certs.init_ca(tmp_path)
    issued = certs.issue_client(tmp_path, f"bot-{key_type}", key_type=key_type)  # type: ignore[arg-type]
    added = run_cli(
        "-o", "json", "emulator", "clients", "add", "--certificate", str(issued.certificate)
    )
    assert added.exit_code == 0, added.output
    client_id = added.json["client_id"]
    monkeypatch.setenv("PREFCTL_AUTH_METHOD", "certificate")
    monkeypatch.setenv("PREFCTL_CLIENT_ID", client_id)
    monkeypatch.setenv("PREFCTL_CERTIFICATE", str(issued.certificate))
    monkeypatch.setenv("PREFCTL_PRIVATE_KEY", str(issued.private_key))

    token = _token()
    assert _claims(emulator, token)["sub"] == client_id
    inspected = run_cli("-o", "json", "token", "inspect", "--verify", token)
    assert inspected.exit_code == 0, inspected.output
    assert inspected.json["verified"] is True
    # Each request signs a new assertion (new jti): a second fetch is not a replay.
    assert _token("--force") != token


def test_wrong_secret_is_refused_with_exit_3(
    emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFCTL_CLIENT_SECRET", "w" * 64)
    result = run_cli("token", "get", "--force")
    assert result.exit_code == 3
    assert "invalid_client: client authentication failed" in result.stderr
    assert "w" * 64 not in result.output


def test_scope_of_an_unknown_user_is_refused_with_exit_3(emulator: RunningEmulator) -> None:
    scope = f"{emulator.account.service_client_id}/nobody"
    result = run_cli("token", "get", "--scope", scope)
    assert result.exit_code == 3
    assert "invalid_scope" in result.stderr


def test_token_inspect_verify_against_the_emulator_keys(emulator: RunningEmulator) -> None:
    result = run_cli("token", "inspect", "--verify")
    assert result.exit_code == 0, result.output
    assert "verified" in result.stdout
    assert emulator.account.service_client_id in result.stdout


def _api(emulator: RunningEmulator) -> FastAPI:
    """A REST route guarded by the emulator's own bearer check (revocation included)."""
    app = FastAPI()

    @app.get("/whoami")
    def whoami(request: Request) -> JSONResponse:
        try:
            principal = authenticate_bearer(emulator.context, request.headers.get("authorization"))
        except InvalidTokenError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=401)
        return JSONResponse({"jti": principal.jti})

    return app


def test_bearer_auth_renews_a_revoked_token_once_and_retries(emulator: RunningEmulator) -> None:
    profile = resolve_profile(load_config(config_path()))
    provider = TokenProvider.for_profile(profile, clock=SystemClock())
    first = provider.token()
    first_jti = jwt.decode(first.access_token, options={"verify_signature": False})["jti"]
    with admin.open_admin_store(emulator.data_dir) as conn:
        admin.revoke(conn, SystemClock(), first_jti)

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=_api(emulator))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", auth=BearerAuth(provider)
        ) as client:
            return await client.get("/whoami")

    response = anyio.run(call)
    assert response.status_code == 200
    assert response.json()["jti"] != first_jti
    assert provider.token().access_token != first.access_token


@pytest.mark.parametrize("as_json", [False, True])
def test_token_get_vvv_against_the_emulator_leaks_neither_secret_nor_token(
    emulator: RunningEmulator, as_json: bool
) -> None:
    result = run_cli("-vvv", "token", "get", "--force", *(["--json"] if as_json else []))
    assert result.exit_code == 0, result.output
    token = result.json["access_token"] if as_json else result.stdout.strip()
    assert "oauth2/v1/token" in result.stderr
    assert emulator.account.client_secret not in result.output
    assert token not in result.stderr
    if not as_json:
        assert result.stdout == token + "\n"
