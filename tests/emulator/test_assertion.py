"""Certificate client authentication: RFC 7523 client assertions at the token endpoint."""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from prefctl.clock import SystemClock
from prefctl.emulator import admin
from prefctl.emulator.serve import RunningEmulator
from prefctl.store.db import open_store


@pytest.fixture(scope="module")
def emulator_backend(emulator_on_both_backends: str) -> str:
    """The token endpoint's clients and tokens are in the store: both backends."""
    return emulator_on_both_backends


ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def self_signed(key: Any, name: str = "ci-bot") -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .sign(key, hashes.SHA256())
    )


def thumbprint(cert: x509.Certificate) -> str:
    digest = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass
class CertClient:
    client_id: str
    key: Any
    cert: x509.Certificate
    algorithm: str

    def assertion(self, aud: str, **overrides: Any) -> str:
        now = int(time.time())
        claims = {
            "iss": self.client_id,
            "sub": self.client_id,
            "aud": aud,
            "iat": now,
            "exp": now + 300,
            "jti": uuid.uuid4().hex,
        }
        headers = {"x5t#S256": thumbprint(self.cert)}
        key = overrides.pop("key", self.key)
        headers |= overrides.pop("headers", {})
        claims |= overrides
        claims = {k: v for k, v in claims.items() if v is not None}
        return jwt.encode(claims, key, algorithm=self.algorithm, headers=headers)


def register(emulator: RunningEmulator, tmp_path: Path, key: Any, algorithm: str) -> CertClient:
    cert = self_signed(key)
    pem = tmp_path / f"{uuid.uuid4().hex}.pem"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    with open_store(emulator.store) as conn:
        new = admin.add_client(conn, SystemClock(), name="cert", certificate=pem)
    assert new.secret is None
    return CertClient(new.client.client_id, key, cert, algorithm)


@pytest.fixture
def ec_client(emulator: RunningEmulator, tmp_path: Path) -> CertClient:
    return register(emulator, tmp_path, ec.generate_private_key(ec.SECP256R1()), "ES256")


def request_token(emulator: RunningEmulator, assertion: str, **extra: str) -> httpx.Response:
    form = {
        "grant_type": "client_credentials",
        "scope": "DEMO_CORP/admin",
        "client_assertion_type": ASSERTION_TYPE,
        "client_assertion": assertion,
        **extra,
    }
    return httpx.post(emulator.token_url, data=form, timeout=10)


@pytest.mark.parametrize("algorithm", ["RS256", "PS256", "ES256"])
def test_assertion_signed_with_the_certificate_key_gets_a_token(
    emulator: RunningEmulator, tmp_path: Path, algorithm: str
) -> None:
    key = (
        ec.generate_private_key(ec.SECP256R1())
        if algorithm == "ES256"
        else rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    client = register(emulator, tmp_path, key, algorithm)

    response = request_token(emulator, client.assertion(emulator.token_url))

    assert response.status_code == 200, response.text
    claims = jwt.decode(response.json()["access_token"], options={"verify_signature": False})
    assert claims["sub"] == client.client_id


def test_assertion_with_matching_client_id_parameter_is_accepted(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    assertion = ec_client.assertion(emulator.token_url)

    response = request_token(emulator, assertion, client_id=ec_client.client_id)

    assert response.status_code == 200


def test_assertion_replayed_jti_is_rejected(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    assertion = ec_client.assertion(emulator.token_url)
    assert request_token(emulator, assertion).status_code == 200

    replay = request_token(emulator, assertion)

    assert replay.status_code == 401
    assert replay.json()["error"] == "invalid_client"
    assert "already used" in replay.json()["error_description"]


def _rejected(emulator: RunningEmulator, assertion: str, fragment: str) -> None:
    response = request_token(emulator, assertion)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
    assert fragment in response.json()["error_description"]


def test_assertion_expired_is_rejected(emulator: RunningEmulator, ec_client: CertClient) -> None:
    now = int(time.time())
    assertion = ec_client.assertion(emulator.token_url, iat=now - 900, exp=now - 400)

    _rejected(emulator, assertion, "expired")


def test_assertion_living_over_ten_minutes_is_rejected(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    now = int(time.time())
    assertion = ec_client.assertion(emulator.token_url, iat=now, exp=now + 601)

    _rejected(emulator, assertion, "10 minutes")


def test_assertion_for_another_audience_is_rejected(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    assertion = ec_client.assertion("https://other.example/oauth2/v1/token")

    _rejected(emulator, assertion, "aud")


def test_assertion_signed_by_another_key_is_rejected(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    stranger = ec.generate_private_key(ec.SECP256R1())
    assertion = ec_client.assertion(emulator.token_url, key=stranger)

    _rejected(emulator, assertion, "signature")


def test_assertion_naming_another_certificate_is_rejected(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    other = self_signed(ec.generate_private_key(ec.SECP256R1()))
    assertion = ec_client.assertion(emulator.token_url, headers={"x5t#S256": thumbprint(other)})

    _rejected(emulator, assertion, "x5t#S256")


@pytest.mark.parametrize("claim", ["jti", "exp", "sub"])
def test_assertion_missing_a_claim_is_rejected(
    emulator: RunningEmulator, ec_client: CertClient, claim: str
) -> None:
    assertion = ec_client.assertion(emulator.token_url, **{claim: None})

    _rejected(emulator, assertion, claim)


def test_assertion_sub_differing_from_iss_is_rejected(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    assertion = ec_client.assertion(emulator.token_url, sub="someone-else")

    _rejected(emulator, assertion, "sub")


def test_assertion_with_hmac_algorithm_is_rejected(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    forged = jwt.encode(
        {"iss": ec_client.client_id, "sub": ec_client.client_id, "aud": emulator.token_url},
        "shared-secret-of-at-least-32-bytes!!",
        algorithm="HS256",
        headers={"x5t#S256": thumbprint(ec_client.cert)},
    )

    _rejected(emulator, forged, "alg")


def test_assertion_that_is_not_a_jwt_is_rejected(emulator: RunningEmulator) -> None:
    _rejected(emulator, "not-a-jwt", "well-formed")


def test_assertion_with_unknown_type_is_invalid_client(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    form = {
        "grant_type": "client_credentials",
        "scope": "DEMO_CORP/admin",
        "client_assertion_type": "urn:example:saml",
        "client_assertion": ec_client.assertion(emulator.token_url),
    }

    response = httpx.post(emulator.token_url, data=form, timeout=10)

    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


def test_assertion_without_its_type_is_invalid_request(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    form = {
        "grant_type": "client_credentials",
        "scope": "DEMO_CORP/admin",
        "client_assertion": ec_client.assertion(emulator.token_url),
    }

    response = httpx.post(emulator.token_url, data=form, timeout=10)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_certificate_client_cannot_use_a_secret(
    emulator: RunningEmulator, ec_client: CertClient
) -> None:
    form = {"grant_type": "client_credentials", "scope": "DEMO_CORP/admin"}

    response = httpx.post(emulator.token_url, data=form, auth=(ec_client.client_id, ""), timeout=10)

    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
