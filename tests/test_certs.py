"""The development PKI, checked by a real TLS and mTLS handshake on loopback."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from prefctl import certs
from prefctl.auth.tls import ssl_context
from prefctl.clock import FakeClock
from prefctl.errors import EXIT_USAGE, ConfigError, UsageError
from tests.helpers import run_at_once


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


# Run by each process at the same moment: ``certs init`` on the same folder.
_INIT_AT_ONCE = """
from pathlib import Path
from prefctl import certs
ca = certs.init_ca(Path(sys.argv[1]))
print(ca.created, ca.sha256)
"""


def test_init_ca_at_the_same_moment_creates_one_ca_whose_key_matches(tmp_path: Path) -> None:
    # Unlocked, each wrote its own key and certificate: a key of one with the certificate of
    # another made a CA nothing could be issued from.
    for attempt in range(4):
        folder = tmp_path / f"pki{attempt}"
        outputs = run_at_once(_INIT_AT_ONCE, str(folder), processes=3)
        created = sorted(out.split()[0] for out, _ in outputs)
        assert created == ["False", "False", "True"]
        assert len({out.split()[1] for out, _ in outputs}) == 1  # all name the same CA
        assert certs.issue_server(folder, "127.0.0.1").created  # its key signs


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
                if peer:
                    # typeshed types the dict's values alike; "subject" is a tuple of RDNs
                    subject = cast("tuple[tuple[tuple[str, str], ...], ...]", peer["subject"])
                    seen.append(dict(rdn[0] for rdn in subject)["commonName"])
                else:
                    seen.append("-")
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


# -- which hosts a server certificate covers ------------------------------------------------------
def _client_accepts(certificate: Path, key: Path, ca: Path, host: str) -> bool:
    """Whether a real TLS handshake (in memory, prefctl's client context) verifies ``host``."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(certificate, key)
    to_client, to_server = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_in, server_in = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ssl_context(ca).wrap_bio(client_in, to_server, server_hostname=host)
    server = server_ctx.wrap_bio(server_in, to_client, server_side=True)
    for _ in range(20):
        try:
            client.do_handshake()
            return True
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLCertVerificationError:
            return False
        server_in.write(to_server.read())
        try:
            server.do_handshake()
        except ssl.SSLWantReadError:
            pass
        client_in.write(to_client.read())
    raise AssertionError("the in-memory TLS handshake did not finish")


def _common_name_only(pki: Path, common_name: str) -> tuple[Path, Path]:
    """A server certificate without subject alternative names, signed by the development CA."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_cert = certs.load_certificate(pki / "ca.pem")
    ca_key = certs.load_private_key(pki / "ca.key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        # As the CA issues them: Python 3.13's default context verifies strictly (it refuses a
        # certificate without these), and only the names may differ here.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = pki / f"cn-{common_name}.pem", pki / f"cn-{common_name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.mark.parametrize(
    ("issued_for", "host", "covered"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "localhost", True),
        ("127.0.0.1", "LocalHost", True),
        ("127.0.0.1", "::1", True),
        ("127.0.0.1", "127.0.0.2", False),
        ("127.0.0.1", "example.test", False),
        ("example.test", "example.test", True),
        ("example.test", "EXAMPLE.test", True),
        ("example.test", "127.0.0.1", False),
        ("example.test", "a.example.test", False),
        ("*.example.test", "a.example.test", True),
        ("*.example.test", "example.test", False),
        ("*.example.test", "a.b.example.test", False),
        ("10.1.2.3", "10.1.2.3", True),
        ("10.1.2.3", "127.0.0.1", False),
        ("cn:cn-only.test", "cn-only.test", True),
        ("cn:cn-only.test", "other.test", False),
        ("cn:127.0.0.1", "127.0.0.1", False),
    ],
)
def test_covers_host_agrees_with_a_real_tls_handshake(
    pki: Path, issued_for: str, host: str, covered: bool
) -> None:
    if issued_for.startswith("cn:"):
        cert_path, key_path = _common_name_only(pki, issued_for.removeprefix("cn:"))
    else:
        issued = certs.issue_server(pki, issued_for)
        cert_path, key_path = issued.certificate, issued.private_key

    accepted = _client_accepts(cert_path, key_path, pki / "ca.pem", host)

    assert accepted is covered
    assert certs.covers_host(certs.load_certificate(cert_path), host) is accepted


def test_covers_host_takes_an_ipv6_address_in_brackets(pki: Path) -> None:
    certificate = certs.load_certificate(certs.issue_server(pki, "::1").certificate)
    assert certs.covers_host(certificate, "[::1]")
    assert certs.host_names(certificate) == ["localhost", "127.0.0.1", "::1"]


def test_require_host_names_what_the_certificate_covers_and_the_fix(pki: Path) -> None:
    issued = certs.issue_server(pki, "example.test")

    with pytest.raises(UsageError) as err:
        certs.require_host(issued.certificate, "127.0.0.1", role="the host in the URL")

    assert err.value.exit_code == EXIT_USAGE
    assert str(err.value) == (
        f"the TLS certificate {issued.certificate} covers example.test, not 127.0.0.1, "
        "the host in the URL; clients would refuse it"
    )
    assert "prefctl certs issue --server 127.0.0.1" in (err.value.hint or "")
    assert "--host" in (err.value.hint or "")


def test_require_host_accepts_a_covered_host_and_leaves_bad_files_to_the_loader(
    pki: Path, tmp_path: Path
) -> None:
    issued = certs.issue_server(pki, "127.0.0.1")
    certs.require_host(issued.certificate, "localhost", role="r")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("garbage")
    certs.require_host(not_pem, "127.0.0.1", role="r")
    certs.require_host(tmp_path / "missing.pem", "127.0.0.1", role="r")
