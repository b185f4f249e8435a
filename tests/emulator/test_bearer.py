"""``authenticate_bearer``: what the REST routes rely on to refuse a bad token."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from prefctl.clock import FakeClock
from prefctl.config import paths
from prefctl.emulator import admin
from prefctl.emulator.app import EmulatorContext
from prefctl.emulator.oauth import (
    InvalidTokenError,
    authenticate_bearer,
    issue_token,
    key_ring,
)
from prefctl.errors import EXIT_AUTH, NotFoundError
from prefctl.store.accounts import PERMISSIONS
from prefctl.store.db import transaction

BASE_URL = "http://127.0.0.1:8750"


@dataclass
class Service:
    ctx: EmulatorContext
    boot: admin.Bootstrap
    clock: FakeClock
    data_dir: Path

    def token(self, scope: str = "DEMO_CORP/admin") -> str:
        creds = self.boot.credentials
        form = {
            "grant_type": "client_credentials",
            "scope": scope,
            "client_id": creds.client_id,
            "client_secret": creds.client_secret,
        }
        answer = issue_token(self.ctx, form, None, audiences=[self.ctx.token_url])
        return str(answer["access_token"])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    clock = FakeClock()
    data_dir = tmp_path / "data"
    with admin.open_admin_store(data_dir) as conn:
        boot = admin.bootstrap(conn, clock)
    ctx = EmulatorContext(store_path=paths.store_path(data_dir), base_url=BASE_URL, clock=clock)
    yield Service(ctx, boot, clock, data_dir)
    ctx.close()


def test_bearer_valid_token_gives_user_and_permissions(service: Service) -> None:
    principal = authenticate_bearer(service.ctx, f"Bearer {service.token()}")

    assert principal.service_client_id == "DEMO_CORP"
    assert principal.user_id == "admin"
    assert principal.client_id == service.boot.credentials.client_id
    assert principal.permissions == frozenset(PERMISSIONS)
    assert principal.allows("profiles:write")


def test_bearer_user_holds_only_granted_permissions(service: Service) -> None:
    with admin.open_admin_store(service.data_dir) as conn:
        admin.add_user(conn, service.clock, "reader", ["profiles:read"])

    principal = authenticate_bearer(service.ctx, f"Bearer {service.token('DEMO_CORP/reader')}")

    assert principal.permissions == frozenset({"profiles:read"})
    assert not principal.allows("profiles:write")


def test_bearer_token_is_valid_until_its_last_second(service: Service) -> None:
    token = service.token()
    service.clock.advance(3599)

    assert authenticate_bearer(service.ctx, f"Bearer {token}").user_id == "admin"


def test_bearer_expired_token_is_refused(service: Service) -> None:
    token = service.token()
    service.clock.advance(3600)

    with pytest.raises(InvalidTokenError, match="expired"):
        authenticate_bearer(service.ctx, f"Bearer {token}")


def test_bearer_revoked_token_is_refused(service: Service) -> None:
    token = service.token()
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    with admin.open_admin_store(service.data_dir) as conn:
        revocation = admin.revoke(conn, service.clock, jti)
    assert revocation.token.scope == "DEMO_CORP/admin"

    with pytest.raises(InvalidTokenError, match="revoked"):
        authenticate_bearer(service.ctx, f"Bearer {token}")


def test_bearer_tampered_claims_are_refused(service: Service) -> None:
    token = service.token()
    header, _payload, signature = token.split(".")
    claims = jwt.decode(token, options={"verify_signature": False})
    claims["uid"] = "someone-else"
    forged_payload = jwt.encode(claims, "k" * 32, algorithm="HS256").split(".")[1]

    with pytest.raises(InvalidTokenError, match="does not verify"):
        authenticate_bearer(service.ctx, f"Bearer {header}.{forged_payload}.{signature}")


def test_bearer_token_from_another_issuer_is_refused(service: Service) -> None:
    token = service.token()
    other = EmulatorContext(
        store_path=service.ctx.store_path, base_url="http://127.0.0.1:9999", clock=service.clock
    )
    try:
        with pytest.raises(InvalidTokenError, match="another issuer"):
            authenticate_bearer(other, f"Bearer {token}")
    finally:
        other.close()


def test_bearer_token_for_another_audience_is_refused(service: Service) -> None:
    signer = key_ring(service.ctx).signer
    claims = jwt.decode(service.token(), options={"verify_signature": False})
    claims["aud"] = "someone-else"
    token = jwt.encode(claims, signer.private_key, algorithm="RS256", headers={"kid": signer.kid})

    with pytest.raises(InvalidTokenError, match="not meant"):
        authenticate_bearer(service.ctx, f"Bearer {token}")


def test_bearer_token_signed_by_a_foreign_key_is_refused(service: Service) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = jwt.decode(service.token(), options={"verify_signature": False})
    kid = key_ring(service.ctx).signer.kid
    token = jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": kid})

    with pytest.raises(InvalidTokenError, match="does not verify"):
        authenticate_bearer(service.ctx, f"Bearer {token}")


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic abc", "Bearer not.a.jwt", "token"])
def test_bearer_missing_or_malformed_header_is_refused(
    service: Service, header: str | None
) -> None:
    with pytest.raises(InvalidTokenError) as caught:
        authenticate_bearer(service.ctx, header)

    assert caught.value.exit_code == EXIT_AUTH
    assert caught.value.error == "invalid_token"


def test_revoke_unknown_jti_is_not_found(service: Service) -> None:
    with admin.open_admin_store(service.data_dir) as conn, pytest.raises(NotFoundError):
        admin.revoke(conn, service.clock, "no-such-jti")


def test_revoke_twice_reports_already_revoked(service: Service) -> None:
    jti = jwt.decode(service.token(), options={"verify_signature": False})["jti"]
    with admin.open_admin_store(service.data_dir) as conn:
        first = admin.revoke(conn, service.clock, jti)
        second = admin.revoke(conn, service.clock, jti)

    assert (first.already_revoked, second.already_revoked) == (False, True)


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE users SET is_active = 0 WHERE user_id = 'admin'",
        "DELETE FROM users WHERE user_id = 'admin'",
        "DELETE FROM oauth_clients",
    ],
    ids=["user deactivated", "user removed", "client removed"],
)
def test_bearer_token_of_an_inactive_or_removed_user_or_client_is_refused(
    service: Service, change: str
) -> None:
    token = service.token()
    with admin.open_admin_store(service.data_dir) as conn, transaction(conn):
        conn.execute(change)

    with pytest.raises(InvalidTokenError, match="no longer exists or is inactive"):
        authenticate_bearer(service.ctx, f"Bearer {token}")


def test_bearer_user_whose_permissions_were_withdrawn_holds_none(service: Service) -> None:
    token = service.token()
    with admin.open_admin_store(service.data_dir) as conn, transaction(conn):
        conn.execute("DELETE FROM user_permissions WHERE user_id = 'admin'")

    principal = authenticate_bearer(service.ctx, f"Bearer {token}")

    assert principal.permissions == frozenset()
    assert not principal.allows("profiles:read")
