"""The RSA keys that sign access tokens, and the JWKS that publishes them.

A key's ``kid`` is its RFC 7638 JWK thumbprint, so the same key always has the same name. The
newest key signs; every stored key verifies and is published.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from prefctl.clock import Clock
from prefctl.store import Store
from prefctl.store import tokens as token_store
from prefctl.store.db import transaction
from prefctl.store.timestamps import epoch

ALGORITHM = "RS256"
KEY_SIZE = 2048


@dataclass(frozen=True)
class LoadedKey:
    kid: str
    private_key: rsa.RSAPrivateKey
    public_key: rsa.RSAPublicKey


class KeyRing:
    """The signing keys of a store, parsed once."""

    def __init__(self, keys: list[token_store.SigningKey]) -> None:
        if not keys:
            raise ValueError("a key ring needs at least one key")
        self._keys: list[LoadedKey] = []
        for stored in keys:
            private = serialization.load_pem_private_key(
                stored.private_key_pem.encode("ascii"), password=None
            )
            if not isinstance(private, rsa.RSAPrivateKey):
                raise ValueError(f"signing key {stored.kid} is not an RSA key")
            self._keys.append(LoadedKey(stored.kid, private, private.public_key()))
        self._by_kid = {key.kid: key for key in self._keys}

    @classmethod
    def load(cls, conn: Store, clock: Clock) -> KeyRing:
        """The store's keys, creating the first one if there is none."""
        keys = token_store.signing_keys(conn)
        if not keys:
            with transaction(conn):
                keys = token_store.signing_keys(conn)
                if not keys:
                    token_store.add_signing_key(conn, new_signing_key(epoch(clock.now())))
                    keys = token_store.signing_keys(conn)
        return cls(keys)

    @property
    def signer(self) -> LoadedKey:
        """The key that signs new tokens (the newest)."""
        return self._keys[0]

    def public_key(self, kid: str) -> rsa.RSAPublicKey | None:
        key = self._by_kid.get(kid)
        return key.public_key if key else None

    def jwks(self) -> dict[str, Any]:
        """The JSON Web Key Set of every key (public parts only)."""
        return {"keys": [public_jwk(key.public_key, key.kid) for key in self._keys]}


def new_signing_key(created_at: float) -> token_store.SigningKey:
    """A fresh RSA key, PEM-encoded, named by its JWK thumbprint."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=KEY_SIZE)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")
    return token_store.SigningKey(jwk_thumbprint(private.public_key()), pem, created_at)


def public_jwk(public_key: rsa.RSAPublicKey, kid: str) -> dict[str, str]:
    numbers = public_key.public_numbers()
    return {
        "kty": "RSA",
        "use": "sig",
        "alg": ALGORITHM,
        "kid": kid,
        "n": _b64_uint(numbers.n),
        "e": _b64_uint(numbers.e),
    }


def jwk_thumbprint(public_key: rsa.RSAPublicKey) -> str:
    """RFC 7638 thumbprint: SHA-256 of the canonical JSON of the required members, base64url."""
    numbers = public_key.public_numbers()
    canonical = json.dumps(
        {"e": _b64_uint(numbers.e), "kty": "RSA", "n": _b64_uint(numbers.n)},
        separators=(",", ":"),
        sort_keys=True,
    )
    return _b64(hashlib.sha256(canonical.encode("ascii")).digest())


def _b64_uint(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8 or 1, "big"))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_VERIFIED_CACHE_SIZE = 1024


class VerifiedTokens:
    """Claims of tokens whose signature already verified, keyed by the token string.

    Verifying an RS256 signature costs ~0.4 ms, a large share of a REST request; the signature
    of a given string never changes, so it is checked once. Expiry, revocation and the user are
    still checked on every request.
    """

    def __init__(self) -> None:
        self._claims: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str) -> dict[str, Any] | None:
        with self._lock:
            claims = self._claims.get(token)
            if claims is not None:
                self._claims.move_to_end(token)
            return claims

    def put(self, token: str, claims: dict[str, Any]) -> None:
        with self._lock:
            self._claims[token] = claims
            while len(self._claims) > _VERIFIED_CACHE_SIZE:
                self._claims.popitem(last=False)
