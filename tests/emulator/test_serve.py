"""Starting the emulator in-process: restarts, ports, profile ``local``, TLS, options."""

from __future__ import annotations

import socket
import stat
import tomllib
from pathlib import Path

import httpx
import pytest

from prefctl import certs
from prefctl.auth.tls import ssl_context
from prefctl.config import ConfigFile, save_config
from prefctl.emulator.oauth import authenticate_bearer
from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.errors import UsageError
from tests.helpers import free_port


def token_for(running: RunningEmulator) -> str:
    account = running.account
    response = httpx.post(
        running.token_url,
        data={"grant_type": "client_credentials", "scope": "DEMO_CORP/admin"},
        auth=(account.client_id, account.client_secret),
        timeout=10,
    )
    response.raise_for_status()
    return str(response.json()["access_token"])


def test_data_survives_a_restart(tmp_path: Path) -> None:
    config = EmulatorConfig(port=free_port(), data_dir=tmp_path / "data")
    first = start_in_thread(config)
    try:
        token = token_for(first)
    finally:
        first.stop()

    second = start_in_thread(config)
    try:
        assert second.account == first.account
        assert not second.created
        principal = authenticate_bearer(second.context, f"Bearer {token}")
        assert principal.user_id == "admin"
    finally:
        second.stop()


def test_port_in_use_is_a_usage_error_naming_the_address(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        with pytest.raises(UsageError) as caught:
            start_in_thread(EmulatorConfig(port=port, data_dir=tmp_path / "data"))

    assert caught.value.message == (
        f"port {port} on 127.0.0.1 is already in use (another program is listening there)"
    )
    assert caught.value.hint is not None
    assert "--port" in caught.value.hint


def test_profile_local_is_written_private_and_keeps_another_default(tmp_path: Path) -> None:
    config_file = tmp_path / "profiles.toml"
    save_config(
        ConfigFile(config_file, default="work", profiles={"work": {"auth_url": "https://x"}})
    )

    running = start_in_thread(
        EmulatorConfig(port=0, data_dir=tmp_path / "data", config_path=config_file)
    )
    running.stop()

    data = tomllib.loads(config_file.read_text())
    assert data["default"] == "work"
    local = data["profiles"]["local"]
    assert local["auth_url"] == running.auth_url
    assert local["api_url"] == running.auth_url + "/api/v1"
    assert local["client_secret"] == running.account.client_secret
    assert local["webhooks"] == {
        "signature_user_id": "events-signer",
        "hashkey": running.account.hashkey,
    }
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600


def test_profile_local_becomes_default_when_there_is_none(tmp_path: Path) -> None:
    config_file = tmp_path / "profiles.toml"

    start_in_thread(
        EmulatorConfig(port=0, data_dir=tmp_path / "data", config_path=config_file)
    ).stop()

    assert tomllib.loads(config_file.read_text())["default"] == "local"


def test_tls_with_development_ca_writes_ca_bundle_and_serves_https(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    ca = certs.init_ca(pki)
    server = certs.issue_server(pki, "127.0.0.1")
    config_file = tmp_path / "profiles.toml"

    running = start_in_thread(
        EmulatorConfig(
            port=0,
            data_dir=tmp_path / "data",
            tls_cert=server.certificate,
            tls_key=server.private_key,
            config_path=config_file,
        )
    )
    try:
        assert running.url.startswith("https://127.0.0.1:")
        local = tomllib.loads(config_file.read_text())["profiles"]["local"]
        assert Path(local["ca_bundle"]) == ca.certificate.absolute()
        health = httpx.get(
            running.url + "/healthz", verify=ssl_context(Path(local["ca_bundle"])), timeout=10
        )
        assert health.json()["status"] == "ready"
    finally:
        running.stop()


def test_tls_key_that_does_not_fit_is_usage_error(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    certs.init_ca(pki)
    server = certs.issue_server(pki, "127.0.0.1")
    other = certs.issue_client(pki, "other")

    with pytest.raises(UsageError, match="TLS"):
        start_in_thread(
            EmulatorConfig(
                port=0,
                data_dir=tmp_path / "data",
                tls_cert=server.certificate,
                tls_key=other.private_key,
            )
        )


def test_tls_certificate_for_another_host_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    pki = tmp_path / "pki"
    certs.init_ca(pki)
    server = certs.issue_server(pki, "example.test")
    config_file = tmp_path / "profiles.toml"

    with pytest.raises(UsageError) as caught:
        start_in_thread(
            EmulatorConfig(
                port=0,
                data_dir=tmp_path / "data",
                tls_cert=server.certificate,
                tls_key=server.private_key,
                config_path=config_file,
            )
        )

    assert str(caught.value) == (
        f"the TLS certificate {server.certificate} covers example.test, not 127.0.0.1, the host "
        "in profile local's URLs; clients would refuse it"
    )
    assert "prefctl certs issue --server 127.0.0.1" in (caught.value.hint or "")
    assert not config_file.exists()  # profile local was not written


@pytest.mark.parametrize(("host", "url_host"), [("0.0.0.0", "127.0.0.1"), ("::", "::1")])
def test_tls_certificate_for_a_wildcard_bind_must_cover_the_loopback_url(
    tmp_path: Path, host: str, url_host: str
) -> None:
    pki = tmp_path / "pki"
    certs.init_ca(pki)
    wrong = certs.issue_server(pki, "example.test")
    right = certs.issue_server(pki, url_host)

    with pytest.raises(UsageError) as caught:
        EmulatorConfig(host=host, tls_cert=wrong.certificate, tls_key=wrong.private_key).validate()

    assert f"not {url_host}, the loopback host in the emulator's URL for --host {host}" in str(
        caught.value
    )
    assert f"prefctl certs issue --server {url_host}" in (caught.value.hint or "")
    EmulatorConfig(host=host, tls_cert=right.certificate, tls_key=right.private_key).validate()


def test_tls_certificate_for_loopback_covers_host_localhost(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    certs.init_ca(pki)
    server = certs.issue_server(pki, "127.0.0.1")

    config = EmulatorConfig(
        host="localhost", tls_cert=server.certificate, tls_key=server.private_key
    )

    config.validate()  # the loopback certificate names localhost, 127.0.0.1 and ::1


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_time_scale_must_be_positive(tmp_path: Path, scale: float) -> None:
    with pytest.raises(UsageError, match="time-scale"):
        start_in_thread(EmulatorConfig(port=0, data_dir=tmp_path / "data", time_scale=scale))


def test_time_scale_reaches_the_context(tmp_path: Path) -> None:
    running = start_in_thread(EmulatorConfig(port=0, data_dir=tmp_path / "data", time_scale=60))
    running.stop()

    assert running.context.time_scale == 60
    assert running.context.scaled(30) == 0.5


def test_tls_cert_without_key_is_usage_error(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")

    with pytest.raises(UsageError, match="go together"):
        start_in_thread(EmulatorConfig(port=0, data_dir=tmp_path / "data", tls_cert=cert))


def test_emulator_answers_a_burst_of_new_connections_at_once(tmp_path: Path) -> None:
    # prefctl's server loop accepts every waiting connection (server_loop), not one per turn.
    running = start_in_thread(EmulatorConfig(port=free_port(), data_dir=tmp_path / "data"))
    try:
        port = int(running.url.rsplit(":", 1)[1])
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(64)]
        try:
            for client in clients:
                client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            for client in clients:
                assert client.recv(64).startswith(b"HTTP/1.1 200")
        finally:
            for client in clients:
                client.close()
    finally:
        running.stop()
