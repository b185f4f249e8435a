"""``BearerAuth``: the ``httpx.Auth`` that puts prefctl's token on every REST request.

It takes the token from a ``TokenProvider`` (cached while fresh) and, when the service answers 401
anyway (the token was revoked, or the service's clock disagrees with ours), renews the token once
and sends the request again. A second 401 is returned to the caller: the credentials, not the
token, are the problem then.

    >>> auth = BearerAuth(TokenProvider.for_profile(profile, clock=SystemClock()))
    >>> httpx.Client(base_url=f"{profile.api_url}/{profile.service_client_id}", auth=auth)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator

import httpx

from prefctl.auth.provider import TokenProvider

__all__ = ["BearerAuth"]


class BearerAuth(httpx.Auth):
    """Bearer tokens from ``provider``; one renewal and retry on 401."""

    # The body must be replayable for the retry after a 401.
    requires_request_body = True

    def __init__(self, provider: TokenProvider) -> None:
        self.provider = provider

    def sync_auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        token = self.provider.token().access_token
        _authorize(request, token)
        response = yield request
        if response.status_code == 401:
            _authorize(request, self.provider.renew(rejected=token).access_token)
            yield request

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        # Token requests are synchronous (file reads, one short POST): keep them off the loop.
        from anyio import to_thread

        token = (await to_thread.run_sync(self.provider.token)).access_token
        _authorize(request, token)
        response = yield request
        if response.status_code == 401:
            renewed = await to_thread.run_sync(lambda: self.provider.renew(rejected=token))
            _authorize(request, renewed.access_token)
            yield request


def _authorize(request: httpx.Request, token: str) -> None:
    request.headers["Authorization"] = f"Bearer {token}"
