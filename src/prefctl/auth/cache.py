"""The token cache: one private JSON file per (auth_url, client_id, scope).

Scripts call ``prefctl token get`` many times an hour; the cache turns all but the first call into a
file read. Files live in ``$PREFCTL_CACHE_DIR/tokens`` (default
``platformdirs.user_cache_dir("prefctl")/tokens``), are written atomically with mode 0600, and hold
the token with its absolute expiry. A token with less than ``RENEW_MARGIN_SECONDS`` left is not
served: the caller fetches a new one, so a token handed to a script has at least a minute to live.

    >>> cache = TokenCache(Path("tokens"), FakeClock())
    >>> cache.store(CachedToken.from_response(
    ...     auth_url, client_id, "DEMO_CORP/admin", access_token, "Bearer", 3600, cache.clock.now()))
    >>> cache.fresh(auth_url, client_id, "DEMO_CORP/admin").expires_in(cache.clock.now())
    3600

This module is on the fast path of ``prefctl token get``: it must not import httpx or pydantic.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefctl.config import ENV_CACHE_DIR
from prefctl.errors import ConfigError
from prefctl.private_files import make_private_dir, os_reason, write_private

if TYPE_CHECKING:
    from prefctl.clock import Clock

__all__ = [
    "RENEW_MARGIN_SECONDS",
    "CachedToken",
    "TokenCache",
    "cache_dir",
    "cache_key",
]

RENEW_MARGIN_SECONDS = 60
_FORMAT_VERSION = 1


def _debug(message: str, *args: object) -> None:
    # Importing logging costs the fast path 5-15 ms, and it logs nothing: import on first use.
    import logging

    logging.getLogger(__name__).debug(message, *args)


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """prefctl's cache folder: ``PREFCTL_CACHE_DIR``, else the platform's user cache dir."""
    env = os.environ if env is None else env
    if env.get(ENV_CACHE_DIR):
        return Path(env[ENV_CACHE_DIR]).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("prefctl"))


def _normal_url(auth_url: str) -> str:
    return auth_url.rstrip("/")


def cache_key(auth_url: str, client_id: str, scope: str) -> str:
    """The file stem of a cache entry: a SHA-256 of the three values that make a token distinct."""
    material = json.dumps([_normal_url(auth_url), client_id, scope], separators=(",", ":"))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedToken:
    """An access token with the absolute time (POSIX seconds) it expires."""

    auth_url: str
    client_id: str
    scope: str
    access_token: str = field(repr=False)
    token_type: str
    expires_at: float

    @classmethod
    def from_response(
        cls,
        auth_url: str,
        client_id: str,
        scope: str,
        access_token: str,
        token_type: str,
        expires_in: float,
        now: datetime,
    ) -> CachedToken:
        """A token from a token response, its relative ``expires_in`` made absolute."""
        return cls(
            auth_url=_normal_url(auth_url),
            client_id=client_id,
            scope=scope,
            access_token=access_token,
            token_type=token_type,
            expires_at=now.timestamp() + expires_in,
        )

    def seconds_left(self, now: datetime) -> float:
        return self.expires_at - now.timestamp()

    def expires_in(self, now: datetime) -> int:
        """Whole seconds until expiry (0 when expired), as a token response would say it."""
        return max(0, int(self.seconds_left(now)))

    def is_fresh(self, now: datetime) -> bool:
        """True while the token has at least ``RENEW_MARGIN_SECONDS`` left."""
        return self.seconds_left(now) >= RENEW_MARGIN_SECONDS

    def response(self, now: datetime) -> dict[str, Any]:
        """The token as an RFC 6749 token response, ``expires_in`` recomputed for ``now``."""
        return {
            "access_token": self.access_token,
            "token_type": self.token_type,
            "scope": self.scope,
            "expires_in": self.expires_in(now),
        }

    def to_json(self) -> bytes:
        data = {
            "version": _FORMAT_VERSION,
            "auth_url": self.auth_url,
            "client_id": self.client_id,
            "scope": self.scope,
            "token_type": self.token_type,
            "access_token": self.access_token,
            "expires_at": self.expires_at,
        }
        return json.dumps(data, indent=2).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> CachedToken:
        """Parse a cache file; ``ValueError`` when it is not one of ours."""
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != _FORMAT_VERSION:
            raise ValueError("not a prefctl token cache entry")
        values = {k: data.get(k) for k in ("auth_url", "client_id", "scope", "token_type")}
        token = data.get("access_token")
        expires_at = data.get("expires_at")
        if not all(isinstance(v, str) for v in values.values()) or not isinstance(token, str):
            raise ValueError("cache entry lacks a field")
        if not isinstance(expires_at, int | float) or isinstance(expires_at, bool):
            raise ValueError("cache entry has no expiry")
        return cls(access_token=token, expires_at=float(expires_at), **values)  # type: ignore[arg-type]


class TokenCache:
    """Cached tokens in one folder, judged fresh or stale by ``clock``."""

    def __init__(self, directory: Path, clock: Clock) -> None:
        self.directory = directory
        self.clock = clock

    @classmethod
    def default(cls, clock: Clock, env: Mapping[str, str] | None = None) -> TokenCache:
        """The cache in prefctl's cache folder (see ``cache_dir``)."""
        return cls(cache_dir(env) / "tokens", clock)

    def path_for(self, auth_url: str, client_id: str, scope: str) -> Path:
        return self.directory / f"{cache_key(auth_url, client_id, scope)}.json"

    def load(self, auth_url: str, client_id: str, scope: str) -> CachedToken | None:
        """The cached token, fresh or not; None when there is none or the file is unusable."""
        path = self.path_for(auth_url, client_id, scope)
        try:
            token = CachedToken.from_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            # A damaged entry is only a cache miss: the token is fetched again and overwritten.
            _debug("ignoring unusable token cache entry %s: %s", path, type(exc).__name__)
            return None
        if (token.auth_url, token.client_id, token.scope) != (
            _normal_url(auth_url),
            client_id,
            scope,
        ):
            return None
        return token

    def fresh(self, auth_url: str, client_id: str, scope: str) -> CachedToken | None:
        """The cached token if it has at least ``RENEW_MARGIN_SECONDS`` left, else None."""
        token = self.load(auth_url, client_id, scope)
        if token is None:
            return None
        if not token.is_fresh(self.clock.now()):
            _debug("cached token for scope %s is due for renewal", scope)
            return None
        return token

    def prepare(self) -> None:
        """Create the folder (0700, with the parents prefctl creates) if it is missing.

        Called before a token is requested, so that a cache that cannot hold the token (e.g.
        ``PREFCTL_CACHE_DIR`` names a file) is a ConfigError before the token is issued and lost.
        """
        hint = f"set {ENV_CACHE_DIR} to a folder prefctl can write"
        make_private_dir(self.directory, "the token cache folder", hint=hint)
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise ConfigError(f"cannot write the token cache folder {self.directory}", hint=hint)

    def store(self, token: CachedToken) -> Path:
        """Write ``token`` (mode 0600, atomically) and return the file's path."""
        self.prepare()
        path = self.path_for(token.auth_url, token.client_id, token.scope)
        try:
            write_private(path, token.to_json())
        except OSError as exc:
            raise ConfigError(
                f"cannot write the token cache {path}: {os_reason(exc)}",
                hint=f"set {ENV_CACHE_DIR} to a folder prefctl can write",
            ) from None
        return path

    def clear(self, auth_url: str | None = None, client_id: str | None = None) -> int:
        """Delete entries (all, or those of one auth_url and client_id); returns how many."""
        if not self.directory.is_dir():
            return 0
        removed = 0
        for path in sorted(self.directory.glob("*.json")):
            if auth_url is not None or client_id is not None:
                try:
                    token = CachedToken.from_json(path.read_bytes())
                except (OSError, ValueError):
                    continue
                if auth_url is not None and token.auth_url != _normal_url(auth_url):
                    continue
                if client_id is not None and token.client_id != client_id:
                    continue
            path.unlink(missing_ok=True)
            removed += 1
        return removed
