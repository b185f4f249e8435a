from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from prefctl import certs
from prefctl.auth.credentials import (
    ASSERTION_TYPE,
    CertificateAssertion,
    SecretBasic,
    SecretPost,
    credentials_for,
)
from prefctl.clock import FakeClock
from prefctl.config import Profile
from prefctl.errors import EXIT_USAGE, ConfigError
from tests.auth.helpers import CLIENT_ID, CLIENT_SECRET

TOKEN_URL = "http://127.0.0.1:8750/oauth2/v1/token"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    certs.init_ca(folder)
    certs.issue_client(folder, "ec-client")
    certs.issue_client(folder, "rsa-client", key_type="rsa")
    return folder


def _profile(**values: Any) -> Profile:
    return Profile(name="t", client_id=CLIENT_ID, **values)


def test_secret_basic_sends_the_pair_in_a_basic_header() -> None:
    parts = SecretBasic(CLIENT_ID, CLIENT_SECRET).token_request(TOKEN_URL, FakeClock().now())
    scheme, _, encoded = parts.headers["Authorization"].partition(" ")
    assert scheme == "Basic"
    assert base64.b64decode(encoded).decode() == f"{CLIENT_ID}:{CLIENT_SECRET}"
    assert parts.form == {}


def test_secret_basic_form_encodes_reserved_characters() -> None:
    parts = SecretBasic("id", "a:b+c").token_request(TOKEN_URL, FakeClock().now())
    encoded = parts.headers["Authorization"].split()[1]
    assert base64.b64decode(encoded).decode() == "id:a%3Ab%2Bc"


def test_secret_post_sends_the_pair_in_the_body() -> None:
    parts = SecretPost(CLIENT_ID, CLIENT_SECRET).token_request(TOKEN_URL, FakeClock().now())
    assert parts.form == {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
    assert parts.headers == {}


@pytest.mark.parametrize(("name", "algorithm"), [("ec-client", "ES256"), ("rsa-client", "RS256")])
def test_certificate_assertion_is_an_rfc7523_jwt_signed_with_the_key(
    pki: Path, name: str, algorithm: str
) -> None:
    clock = FakeClock()
    cred = CertificateAssertion.from_files(
        CLIENT_ID, pki / f"client-{name}.pem", pki / f"client-{name}.key"
    )
    parts = cred.token_request(TOKEN_URL, clock.now())
    assert parts.form["client_assertion_type"] == ASSERTION_TYPE
    assertion = parts.form["client_assertion"]

    cert = certs.load_certificate(pki / f"client-{name}.pem")
    der = cert.public_bytes(serialization.Encoding.DER)
    header = jwt.get_unverified_header(assertion)
    assert header["alg"] == algorithm
    assert header["x5t#S256"] == (
        base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()
    )
    public_key = cert.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey)
    claims = jwt.decode(
        assertion,
        public_key,
        algorithms=[algorithm],
        audience=TOKEN_URL,
        options={"verify_exp": False, "verify_iat": False},
    )
    now = int(clock.now().timestamp())
    assert claims["iss"] == claims["sub"] == CLIENT_ID
    assert claims["iat"] == now
    assert claims["exp"] == now + 300
    second = jwt.decode(cred.assertion(TOKEN_URL, clock.now()), options={"verify_signature": False})
    assert second["jti"] != claims["jti"]


def test_certificate_malformed_files_are_config_errors(pki: Path, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a pem\n")
    cert, key = pki / "client-ec-client.pem", pki / "client-ec-client.key"
    with pytest.raises(ConfigError, match="is not a PEM certificate") as err:
        CertificateAssertion.from_files(CLIENT_ID, garbage, key)
    assert err.value.exit_code == EXIT_USAGE
    with pytest.raises(ConfigError, match="is not a PEM private key"):
        CertificateAssertion.from_files(CLIENT_ID, cert, garbage)
    with pytest.raises(ConfigError, match="cannot read the certificate"):
        CertificateAssertion.from_files(CLIENT_ID, tmp_path / "missing.pem", key)


def test_certificate_key_of_another_certificate_is_refused(pki: Path) -> None:
    with pytest.raises(ConfigError, match="does not belong to the certificate"):
        CertificateAssertion.from_files(
            CLIENT_ID, pki / "client-ec-client.pem", pki / "client-rsa-client.key"
        )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> Path:
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return path


def test_certificate_encrypted_key_is_refused(tmp_path: Path) -> None:
    key = _write_key(tmp_path / "enc.key", ec.generate_private_key(ec.SECP256R1()), b"pw")
    with pytest.raises(ConfigError, match="is encrypted"):
        certs.load_private_key(key)


def test_certificate_ec_key_off_p256_is_refused(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "p384")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path = tmp_path / "p384.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(ConfigError, match="ES256 needs P-256"):
        CertificateAssertion.from_files(CLIENT_ID, cert_path, _write_key(tmp_path / "k", key))


def test_credentials_for_picks_the_profile_method(pki: Path) -> None:
    env = {"SECRET_VAR": CLIENT_SECRET}
    basic = credentials_for(_profile(client_secret_env="SECRET_VAR"), env)
    post = credentials_for(
        _profile(auth_method="client_secret_post", client_secret_env="SECRET_VAR"), env
    )
    cert = credentials_for(
        _profile(
            auth_method="certificate",
            certificate=str(pki / "client-ec-client.pem"),
            private_key=str(pki / "client-ec-client.key"),
        ),
        env,
    )
    assert (basic.method, post.method, cert.method) == (
        "client_secret_basic",
        "client_secret_post",
        "certificate",
    )


def test_credentials_for_missing_or_unreadable_secret_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no client secret"):
        credentials_for(_profile(client_secret_env="UNSET_VAR"), {})
    with pytest.raises(ConfigError, match="cannot read the client secret"):
        credentials_for(
            _profile(client_secret_env="", client_secret_file=str(tmp_path / "nope")), {}
        )


def test_credentials_for_certificate_without_files_names_the_key() -> None:
    with pytest.raises(ConfigError, match="has no certificate"):
        credentials_for(_profile(auth_method="certificate"), {})
