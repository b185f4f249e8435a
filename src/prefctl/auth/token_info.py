"""Read an access token: decode it without trust, or verify it against its issuer's keys.

``decode`` shows what a token claims (header, claims, scope, expiry) and checks nothing but its
shape. ``verify`` fetches the JWKS of the token's issuer (``{iss}/oauth2/v1/keys``) and checks the
signature, the audience and the expiry on the given clock. Only asymmetric algorithms are accepted,
so a token cannot choose ``none`` or an HMAC keyed with the public key.

    >>> info = decode(token)
    >>> info.scope, info.seconds_left(clock.now())
    ('DEMO_CORP/admin', 3542.0)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefctl.errors import PrefctlError, UnreachableError, UsageError

if TYPE_CHECKING:
    import httpx

__all__ = ["ACCEPTED_ALGORITHMS", "API_AUDIENCE", "JWKS_PATH", "TokenInfo", "decode", "verify"]

API_AUDIENCE = "prefctl-api"
JWKS_PATH = "/oauth2/v1/keys"
ACCEPTED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenInfo:
    """A token's decoded header and claims."""

    header: dict[str, Any]
    claims: dict[str, Any]
    verified: bool = False

    @property
    def scope(self) -> str:
        return str(self.claims.get("scope", ""))

    @property
    def issued_at(self) -> datetime | None:
        return _time(self.claims.get("iat"))

    @property
    def expires_at(self) -> datetime | None:
        return _time(self.claims.get("exp"))

    def seconds_left(self, now: datetime) -> float | None:
        """Seconds until ``exp`` (negative once expired); None for a token without ``exp``."""
        expires = self.expires_at
        return None if expires is None else (expires - now).total_seconds()

    def is_expired(self, now: datetime) -> bool:
        left = self.seconds_left(now)
        return left is not None and left <= 0


def _time(value: Any) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    return None


def decode(token: str) -> TokenInfo:
    """Header and claims of ``token`` without checking its signature; UsageError if not a JWT."""
    import jwt

    token = token.strip()
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise UsageError(
            "this is not a JWT access token",
            hint="pass the token itself (three base64url parts separated by dots), or '-' to read stdin",
        ) from None
    return TokenInfo(header=dict(header), claims=dict(claims))


def verify(
    token: str,
    *,
    now: datetime,
    audience: str = API_AUDIENCE,
    ca_bundle: Path | None = None,
    transport: httpx.BaseTransport | None = None,
) -> TokenInfo:
    """Verify ``token`` against its issuer's JWKS; PrefctlError (exit 1) when it does not hold."""
    import jwt

    info = decode(token)
    issuer = info.claims.get("iss")
    if not isinstance(issuer, str) or not issuer.startswith(("http://", "https://")):
        raise PrefctlError("the token names no http(s) issuer (iss), so its keys cannot be found")
    algorithm = info.header.get("alg")
    if algorithm not in ACCEPTED_ALGORITHMS:
        raise PrefctlError(f"verification failed: algorithm {algorithm!r} is not accepted")
    key = _signing_key(issuer, info.header.get("kid"), ca_bundle, transport)
    try:
        claims = jwt.decode(
            token.strip(),
            key,
            algorithms=[str(algorithm)],
            audience=audience,
            # Expiry is judged on prefctl's clock below, not on the library's.
            options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
        )
    except jwt.InvalidAudienceError:
        raise PrefctlError(
            f"verification failed: the token's audience is {info.claims.get('aud')!r}, "
            f"not {audience!r}"
        ) from None
    except jwt.PyJWTError as exc:
        raise PrefctlError(f"verification failed: {exc}") from None
    verified = TokenInfo(header=info.header, claims=dict(claims), verified=True)
    if verified.is_expired(now):
        raise PrefctlError(
            f"verification failed: the signature is valid but the token expired at {_iso(verified)}",
            hint="get a new one with 'prefctl token get'",
        )
    return verified


def _iso(info: TokenInfo) -> str:
    expires = info.expires_at
    return expires.isoformat() if expires else "an unknown time"


def _signing_key(
    issuer: str, kid: Any, ca_bundle: Path | None, transport: httpx.BaseTransport | None
) -> Any:
    import httpx
    import jwt

    from prefctl.auth.http_policy import http_client
    from prefctl.auth.tls import ssl_context

    url = issuer.rstrip("/") + JWKS_PATH
    verify = ssl_context(ca_bundle) if url.startswith("https:") else True
    log.debug("fetching the issuer's keys from %s", url)
    try:
        with http_client(url, transport=transport, verify=verify, timeout=10.0) as client:
            response = client.get(url, headers={"Accept": "application/json"})
    except httpx.TransportError as exc:
        from prefctl.auth.token_client import transport_error_reason

        raise UnreachableError(
            f"cannot fetch the issuer's keys from {url}: {transport_error_reason(exc)}"
        ) from None
    if response.status_code != 200:
        raise PrefctlError(f"the issuer's key set {url} answered HTTP {response.status_code}")
    try:
        key_set = jwt.PyJWKSet.from_dict(response.json())
    except (ValueError, jwt.PyJWTError) as exc:
        raise PrefctlError(f"{url} is not a usable JSON Web Key Set: {exc}") from None
    for key in key_set.keys:
        if kid is None or key.key_id == kid:
            return key.key
    raise PrefctlError(f"verification failed: no key with kid {kid!r} at {url}")
