"""Verification of RFC 7523 client assertions: a certificate in place of a client secret.

A client registered with a certificate authenticates with a JWT signed by the certificate's key:

- header ``alg`` RS256, PS256 or ES256, and ``x5t#S256`` = the registered certificate's thumbprint;
- claims ``iss`` = ``sub`` = client_id, ``aud`` = the token endpoint URL, ``iat``, ``exp`` at most
  10 minutes after ``iat``, and a ``jti`` never used before by that client.

Times are checked against the emulator's clock with 60 s of leeway for clock skew. Every failure is
an ``AssertionRejected`` whose message says which rule failed (and never echoes the assertion).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from prefctl.store import Store, accounts, tokens
from prefctl.store.db import transaction

ALGORITHMS = ("RS256", "PS256", "ES256")
MAX_LIFETIME_SECONDS = 600
LEEWAY_SECONDS = 60
_REQUIRED_CLAIMS = ["iss", "sub", "aud", "iat", "exp", "jti"]


class AssertionRejected(Exception):
    """The client assertion does not authenticate the client; the message says why."""


def verify_client_assertion(
    conn: Store,
    assertion: str,
    *,
    client_id: str | None,
    audiences: Sequence[str],
    now: datetime,
) -> accounts.OAuthClient:
    """The client ``assertion`` authenticates, after recording its ``jti`` as used."""
    try:
        header = jwt.get_unverified_header(assertion)
        unverified = jwt.decode(assertion, options={"verify_signature": False})
    except (jwt.PyJWTError, ValueError, TypeError):
        raise AssertionRejected("client_assertion is not a well-formed JWT") from None
    algorithm = header.get("alg")
    if algorithm not in ALGORITHMS:
        raise AssertionRejected(f"client_assertion alg must be one of {', '.join(ALGORITHMS)}")
    thumbprint = header.get("x5t#S256")
    if not isinstance(thumbprint, str) or not thumbprint:
        raise AssertionRejected("client_assertion header x5t#S256 is required")
    issuer = unverified.get("iss")
    if not isinstance(issuer, str) or not issuer:
        raise AssertionRejected("client_assertion claim iss is required")
    if client_id is not None and client_id != issuer:
        raise AssertionRejected("client_id does not match the client_assertion iss")

    client = accounts.get_client(conn, issuer)
    if client is None or client.certificate_pem is None or client.certificate_thumbprint is None:
        raise AssertionRejected("no certificate is registered for this client")
    if not hmac.compare_digest(thumbprint.encode(), client.certificate_thumbprint.encode()):
        raise AssertionRejected("x5t#S256 does not match the registered certificate")
    certificate = x509.load_pem_x509_certificate(client.certificate_pem.encode("ascii"))
    if not certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc:
        raise AssertionRejected("the registered certificate is not valid at this time")
    public_key = certificate.public_key()
    _check_key_fits(public_key, algorithm)

    claims = _verified_claims(assertion, public_key, algorithm, client.client_id, audiences)
    _check_times(claims, now)
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti or len(jti) > 256:
        raise AssertionRejected("client_assertion jti must be a string of 1 to 256 characters")
    with transaction(conn):
        fresh = tokens.use_assertion_jti(
            conn, client.client_id, jti, expires_at=int(claims["exp"]), now=int(now.timestamp())
        )
    if not fresh:
        raise AssertionRejected("client_assertion jti was already used")
    return client


def _check_key_fits(public_key: Any, algorithm: str) -> None:
    if algorithm in ("RS256", "PS256") and not isinstance(public_key, rsa.RSAPublicKey):
        raise AssertionRejected(f"{algorithm} needs an RSA certificate")
    if algorithm == "ES256" and not (
        isinstance(public_key, ec.EllipticCurvePublicKey)
        and isinstance(public_key.curve, ec.SECP256R1)
    ):
        raise AssertionRejected("ES256 needs an EC P-256 certificate")


def _verified_claims(
    assertion: str, public_key: Any, algorithm: str, client_id: str, audiences: Sequence[str]
) -> dict[str, Any]:
    try:
        claims: dict[str, Any] = jwt.decode(
            assertion,
            public_key,
            algorithms=[algorithm],
            audience=list(audiences),
            issuer=client_id,
            # Times are checked against the emulator's clock below, not the machine's.
            options={
                "require": _REQUIRED_CLAIMS,
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
    except jwt.MissingRequiredClaimError as exc:
        raise AssertionRejected(f"client_assertion claim {exc.claim} is required") from None
    except jwt.InvalidAudienceError:
        raise AssertionRejected("client_assertion aud must be the token endpoint URL") from None
    except jwt.InvalidSignatureError:
        raise AssertionRejected("client_assertion signature does not verify") from None
    except (jwt.PyJWTError, ValueError, TypeError):
        raise AssertionRejected("client_assertion does not verify") from None
    if claims.get("sub") != client_id:
        raise AssertionRejected("client_assertion sub must equal iss (the client_id)")
    return claims


def _check_times(claims: dict[str, Any], now: datetime) -> None:
    leeway = timedelta(seconds=LEEWAY_SECONDS)
    try:
        issued, expires = _utc(claims["iat"]), _utc(claims["exp"])
        not_before = _utc(claims["nbf"]) if "nbf" in claims else None
    except TypeError:
        raise AssertionRejected("client_assertion iat, exp and nbf must be numbers") from None
    except (OverflowError, ValueError, OSError):
        raise AssertionRejected("client_assertion times are out of range") from None
    if expires <= issued:
        raise AssertionRejected("client_assertion exp must be after iat")
    if expires - issued > timedelta(seconds=MAX_LIFETIME_SECONDS):
        raise AssertionRejected("client_assertion exp must be at most 10 minutes after iat")
    if issued > now + leeway or (not_before is not None and not_before > now + leeway):
        raise AssertionRejected("client_assertion is not valid yet (iat or nbf in the future)")
    if expires + leeway <= now:
        raise AssertionRejected("client_assertion has expired")


def _utc(seconds: Any) -> datetime:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError("not a number")
    return datetime.fromtimestamp(seconds, UTC)
