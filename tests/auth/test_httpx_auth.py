"""BearerAuth against a real HTTP server that answers 401 for revoked tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from prefctl.auth.cache import TokenCache
from prefctl.auth.credentials import SecretBasic
from prefctl.auth.httpx_auth import BearerAuth
from prefctl.auth.provider import TokenProvider
from prefctl.auth.token_client import TokenClient
from prefctl.clock import SystemClock
from tests.auth.helpers import CLIENT_ID, CLIENT_SECRET, SCOPE
from tests.auth.stub_server import StubTokenService, running_stub


@pytest.fixture(scope="module")
def stub_module() -> Iterator[StubTokenService]:
    with running_stub() as service:
        yield service


@pytest.fixture
def stub(stub_module: StubTokenService) -> StubTokenService:
    stub_module.reset()
    return stub_module


@pytest.fixture
def provider(stub: StubTokenService, tmp_path: Path) -> TokenProvider:
    clock = SystemClock()
    client = TokenClient(stub.url, SecretBasic(CLIENT_ID, CLIENT_SECRET), clock=clock)
    return TokenProvider(
        auth_url=stub.url,
        client_id=CLIENT_ID,
        scope=SCOPE,
        cache=TokenCache(tmp_path / "tokens", clock),
        client=lambda: client,
    )


def _pings(stub: StubTokenService) -> int:
    return sum(1 for r in stub.requests if r.path == "/api/ping")


def test_bearer_auth_sends_the_cached_token(
    stub: StubTokenService, provider: TokenProvider
) -> None:
    with httpx.Client(base_url=stub.url, auth=BearerAuth(provider)) as client:
        assert client.get("/api/ping").status_code == 200
        assert client.get("/api/ping").status_code == 200
    assert len(stub.token_requests) == 1


def test_bearer_auth_renews_once_after_401_and_retries(
    stub: StubTokenService, provider: TokenProvider
) -> None:
    stub.revoked.add(provider.token().access_token)
    with httpx.Client(base_url=stub.url, auth=BearerAuth(provider)) as client:
        response = client.post("/api/ping", json={"replayed": True})
    assert response.status_code == 200
    assert len(stub.token_requests) == 2
    posts = [r for r in stub.requests if r.method == "POST" and r.path == "/api/ping"]
    assert len(posts) == 2
    assert posts[0].headers["Authorization"] != posts[1].headers["Authorization"]
    assert posts[1].headers["Content-Length"] == posts[0].headers["Content-Length"] != "0"


def test_bearer_auth_gives_up_after_one_renewal(
    stub: StubTokenService, provider: TokenProvider
) -> None:
    stub.api_rejects_all = True
    with httpx.Client(base_url=stub.url, auth=BearerAuth(provider)) as client:
        response = client.get("/api/ping")
    assert response.status_code == 401
    assert _pings(stub) == 2
    assert len(stub.token_requests) == 2


def test_bearer_auth_works_on_an_async_client(
    stub: StubTokenService, provider: TokenProvider
) -> None:
    stub.revoked.add(provider.token().access_token)

    async def call() -> int:
        async with httpx.AsyncClient(base_url=stub.url, auth=BearerAuth(provider)) as client:
            return (await client.get("/api/ping")).status_code

    assert anyio.run(call) == 200
    assert len(stub.token_requests) == 2
