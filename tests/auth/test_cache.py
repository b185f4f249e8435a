from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl.auth.cache import CachedToken, TokenCache, cache_dir, cache_key
from prefctl.auth.credentials import SecretBasic
from prefctl.auth.provider import TokenProvider
from prefctl.auth.token_client import TokenClient
from prefctl.clock import FakeClock
from tests.auth.helpers import CLIENT_ID, CLIENT_SECRET, SCOPE
from tests.auth.stub_server import StubTokenService, running_stub

URL = "http://127.0.0.1:8750"


@pytest.fixture(scope="module")
def stub_module() -> Iterator[StubTokenService]:
    with running_stub() as service:
        yield service


@pytest.fixture
def stub(stub_module: StubTokenService) -> StubTokenService:
    stub_module.reset()
    return stub_module


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache(tmp_path: Path, clock: FakeClock) -> TokenCache:
    return TokenCache(tmp_path / "tokens", clock)


def _token(clock: FakeClock, *, lifetime: float = 3600, scope: str = SCOPE) -> CachedToken:
    return CachedToken.from_response(
        URL, CLIENT_ID, scope, "tok-" + scope, "Bearer", lifetime, clock.now()
    )


def test_cache_stored_token_is_fresh_until_a_minute_before_expiry(
    cache: TokenCache, clock: FakeClock
) -> None:
    cache.store(_token(clock, lifetime=3600))
    assert cache.fresh(URL, CLIENT_ID, SCOPE) is not None
    clock.advance(3600 - 61)
    fresh = cache.fresh(URL, CLIENT_ID, SCOPE)
    assert fresh is not None
    assert fresh.expires_in(clock.now()) == 61
    clock.advance(2)
    assert cache.fresh(URL, CLIENT_ID, SCOPE) is None
    assert cache.load(URL, CLIENT_ID, SCOPE) is not None


def test_cache_file_is_private_and_holds_token_and_absolute_expiry(
    cache: TokenCache, clock: FakeClock
) -> None:
    path = cache.store(_token(clock))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert '"access_token": "tok-DEMO/admin"' in text
    assert f'"expires_at": {clock.now().timestamp() + 3600}' in text


def test_cache_key_separates_auth_url_client_and_scope() -> None:
    keys = {
        cache_key(URL, CLIENT_ID, SCOPE),
        cache_key(URL + ":1", CLIENT_ID, SCOPE),
        cache_key(URL, "other", SCOPE),
        cache_key(URL, CLIENT_ID, "DEMO/other"),
    }
    assert len(keys) == 4
    assert cache_key(URL + "/", CLIENT_ID, SCOPE) == cache_key(URL, CLIENT_ID, SCOPE)


def test_cache_damaged_entry_is_a_miss(cache: TokenCache, clock: FakeClock) -> None:
    path = cache.store(_token(clock))
    path.write_text("{not json")
    assert cache.load(URL, CLIENT_ID, SCOPE) is None
    path.write_text('{"version": 1, "access_token": "x"}')
    assert cache.fresh(URL, CLIENT_ID, SCOPE) is None


def test_cache_clear_drops_one_client_or_everything(cache: TokenCache, clock: FakeClock) -> None:
    cache.store(_token(clock, scope="DEMO/a"))
    cache.store(_token(clock, scope="DEMO/b"))
    cache.store(CachedToken.from_response(URL, "other", SCOPE, "t", "Bearer", 60, clock.now()))
    assert cache.clear(URL, CLIENT_ID) == 2
    assert cache.load(URL, "other", SCOPE) is not None
    assert cache.clear() == 1
    assert list(cache.directory.iterdir()) == []


def test_cache_dir_comes_from_prefctl_cache_dir(isolated_env: Path) -> None:
    assert cache_dir() == isolated_env / "cache"
    assert cache_dir({}) != isolated_env / "cache"


def test_cache_module_imports_neither_httpx_nor_pydantic() -> None:
    import subprocess
    import sys

    code = (
        "import sys, prefctl.auth.cache, prefctl.auth.fastpath;"
        "print(sorted({'httpx','pydantic','typer','rich'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _provider(stub: StubTokenService, cache: TokenCache) -> TokenProvider:
    client = TokenClient(stub.url, SecretBasic(CLIENT_ID, CLIENT_SECRET), clock=cache.clock)
    return TokenProvider(
        auth_url=stub.url, client_id=CLIENT_ID, scope=SCOPE, cache=cache, client=lambda: client
    )


def test_provider_serves_cache_then_renews_under_a_minute_left(
    stub: StubTokenService, cache: TokenCache, clock: FakeClock
) -> None:
    provider = _provider(stub, cache)
    first = provider.token()
    assert provider.token() == first
    assert len(stub.token_requests) == 1
    clock.advance(3600 - 59)
    renewed = provider.token()
    assert renewed.access_token != first.access_token
    assert len(stub.token_requests) == 2
    assert renewed.expires_in(clock.now()) == 3600


def test_provider_renews_an_expired_cached_token(
    stub: StubTokenService, cache: TokenCache, clock: FakeClock
) -> None:
    cache.store(
        CachedToken.from_response(stub.url, CLIENT_ID, SCOPE, "old", "Bearer", 30, clock.now())
    )
    clock.advance(120)
    assert _provider(stub, cache).token().access_token != "old"
    assert cache.fresh(stub.url, CLIENT_ID, SCOPE) is not None


def test_provider_force_fetches_even_when_fresh(stub: StubTokenService, cache: TokenCache) -> None:
    provider = _provider(stub, cache)
    first = provider.token()
    assert provider.token(force=True).access_token != first.access_token
    assert len(stub.token_requests) == 2


def test_provider_renew_reuses_a_replacement_made_meanwhile(
    stub: StubTokenService, cache: TokenCache
) -> None:
    provider = _provider(stub, cache)
    rejected = provider.token()
    replacement = provider.renew(rejected=rejected.access_token)
    assert provider.renew(rejected=rejected.access_token) == replacement
    assert len(stub.token_requests) == 2
