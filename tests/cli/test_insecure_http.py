"""Spec, Authentication: "HTTPS is mandatory". A profile whose auth_url or api_url is plain
http:// to another host is refused before anything is sent, unless it says so explicitly."""

from __future__ import annotations

import pytest

from prefctl.config import Profile
from prefctl.errors import ConfigError
from tests.auth.helpers import write_profile
from tests.auth.stub_server import StubTokenService
from tests.helpers import run_cli

REMOTE_API = "http://api.example.test/api/v1"


@pytest.mark.parametrize("key", ["auth_url", "api_url"])
def test_programs_list_http_to_remote_host_is_exit_2_naming_the_key(
    stub: StubTokenService, key: str
) -> None:
    urls = {"auth_url": stub.url, "api_url": f"{stub.url}/api/v1"}
    urls[key] = "http://service.example.test" + ("/api/v1" if key == "api_url" else "")
    write_profile(client_secret_env="TEST_CLIENT_SECRET", **urls)
    result = run_cli("programs", "list")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {key} http://service.example.test")
    assert "allow_insecure_http = true" in line
    assert stub.requests == []  # no secret, no token went anywhere


def test_token_get_http_to_remote_host_is_refused_even_with_a_cached_token(
    stub: StubTokenService,
) -> None:
    assert run_cli("token", "get").exit_code == 0  # cached for the stub's auth_url
    write_profile(stub.url, client_secret_env="TEST_CLIENT_SECRET", api_url=REMOTE_API)
    result = run_cli("token", "get")
    assert result.exit_code == 2
    assert "api_url http://api.example.test/api/v1" in result.stderr


def test_programs_list_http_allowed_by_profile_warns_on_every_use(
    stub: StubTokenService, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_profile(
        stub.url,
        client_secret_env="TEST_CLIENT_SECRET",
        api_url=REMOTE_API,
        allow_insecure_http="true",
    )
    monkeypatch.setenv("HTTP_PROXY", stub.url)  # the stub answers for api.example.test
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    stub.api_answer(200, {"Programs": []})
    stub.api_answer(200, {"Programs": []})
    for _ in range(2):
        result = run_cli("programs", "list")
        assert result.exit_code == 0, result.output
        assert "warning: api_url http://api.example.test/api/v1 is plain http://" in result.stderr
    assert [r.proxied_to for r in stub.api_requests] == ["api.example.test"] * 2


def test_allow_insecure_http_from_the_environment_is_honoured(
    stub: StubTokenService, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_profile(stub.url, client_secret_env="TEST_CLIENT_SECRET", api_url=REMOTE_API)
    monkeypatch.setenv("PREFCTL_ALLOW_INSECURE_HTTP", "true")
    result = run_cli("token", "get")
    assert result.exit_code == 0, result.output
    assert "warning: api_url http://api.example.test/api/v1 is plain http://" in result.stderr


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8750", "http://127.8.9.10", "http://localhost:1", "http://[::1]:8"]
)
def test_profile_http_to_loopback_is_allowed_without_a_word(url: str) -> None:
    assert Profile(name="p", auth_url=url, api_url=f"{url}/api/v1").check_service_urls() == []


def test_profile_https_to_remote_host_is_allowed_without_a_word() -> None:
    profile = Profile(name="p", auth_url="https://a.example", api_url="https://b.example/api")
    assert profile.check_service_urls() == []


def test_config_set_allow_insecure_http_rejects_a_value_that_is_not_a_boolean(
    stub: StubTokenService,
) -> None:
    result = run_cli("config", "set", "local", "allow_insecure_http", "maybe")
    assert result.exit_code == 2
    assert "allow_insecure_http must be true or false" in result.stderr


def test_profile_http_refusal_is_a_config_error_for_library_users() -> None:
    profile = Profile(name="p", auth_url="http://auth.example.test")
    with pytest.raises(ConfigError, match=r"auth_url http://auth\.example\.test of profile 'p'"):
        profile.check_service_urls()
