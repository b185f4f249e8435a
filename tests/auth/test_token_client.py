from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl import certs
from prefctl.auth.credentials import SecretBasic, SecretPost
from prefctl.auth.token_client import TokenClient
from prefctl.clock import FakeClock, SystemClock
from prefctl.errors import (
    EXIT_AUTH,
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    AuthError,
    ConfigError,
    PrefctlError,
    UnreachableError,
)
from tests.auth.helpers import CLIENT_ID, CLIENT_SECRET, SCOPE
from tests.auth.stub_server import StubTokenService, running_stub
from tests.helpers import free_port


@pytest.fixture(scope="module")
def stub_module() -> Iterator[StubTokenService]:
    with running_stub() as service:
        yield service


@pytest.fixture
def stub(stub_module: StubTokenService) -> StubTokenService:
    stub_module.reset()
    return stub_module


def _client(url: str, **kwargs: object) -> TokenClient:
    return TokenClient(url, SecretBasic(CLIENT_ID, CLIENT_SECRET), clock=SystemClock(), **kwargs)  # type: ignore[arg-type]


def test_token_client_posts_client_credentials_with_basic_auth(stub: StubTokenService) -> None:
    clock = FakeClock()
    client = TokenClient(stub.url, SecretBasic(CLIENT_ID, CLIENT_SECRET), clock=clock)
    token = client.request(SCOPE)
    (request,) = stub.token_requests
    assert request.form == {"grant_type": "client_credentials", "scope": SCOPE}
    basic = base64.b64decode(request.headers["Authorization"].split()[1]).decode()
    assert basic == f"{CLIENT_ID}:{CLIENT_SECRET}"
    assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert token.access_token == stub.issued[0]
    assert token.expires_at == clock.now().timestamp() + 3600
    assert (token.scope, token.client_id, token.auth_url) == (SCOPE, CLIENT_ID, stub.url)


def test_token_client_post_method_sends_the_secret_in_the_body(stub: StubTokenService) -> None:
    TokenClient(stub.url, SecretPost(CLIENT_ID, CLIENT_SECRET), clock=SystemClock()).request(SCOPE)
    (request,) = stub.token_requests
    assert "Authorization" not in request.headers
    assert request.form["client_secret"] == CLIENT_SECRET


def test_token_client_non_json_answer_names_the_status(stub: StubTokenService) -> None:
    stub.answer(502, b"<html>Bad gateway</html>", "text/html")
    with pytest.raises(PrefctlError) as err:
        _client(stub.url).request(SCOPE)
    assert err.value.exit_code == EXIT_FAILED
    assert "answered HTTP 502 with text/html, not JSON" in err.value.message


def test_token_client_rfc6749_invalid_client_is_an_auth_error(stub: StubTokenService) -> None:
    stub.answer(
        401, {"error": "invalid_client", "error_description": "client authentication failed"}
    )
    with pytest.raises(AuthError) as err:
        _client(stub.url).request(SCOPE)
    assert err.value.exit_code == EXIT_AUTH
    assert "invalid_client: client authentication failed" in err.value.message
    assert err.value.hint


def test_token_client_other_rfc6749_errors_exit_1(stub: StubTokenService) -> None:
    stub.answer(400, {"error": "unsupported_grant_type"})
    with pytest.raises(PrefctlError) as err:
        _client(stub.url).request(SCOPE)
    assert type(err.value) is PrefctlError
    assert "(HTTP 400): unsupported_grant_type" in err.value.message


def test_token_client_json_that_is_no_token_response_is_reported(stub: StubTokenService) -> None:
    stub.answer(200, {"token_type": "Bearer", "expires_in": 60})
    with pytest.raises(PrefctlError, match="invalid token response \\(access_token"):
        _client(stub.url).request(SCOPE)
    stub.answer(200, {"access_token": "x", "token_type": "MAC", "expires_in": 60})
    with pytest.raises(PrefctlError, match="'MAC' token"):
        _client(stub.url).request(SCOPE)


def test_token_client_unreachable_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UnreachableError) as err:
        _client(url).request(SCOPE)
    assert err.value.exit_code == EXIT_UNREACHABLE
    assert f"{url}/oauth2/v1/token" in err.value.message
    assert "emulator" in (err.value.hint or "")


def test_token_client_url_without_scheme_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not an http"):
        _client("127.0.0.1:8750").request(SCOPE)


@pytest.fixture(scope="module")
def tls_stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StubTokenService, Path]]:
    pki = tmp_path_factory.mktemp("tls")
    ca = certs.init_ca(pki)
    server = certs.issue_server(pki, "127.0.0.1")
    with running_stub(tls=(server.certificate, server.private_key)) as service:
        yield service, ca.certificate


def test_token_client_tls_is_verified_and_ca_bundle_is_trusted(
    tls_stub: tuple[StubTokenService, Path],
) -> None:
    stub, ca = tls_stub
    with pytest.raises(UnreachableError) as err:
        _client(stub.url).request(SCOPE)
    assert "not trusted" in err.value.message
    assert "ca_bundle" in (err.value.hint or "")
    token = _client(stub.url, ca_bundle=ca).request(SCOPE)
    assert token.access_token in stub.issued


def test_the_context_of_an_http_client_trusts_nothing_rather_than_skipping_verification(
    tls_stub: tuple[StubTokenService, Path],
) -> None:
    """An http:// client is spared loading the CA roots; were a request of it to go to https
    anyway, the server's certificate would be checked, and trusted by nothing."""
    import httpx

    from prefctl.auth.tls import context_for

    stub, ca = tls_stub
    with (
        httpx.Client(verify=context_for("http://127.0.0.1", ca)) as client,
        pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get(stub.url)
    with httpx.Client(verify=context_for(stub.url, ca)) as client:
        assert client.get(stub.url).status_code < 500  # the same server, over verified TLS


@pytest.fixture(scope="module")
def other_host_stub(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StubTokenService, Path]]:
    """A stub on 127.0.0.1 whose certificate (from the trusted CA) is for example.test only."""
    pki = tmp_path_factory.mktemp("other-host")
    ca = certs.init_ca(pki)
    server = certs.issue_server(pki, "example.test")
    with running_stub(tls=(server.certificate, server.private_key)) as service:
        yield service, ca.certificate


def test_token_client_certificate_for_another_host_says_so_not_ca_bundle(
    other_host_stub: tuple[StubTokenService, Path],
) -> None:
    stub, ca = other_host_stub
    with pytest.raises(UnreachableError) as err:
        _client(stub.url, ca_bundle=ca).request(SCOPE)
    assert err.value.exit_code == EXIT_UNREACHABLE
    assert err.value.message == (
        f"cannot reach the token endpoint {stub.url}/oauth2/v1/token: "
        "the server's TLS certificate does not cover the host 127.0.0.1"
    )
    hint = err.value.hint or ""
    assert "ca_bundle" not in hint
    assert "auth_url" in hint
    assert "prefctl certs issue --server 127.0.0.1" in hint
    assert stub.token_requests == []


def test_token_client_unusable_ca_bundle_is_a_config_error(
    tls_stub: tuple[StubTokenService, Path], tmp_path: Path
) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("nope")
    with pytest.raises(ConfigError, match="holds no usable PEM"):
        _client(tls_stub[0].url, ca_bundle=bad).request(SCOPE)


# -- the real world's answers: rate limits, redirects, huge errors ---------------------------------
def _waiting_client(url: str, waits: list[float], credentials: object = None) -> TokenClient:
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)

    creds = credentials or SecretBasic(CLIENT_ID, CLIENT_SECRET)
    return TokenClient(url, creds, clock=clock, sleep=sleep)  # type: ignore[arg-type]


def test_token_client_429_is_retried_after_retry_after(stub: StubTokenService) -> None:
    waits: list[float] = []
    stub.answer(429, {"error": "slow_down"}, headers={"Retry-After": "2"})
    token = _waiting_client(stub.url, waits).request(SCOPE)
    assert token.access_token == stub.issued[-1]
    assert waits == [2.0]
    assert len(stub.token_requests) == 2


def test_token_client_retry_signs_a_new_client_assertion(
    stub: StubTokenService, tmp_path: Path
) -> None:
    from prefctl.auth.credentials import CertificateAssertion

    certs.init_ca(tmp_path)
    issued = certs.issue_client(tmp_path, "bot")
    creds = CertificateAssertion.from_files(CLIENT_ID, issued.certificate, issued.private_key)
    stub.answer(429, b"Too Many Requests", "text/plain", headers={"Retry-After": "0"})
    _waiting_client(stub.url, [], creds).request(SCOPE)
    first, second = (r.form["client_assertion"] for r in stub.token_requests)
    assert first != second  # the service refuses a jti it has seen


def test_token_client_429_that_persists_is_exit_1_saying_it_was_retried(
    stub: StubTokenService,
) -> None:
    waits: list[float] = []
    for _ in range(4):
        stub.answer(429, b"<html>Too Many Requests</html>", "text/html")
    with pytest.raises(PrefctlError) as err:
        _waiting_client(stub.url, waits).request(SCOPE)
    assert err.value.exit_code == EXIT_FAILED
    assert "answered HTTP 429 with text/html, not JSON" in err.value.message
    assert "rate limiting requests (tried 4 times over 7 s)" in (err.value.hint or "")
    assert waits == [1.0, 2.0, 4.0]


def test_token_client_503_is_retried_only_when_retry_after_invites_it(
    stub: StubTokenService,
) -> None:
    waits: list[float] = []
    stub.answer(503, b"<html>down</html>", "text/html", headers={"Retry-After": "1"})
    _waiting_client(stub.url, waits).request(SCOPE)
    assert waits == [1.0]
    stub.answer(503, b"<html>down</html>", "text/html")
    with pytest.raises(PrefctlError) as err:
        _waiting_client(stub.url, waits).request(SCOPE)
    assert waits == [1.0]
    assert "check that auth_url" not in (err.value.hint or "")


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_token_client_redirect_is_reported_and_never_followed(
    stub: StubTokenService, status: int
) -> None:
    with running_stub() as other:
        target = f"{other.url}/oauth2/v1/token"
        stub.answer(status, b"", "text/html", headers={"Location": target})
        with pytest.raises(PrefctlError) as err:
            _client(stub.url).request(SCOPE)
        assert other.requests == []  # the credentials went nowhere else
    assert err.value.message == (
        f"the token endpoint {stub.url}/oauth2/v1/token redirected to {target} (HTTP {status})"
    )
    assert "auth_url" in (err.value.hint or "")


def test_token_client_huge_error_description_is_cut_and_redacted(stub: StubTokenService) -> None:
    stub.answer(
        400,
        {
            "error": "invalid_request",
            "error_description": f"client_secret={CLIENT_SECRET} " + "z" * 10**5,
        },
    )
    with pytest.raises(PrefctlError) as err:
        _client(stub.url).request(SCOPE)
    assert len(err.value.message) < 400
    assert CLIENT_SECRET not in err.value.message
    assert err.value.message.endswith("…")
