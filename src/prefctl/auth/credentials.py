"""How a client proves who it is at the token endpoint: the three ``auth_method``s.

- ``client_secret_basic``: ``Authorization: Basic base64(client_id:client_secret)`` (RFC 6749 §2.3.1,
  each part form-urlencoded first).
- ``client_secret_post``: ``client_id`` and ``client_secret`` in the form body.
- ``certificate``: an RFC 7523 client assertion: a JWT signed with the certificate's private key
  (RS256 for RSA, ES256 for EC P-256), header ``x5t#S256`` = the certificate's SHA-256 thumbprint,
  claims ``iss`` = ``sub`` = client_id, ``aud`` = the token endpoint URL, ``iat``, ``exp`` = iat + 5
  minutes and a random ``jti``; sent as ``client_assertion`` with ``client_assertion_type``.

Each credential turns into ``TokenRequestParts`` (extra form fields and headers); the token client
adds ``grant_type`` and ``scope``. Secrets and assertions are registered with ``prefctl.logs`` so they
are masked wherever they might be logged.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote_plus

from prefctl.errors import ConfigError
from prefctl.logs import register_secret

if TYPE_CHECKING:
    from cryptography import x509

    from prefctl.certs import PrivateKey
    from prefctl.config import Profile

__all__ = [
    "ASSERTION_LIFETIME_SECONDS",
    "ASSERTION_TYPE",
    "CertificateAssertion",
    "ClientCredentials",
    "SecretBasic",
    "SecretPost",
    "TokenRequestParts",
    "credentials_for",
]

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ASSERTION_LIFETIME_SECONDS = 300


@dataclass(frozen=True)
class TokenRequestParts:
    """What a credential adds to a token request."""

    form: dict[str, str] = field(default_factory=dict, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)


class ClientCredentials(Protocol):
    """A way to authenticate ``client_id`` at the token endpoint."""

    @property
    def method(self) -> str:
        """The profile's ``auth_method`` this implements."""
        ...

    @property
    def client_id(self) -> str: ...

    def token_request(self, token_url: str, now: datetime) -> TokenRequestParts:
        """Form fields and headers that authenticate one request to ``token_url``."""
        ...


@dataclass(frozen=True)
class SecretBasic:
    """``client_secret_basic``: the secret in an HTTP Basic ``Authorization`` header."""

    client_id: str
    client_secret: str = field(repr=False)
    method: str = "client_secret_basic"

    def token_request(self, token_url: str, now: datetime) -> TokenRequestParts:
        pair = f"{quote_plus(self.client_id)}:{quote_plus(self.client_secret)}"
        encoded = base64.b64encode(pair.encode("utf-8")).decode("ascii")
        register_secret(encoded)
        return TokenRequestParts(headers={"Authorization": f"Basic {encoded}"})


@dataclass(frozen=True)
class SecretPost:
    """``client_secret_post``: ``client_id`` and ``client_secret`` in the form body."""

    client_id: str
    client_secret: str = field(repr=False)
    method: str = "client_secret_post"

    def token_request(self, token_url: str, now: datetime) -> TokenRequestParts:
        return TokenRequestParts(
            form={"client_id": self.client_id, "client_secret": self.client_secret}
        )


def _random_jti() -> str:
    return secrets.token_urlsafe(24)


@dataclass(frozen=True)
class CertificateAssertion:
    """``certificate``: an RFC 7523 JWT client assertion signed with the certificate's key."""

    client_id: str
    certificate: x509.Certificate
    private_key: PrivateKey = field(repr=False)
    new_jti: Callable[[], str] = _random_jti
    method: str = "certificate"

    @classmethod
    def from_files(
        cls, client_id: str, certificate: Path, private_key: Path
    ) -> CertificateAssertion:
        """Load a PEM certificate and its key; ConfigError (exit 2) when they are unusable."""
        from prefctl.certs import load_certificate, load_private_key

        cert = load_certificate(certificate)
        key = load_private_key(private_key)
        if cert.public_key() != key.public_key():
            raise ConfigError(
                f"the private key {private_key} does not belong to the certificate {certificate}"
            )
        _algorithm(key, private_key)
        return cls(client_id=client_id, certificate=cert, private_key=key)

    def assertion(self, token_url: str, now: datetime) -> str:
        """The signed client assertion JWT for one request to ``token_url``."""
        import jwt

        from prefctl.certs import thumbprint_sha256

        issued_at = int(now.timestamp())
        claims = {
            "iss": self.client_id,
            "sub": self.client_id,
            "aud": token_url,
            "iat": issued_at,
            "exp": issued_at + ASSERTION_LIFETIME_SECONDS,
            "jti": self.new_jti(),
        }
        headers = {"x5t#S256": thumbprint_sha256(self.certificate)}
        algorithm = _algorithm(self.private_key, None)
        token = jwt.encode(claims, self.private_key, algorithm=algorithm, headers=headers)
        register_secret(token)
        return token

    def token_request(self, token_url: str, now: datetime) -> TokenRequestParts:
        return TokenRequestParts(
            form={
                "client_id": self.client_id,
                "client_assertion_type": ASSERTION_TYPE,
                "client_assertion": self.assertion(token_url, now),
            }
        )


def _algorithm(key: PrivateKey, path: Path | None) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec

    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return "RS256"
    if isinstance(key.curve, ec.SECP256R1):
        return "ES256"
    where = f" {path}" if path else ""
    raise ConfigError(
        f"the EC private key{where} uses curve {key.curve.name}; ES256 needs P-256 (secp256r1)",
        hint="issue a client certificate with 'prefctl certs issue --client NAME'",
    )


def credentials_for(profile: Profile, env: Mapping[str, str] | None = None) -> ClientCredentials:
    """The credentials ``profile`` configures; ConfigError when something is missing or unusable."""
    profile.require("client_id")
    if profile.auth_method == "certificate":
        profile.require("certificate", "private_key")
        return CertificateAssertion.from_files(
            profile.client_id,
            profile.path(profile.certificate),
            profile.path(profile.private_key),
        )
    secret = profile.resolve_client_secret(env)
    register_secret(secret)
    if profile.auth_method == "client_secret_post":
        return SecretPost(profile.client_id, secret)
    if profile.auth_method == "client_secret_basic":
        return SecretBasic(profile.client_id, secret)
    raise ConfigError(f"profile '{profile.name}' has an unknown auth_method")
