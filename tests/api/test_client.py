"""The REST client against a real emulator: errors mapped to exit codes, one token renewal, TLS,
timeouts, and no token in any log line."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl import __version__, certs
from prefctl.api.client import ApiClient
from prefctl.api.profiles import ProfilesApi
from prefctl.auth import token_info
from prefctl.auth.httpx_auth import BearerAuth
from prefctl.auth.provider import TokenProvider
from prefctl.clock import SystemClock
from prefctl.config import Profile, load_config, resolve_profile
from prefctl.emulator import admin
from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.errors import AuthError, NotFoundError, PrefctlError, UnreachableError
from tests.helpers import free_port


def local_profile(**overrides: str) -> Profile:
    return resolve_profile(load_config(Path(os.environ["PREFCTL_CONFIG"])), overrides=overrides)


@pytest.fixture
def client(emulator: RunningEmulator) -> Iterator[ApiClient]:
    with ApiClient.for_profile(local_profile(), clock=SystemClock()) as api:
        yield api


def test_client_missing_profile_is_not_found_with_the_problem_detail(client: ApiClient) -> None:
    with pytest.raises(NotFoundError) as caught:
        ProfilesApi(client).get(999_999)
    assert caught.value.exit_code == 4
    assert (
        str(caught.value) == "Not Found: profile 999999 not found (HTTP 404, GET /profiles/999999)"
    )


def test_client_invalid_body_lists_each_field_error_on_one_line(client: ApiClient) -> None:
    with pytest.raises(PrefctlError) as caught:
        ProfilesApi(client).create({"Emails": [{"Address": "not-an-email"}], "Tags": ["a", "a"]})
    message = str(caught.value)
    assert caught.value.exit_code == 1
    assert "\n" not in message
    assert message.startswith("Invalid request body: 2 fields are invalid: Emails[0].Address: ")
    assert "; Tags: " in message
    assert message.endswith("(HTTP 400, POST /profiles)")


def test_client_revoked_token_is_renewed_once_and_the_request_succeeds(
    emulator: RunningEmulator,
) -> None:
    clock = SystemClock()
    profile = local_profile()
    provider = TokenProvider.for_profile(profile, clock=clock)
    revoked = provider.token().access_token
    with admin.open_admin_store(emulator.data_dir) as conn:
        admin.revoke(conn, clock, token_info.decode(revoked).claims["jti"])
    with ApiClient(profile.api_url, profile.service_client_id, auth=BearerAuth(provider)) as api:
        assert ProfilesApi(api).create({"Tags": ["renewed"]})["Tags"] == ["renewed"]
    assert provider.token().access_token != revoked


def test_client_user_without_the_permission_is_auth_error(emulator: RunningEmulator) -> None:
    with admin.open_admin_store(emulator.data_dir) as conn:
        admin.add_user(conn, SystemClock(), "reader", ["profiles:read"])
    profile = local_profile(user_id="reader")
    with (
        ApiClient.for_profile(profile, clock=SystemClock()) as api,
        pytest.raises(AuthError) as caught,
    ):
        ProfilesApi(api).create({"Tags": ["x"]})
    assert caught.value.exit_code == 3
    assert "lacks the permission 'profiles:write'" in str(caught.value)
    assert "(HTTP 403, POST /profiles)" in str(caught.value)


def test_client_without_a_token_is_auth_error_with_a_hint(emulator: RunningEmulator) -> None:
    with ApiClient(emulator.api_url, "DEMO_CORP") as api, pytest.raises(AuthError) as caught:
        api.get("/profiles")
    assert "(HTTP 401, GET /profiles)" in str(caught.value)
    assert "credentials" in (caught.value.hint or "")


def test_client_token_of_one_account_on_another_account_path_is_auth_error(
    emulator: RunningEmulator,
) -> None:
    profile = local_profile()
    auth = BearerAuth(TokenProvider.for_profile(profile, clock=SystemClock()))
    with (
        ApiClient(profile.api_url, "OTHER_CORP", auth=auth) as api,
        pytest.raises(AuthError) as caught,
    ):
        api.get("/profiles")
    assert "belongs to another account" in str(caught.value)
    assert "(HTTP 403, GET /profiles)" in str(caught.value)


def test_client_closed_port_is_unreachable_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/api/v1"
    with ApiClient(url, "DEMO_CORP") as api, pytest.raises(UnreachableError) as caught:
        api.get("/profiles")
    assert caught.value.exit_code == 5
    assert f"cannot reach the REST API at {url}/DEMO_CORP: connection refused" == str(caught.value)
    assert caught.value.hint is not None
    assert "emulator" in caught.value.hint


@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[bytes]]]:
    """A TCP server that reads one request, records it and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            requests.append(conn.recv(65536))
            stop.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/api/v1", requests
    stop.set()
    listener.close()
    thread.join(5)


def test_client_silent_server_times_out_as_unreachable_and_sends_user_agent(
    silent_server: tuple[str, list[bytes]],
) -> None:
    url, requests = silent_server
    with ApiClient(url, "DEMO_CORP", timeout=0.3) as api, pytest.raises(UnreachableError) as caught:
        api.get("/programs")
    assert str(caught.value) == (
        f"the REST API at {url}/DEMO_CORP did not answer GET /programs within 0.3 s"
    )
    head = requests[0].decode()
    assert head.startswith("GET /api/v1/DEMO_CORP/programs HTTP/1.1")
    assert f"user-agent: prefctl/{__version__}" in head.lower()


@pytest.fixture
def plain_500_server() -> Iterator[str]:
    """A TCP server that answers every request with a plain-text 500."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
                b"Content-Length: 4\r\nConnection: close\r\n\r\noops"
            )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/api/v1"
    listener.close()
    thread.join(5)


def test_client_server_error_without_problem_body_is_failure_with_status(
    plain_500_server: str,
) -> None:
    with ApiClient(plain_500_server, "DEMO_CORP") as api, pytest.raises(PrefctlError) as caught:
        api.get("/programs")
    assert type(caught.value) is PrefctlError
    assert str(caught.value) == "Internal Server Error: oops (HTTP 500, GET /programs)"
    assert caught.value.hint is not None
    assert "try again" in caught.value.hint


def test_client_https_is_verified_and_trusts_the_profile_ca_bundle(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    ca = certs.init_ca(pki)
    server = certs.issue_server(pki, "127.0.0.1")
    config_file = tmp_path / "profiles.toml"
    running = start_in_thread(
        EmulatorConfig(
            port=free_port(),
            data_dir=tmp_path / "data",
            tls_cert=server.certificate,
            tls_key=server.private_key,
            config_path=config_file,
        )
    )
    try:
        with (
            ApiClient(running.api_url, "DEMO_CORP") as untrusted,
            pytest.raises(UnreachableError) as caught,
        ):
            untrusted.get("/programs")
        assert "TLS certificate is not trusted" in str(caught.value)
        assert "ca_bundle" in (caught.value.hint or "")
        profile = resolve_profile(load_config(config_file), "local")
        assert Path(profile.ca_bundle) == ca.certificate.absolute()
        with ApiClient.for_profile(profile, clock=SystemClock()) as trusted:
            assert ProfilesApi(trusted).create({"Tags": ["tls"]})["ProfileId"] > 0
    finally:
        running.stop()


def test_client_certificate_for_another_host_says_so_not_ca_bundle(tmp_path: Path) -> None:
    from tests.auth.stub_server import running_stub

    pki = tmp_path / "pki"
    ca = certs.init_ca(pki)
    server = certs.issue_server(pki, "example.test")
    with (
        running_stub(tls=(server.certificate, server.private_key)) as stub,
        ApiClient(stub.url + "/api/v1", "DEMO_CORP", ca_bundle=ca.certificate) as api,
        pytest.raises(UnreachableError) as caught,
    ):
        api.get("/programs")
    assert str(caught.value) == (
        f"cannot reach the REST API at {stub.url}/api/v1/DEMO_CORP: "
        "the server's TLS certificate does not cover the host 127.0.0.1"
    )
    hint = caught.value.hint or ""
    assert "ca_bundle" not in hint
    assert "api_url" in hint
    assert "prefctl certs issue --server 127.0.0.1" in hint
    assert stub.requests == []


def test_verbose_logs_show_requests_but_never_the_token(emulator: RunningEmulator, cli) -> None:
    created = cli("-o", "json", "profiles", "create", "--file", "-", stdin='{"Tags": ["log"]}')
    result = cli("-vvv", "profiles", "get", str(created.json["ProfileId"]))
    assert result.exit_code == 0, result.output
    token = cli("token", "get").stdout.strip()
    assert token
    assert "GET /api/v1/DEMO_CORP/profiles/" in result.stderr
    assert token not in result.output
    assert token.split(".")[1] not in result.output
