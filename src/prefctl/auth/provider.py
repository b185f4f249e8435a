"""Tokens for one profile and scope: from the cache while fresh, else from the token endpoint.

``TokenProvider`` is what commands and the REST client use; it ties the cache (``cache.py``) to the
token client (``token_client.py``). Credentials are resolved only when a token must be fetched, so
a script with a fresh cached token runs even where the secret is not available.

    >>> provider = TokenProvider.for_profile(profile, clock=SystemClock())
    >>> provider.token().access_token          # cached, or fetched and cached
    'eyJ…'
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from prefctl.auth.cache import CachedToken, TokenCache
from prefctl.logs import register_secret

if TYPE_CHECKING:
    import httpx

    from prefctl.auth.token_client import TokenClient
    from prefctl.clock import Clock
    from prefctl.config import Profile

__all__ = ["TokenProvider"]

log = logging.getLogger(__name__)


class TokenProvider:
    """Hands out a fresh token for ``(auth_url, client_id, scope)``; thread-safe."""

    def __init__(
        self,
        *,
        auth_url: str,
        client_id: str,
        scope: str,
        cache: TokenCache,
        client: Callable[[], TokenClient],
    ) -> None:
        self.auth_url = auth_url
        self.client_id = client_id
        self.scope = scope
        self.cache = cache
        self._client_factory = client
        self._client: TokenClient | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_profile(
        cls,
        profile: Profile,
        *,
        clock: Clock,
        scope: str | None = None,
        cache: TokenCache | None = None,
        transport: httpx.BaseTransport | None = None,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> TokenProvider:
        """A provider for ``profile`` (its scope unless ``scope`` is given); ``sleep`` waits
        between the token client's retries (tests pass ``FakeClock.advance``)."""
        profile.require("auth_url", "client_id")
        profile.check_service_urls()  # the CLI shows its warnings; here only the refusal counts
        scope = scope or profile.scope

        def make_client() -> TokenClient:
            from prefctl.auth.credentials import credentials_for
            from prefctl.auth.token_client import TokenClient

            ca_bundle = profile.path(profile.ca_bundle) if profile.ca_bundle else None
            return TokenClient(
                profile.auth_url,
                credentials_for(profile, env),
                clock=clock,
                ca_bundle=ca_bundle,
                transport=transport,
                sleep=sleep,
            )

        return cls(
            auth_url=profile.auth_url,
            client_id=profile.client_id,
            scope=scope,
            cache=cache or TokenCache.default(clock, env),
            client=make_client,
        )

    def token(self, *, force: bool = False) -> CachedToken:
        """A token with at least a minute left: the cached one, or a new one (always if ``force``)."""
        with self._lock:
            if not force:
                cached = self.cache.fresh(self.auth_url, self.client_id, self.scope)
                if cached is not None:
                    register_secret(cached.access_token)
                    log.debug("using the cached token for scope %s", self.scope)
                    return cached
            return self._fetch()

    def renew(self, rejected: str | None = None) -> CachedToken:
        """A new token after the service refused ``rejected``.

        If another caller already replaced the rejected token, that replacement is used instead of
        asking the token endpoint again.
        """
        with self._lock:
            cached = self.cache.fresh(self.auth_url, self.client_id, self.scope)
            if cached is not None and rejected is not None and cached.access_token != rejected:
                return cached
            log.info("the service refused the token; requesting a new one")
            return self._fetch()

    def clear(self) -> int:
        """Forget every cached token of this client at this token service."""
        with self._lock:
            return self.cache.clear(self.auth_url, self.client_id)

    def _fetch(self) -> CachedToken:
        if self._client is None:
            self._client = self._client_factory()
        self.cache.prepare()  # a cache that cannot hold the token fails before it is issued
        token = self._client.request(self.scope)
        self.cache.store(token)
        return token
