"""The development PKI, checked by a real TLS and mTLS handshake on loopback."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import stat
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from prefctl import certs
from prefctl.auth.tls import ssl_context
from prefctl.clock import FakeClock
from prefctl.errors import EXIT_USAGE, ConfigError, UsageError


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    certs.init_ca(folder)
    return folder


def _sans(path: Path) -> list[object]:
    cert = certs.load_certificate(path)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [*names.get_values_for_type(x509.DNSName), *names.get_values_for_type(x509.IPAddress)]


def test_init_ca_writes_a_ca_certificate_and_a_private_key(tmp_path: Path) -> None:
    clock = FakeClock()
    ca = certs.init_ca(tmp_path / "pki", clock=clock)
    assert ca.created
    assert stat.S_IMODE(ca.private_key.stat().st_mode) == 0o600
    cert = certs.load_certificate(ca.certificate)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_after_utc == clock.now() + certs.CA_LIFETIME


def test_init_ca_keeps_an_existing_ca(pki: Path) -> None:
    before = (pki / "ca.pem").read_bytes()
    again = certs.init_ca(pki)
    assert not again.created
    assert (pki / "ca.pem").read_bytes() == before


def test_issue_server_for_loopback_names_localhost_and_both_ips(pki: Path) -> None:
    issued = certs.issue_server(pki, "127.0.0.1")
    assert issued.certificate.name == "server-127.0.0.1.pem"
    assert _sans(issued.certificate) == [
        "localhost",
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    cert = certs.load_certificate(issued.certificate)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert stat.S_IMODE(issued.private_key.stat().st_mode) == 0o600


def test_issue_server_for_a_dns_name_or_ip(pki: Path) -> None:
    assert _sans(certs.issue_server(pki, "emulator.test").certificate) == ["emulator.test"]
    assert _sans(certs.issue_server(pki, "10.1.2.3").certificate) == [
        ipaddress.ip_address("10.1.2.3")
    ]


def test_issue_client_has_client_auth_and_the_name(pki: Path) -> None:
    clock = FakeClock()
    issued = certs.issue_client(pki, "ci-bot", clock=clock, key_type="rsa")
    cert = certs.load_certificate(issued.certificate)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "ci-bot"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert isinstance(certs.load_private_key(issued.private_key), rsa.RSAPrivateKey)
    assert cert.not_valid_after_utc == clock.now() + timedelta(days=397)
    assert issued.sha256 == certs.thumbprint_sha256(cert)


def test_issue_without_a_ca_tells_to_run_init(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no development CA") as err:
        certs.issue_client(tmp_path, "bot")
    assert "prefctl certs init" in (err.value.hint or "")
    assert err.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("name", ["", "a b", "../x", "-x"])
def test_issue_client_rejects_unsafe_names(pki: Path, name: str) -> None:
    with pytest.raises(UsageError, match="invalid client name"):
        certs.issue_client(pki, name)


def test_issue_server_rejects_a_bad_host(pki: Path) -> None:
    with pytest.raises(UsageError, match="invalid host"):
        certs.issue_server(pki, "bad host/")


def test_issue_with_a_damaged_ca_key_is_a_config_error(tmp_path: Path) -> None:
    certs.init_ca(tmp_path)
    (tmp_path / "ca.key").write_text("garbage")
    with pytest.raises(ConfigError, match="is not a PEM private key"):
        certs.issue_server(tmp_path, "localhost")


def _handshake(pki: Path, host: str, *, client_cert: certs.IssuedCertificate | None) -> str:
    """Serve one TLS connection with the issued server certificate; return what the client read."""
    server = certs.issue_server(pki, "localhost")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(server.certificate, server.private_key)
    if client_cert is not None:
        server_ctx.verify_mode = ssl.CERT_REQUIRED
        server_ctx.load_verify_locations(cafile=str(pki / "ca.pem"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[str] = []

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                peer = tls.getpeercert()
                seen.append(dict(x[0] for x in peer["subject"])["commonName"] if peer else "-")
                tls.sendall(b"hello")
        except (ssl.SSLError, OSError) as exc:
            seen.append(f"failed: {exc}")

    thread = threading.Thread(target=serve)
    thread.start()
    client_ctx = ssl_context(pki / "ca.pem")
    if client_cert is not None:
        client_ctx.load_cert_chain(client_cert.certificate, client_cert.private_key)
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client_ctx.wrap_socket(raw, server_hostname=host) as tls,
        ):
            return tls.recv(5).decode()
    finally:
        thread.join(timeout=10)
        listener.close()
        assert seen, "the server saw no connection"
        if client_cert is not None:
            assert seen[0] == client_cert.name


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_server_certificate_verifies_in_a_real_tls_handshake(pki: Path, host: str) -> None:
    assert _handshake(pki, host, client_cert=None) == "hello"


def test_client_certificate_passes_a_real_mtls_handshake(pki: Path) -> None:
    client = certs.issue_client(pki, "mtls-bot")
    assert _handshake(pki, "localhost", client_cert=client) == "hello"
