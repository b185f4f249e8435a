"""The token endpoint over HTTP: issued tokens, JWKS, metadata, health, and every error answer."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import pytest

from prefctl.clock import SystemClock
from prefctl.emulator import admin
from prefctl.emulator.serve import RunningEmulator
from prefctl.store.db import open_store


@pytest.fixture(scope="module")
def emulator_backend(emulator_on_both_backends: str) -> str:
    """The token endpoint's clients and tokens are in the store: both backends."""
    return emulator_on_both_backends


GRANT = {"grant_type": "client_credentials", "scope": "DEMO_CORP/admin"}


def basic(client_id: str, secret: str) -> dict[str, str]:
    pair = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


def post(emulator: RunningEmulator, **kwargs: Any) -> httpx.Response:
    return httpx.post(emulator.token_url, timeout=10, **kwargs)


def verify_with_jwks(emulator: RunningEmulator, token: str) -> dict[str, Any]:
    """An independent check: PyJWT with the key set fetched over HTTP."""
    jwks = httpx.get(emulator.auth_url + "/oauth2/v1/keys", timeout=10).json()
    kid = jwt.get_unverified_header(token)["kid"]
    key = next(jwt.PyJWK(k) for k in jwks["keys"] if k["kid"] == kid)
    return jwt.decode(
        token, key, algorithms=["RS256"], audience="prefctl-api", issuer=emulator.auth_url
    )


def test_token_with_basic_credentials_verifies_against_jwks(emulator: RunningEmulator) -> None:
    account = emulator.account
    response = post(emulator, data=GRANT, headers=basic(account.client_id, account.client_secret))

    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["scope"] == "DEMO_CORP/admin"
    assert body["expires_in"] == 3600
    claims = verify_with_jwks(emulator, body["access_token"])
    assert claims["sub"] == account.client_id
    assert (claims["scid"], claims["uid"], claims["scope"]) == ("DEMO_CORP", "admin", body["scope"])
    assert claims["exp"] - claims["iat"] == 3600
    assert claims["jti"]


def test_token_with_body_credentials_is_issued(emulator: RunningEmulator) -> None:
    account = emulator.account
    form = {**GRANT, "client_id": account.client_id, "client_secret": account.client_secret}

    response = post(emulator, data=form)

    assert response.status_code == 200
    verify_with_jwks(emulator, response.json()["access_token"])


def test_token_lifetime_follows_the_client_setting(emulator: RunningEmulator) -> None:
    with open_store(emulator.store) as conn:
        new = admin.add_client(conn, SystemClock(), name="short", token_lifetime_minutes=5)
    assert new.secret is not None

    response = post(emulator, data=GRANT, auth=(new.client.client_id, new.secret))

    assert response.json()["expires_in"] == 300
    claims = verify_with_jwks(emulator, response.json()["access_token"])
    assert claims["exp"] - claims["iat"] == 300


def test_each_token_has_its_own_jti(emulator: RunningEmulator) -> None:
    auth = (emulator.account.client_id, emulator.account.client_secret)
    tokens = [post(emulator, data=GRANT, auth=auth).json()["access_token"] for _ in range(2)]

    jtis = {jwt.decode(t, options={"verify_signature": False})["jti"] for t in tokens}

    assert len(jtis) == 2


def test_metadata_names_the_token_endpoint_and_keys(emulator: RunningEmulator) -> None:
    meta = httpx.get(emulator.url + "/.well-known/oauth-authorization-server", timeout=10).json()

    assert meta["issuer"] == emulator.auth_url
    assert meta["token_endpoint"] == emulator.token_url
    assert meta["jwks_uri"] == emulator.auth_url + "/oauth2/v1/keys"
    assert meta["grant_types_supported"] == ["client_credentials"]
    assert "private_key_jwt" in meta["token_endpoint_auth_methods_supported"]


def test_jwks_publishes_public_keys_only(emulator: RunningEmulator) -> None:
    keys = httpx.get(emulator.auth_url + "/oauth2/v1/keys", timeout=10).json()["keys"]

    assert keys
    for key in keys:
        assert key["kty"] == "RSA"
        assert key["alg"] == "RS256"
        assert key["kid"]
        assert "d" not in key
        assert "p" not in key


def test_healthz_reports_ready_with_urls(emulator: RunningEmulator) -> None:
    health = httpx.get(emulator.url + "/healthz", timeout=10).json()

    assert health["status"] == "ready"
    assert health["auth_url"] == emulator.auth_url
    assert health["api_url"] == emulator.api_url


# -- errors ----------------------------------------------------------------------------------------
Request = Callable[[RunningEmulator], httpx.Response]


def _with_secret(form: dict[str, str]) -> Request:
    def send(emulator: RunningEmulator) -> httpx.Response:
        account = emulator.account
        return post(emulator, data=form, auth=(account.client_id, account.client_secret))

    return send


def _raw(content: bytes, content_type: str, *, authenticated: bool = True) -> Request:
    def send(emulator: RunningEmulator) -> httpx.Response:
        headers = {"Content-Type": content_type}
        if authenticated:
            account = emulator.account
            headers |= basic(account.client_id, account.client_secret)
        return post(emulator, content=content, headers=headers)

    return send


def _wrong_basic_secret(emulator: RunningEmulator) -> httpx.Response:
    return post(emulator, data=GRANT, headers=basic(emulator.account.client_id, "wrong"))


def _wrong_body_secret(emulator: RunningEmulator) -> httpx.Response:
    form = {**GRANT, "client_id": emulator.account.client_id, "client_secret": "wrong"}
    return post(emulator, data=form)


def _unknown_client(emulator: RunningEmulator) -> httpx.Response:
    return post(emulator, data=GRANT, headers=basic("x" * 48, emulator.account.client_secret))


def _no_credentials(emulator: RunningEmulator) -> httpx.Response:
    return post(emulator, data=GRANT)


def _two_methods(emulator: RunningEmulator) -> httpx.Response:
    account = emulator.account
    form = {**GRANT, "client_id": account.client_id, "client_secret": account.client_secret}
    return post(emulator, data=form, headers=basic(account.client_id, account.client_secret))


def _bearer_header(emulator: RunningEmulator) -> httpx.Response:
    return post(emulator, data=GRANT, headers={"Authorization": "Bearer abc.def.ghi"})


def _malformed_basic(emulator: RunningEmulator) -> httpx.Response:
    return post(emulator, data=GRANT, headers={"Authorization": "Basic %%%not-base64"})


ERROR_CASES: dict[str, tuple[Request, int, str]] = {
    "json content type": (
        _raw(b'{"grant_type": "client_credentials"}', "application/json"),
        400,
        "invalid_request",
    ),
    "no content type": (
        _raw(b"grant_type=client_credentials&scope=DEMO_CORP/admin", ""),
        400,
        "invalid_request",
    ),
    "latin-1 charset": (
        _raw(
            b"grant_type=client_credentials", "application/x-www-form-urlencoded; charset=latin-1"
        ),
        400,
        "invalid_request",
    ),
    "invalid utf-8": (
        _raw(b"grant_type=\xff\xfe&scope=%ff", "application/x-www-form-urlencoded"),
        400,
        "invalid_request",
    ),
    "repeated parameter": (
        _raw(
            b"grant_type=client_credentials&grant_type=client_credentials&scope=DEMO_CORP/admin",
            "application/x-www-form-urlencoded",
        ),
        400,
        "invalid_request",
    ),
    "oversized body": (
        _raw(b"scope=" + b"a" * 20_000, "application/x-www-form-urlencoded"),
        400,
        "invalid_request",
    ),
    "missing grant_type": (_with_secret({"scope": "DEMO_CORP/admin"}), 400, "invalid_request"),
    "missing scope": (_with_secret({"grant_type": "client_credentials"}), 400, "invalid_request"),
    "two auth methods": (_two_methods, 400, "invalid_request"),
    "password grant": (
        _with_secret({**GRANT, "grant_type": "password"}),
        400,
        "unsupported_grant_type",
    ),
    "scope without slash": (_with_secret({**GRANT, "scope": "DEMO_CORP"}), 400, "invalid_scope"),
    "scope with empty user": (_with_secret({**GRANT, "scope": "DEMO_CORP/"}), 400, "invalid_scope"),
    "unknown user": (_with_secret({**GRANT, "scope": "DEMO_CORP/nobody"}), 400, "invalid_scope"),
    "another account": (
        _with_secret({**GRANT, "scope": "OTHER_CORP/admin"}),
        400,
        "unauthorized_client",
    ),
    "wrong secret in body": (_wrong_body_secret, 401, "invalid_client"),
    "no credentials": (_no_credentials, 401, "invalid_client"),
}
BASIC_CASES: dict[str, Request] = {
    "wrong secret in Basic": _wrong_basic_secret,
    "unknown client in Basic": _unknown_client,
    "Bearer instead of Basic": _bearer_header,
    "malformed Basic": _malformed_basic,
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_token_error_answers_rfc6749_json(emulator: RunningEmulator, case: str) -> None:
    send, status, error = ERROR_CASES[case]

    response = send(emulator)

    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["error"] == error
    assert body["error_description"]
    assert "www-authenticate" not in response.headers


@pytest.mark.parametrize("case", list(BASIC_CASES))
def test_token_basic_failure_is_401_with_challenge(emulator: RunningEmulator, case: str) -> None:
    response = BASIC_CASES[case](emulator)

    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
    assert response.headers["www-authenticate"].startswith("Basic")


def test_token_error_never_echoes_the_secret(emulator: RunningEmulator) -> None:
    secret = emulator.account.client_secret
    form = {**GRANT, "scope": "DEMO_CORP/nobody"}

    response = post(emulator, data=form, auth=(emulator.account.client_id, secret))

    assert secret not in response.text
