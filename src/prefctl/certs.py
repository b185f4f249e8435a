"""A development PKI: one local CA, and server and client certificates it signs.

So that TLS, mTLS and certificate authentication can be tried on one machine without a real CA::

    >>> ca = init_ca(Path("certs"))                    # certs/ca.pem, certs/ca.key
    >>> issue_server(Path("certs"), "127.0.0.1")       # certs/server-127.0.0.1.pem + .key
    >>> issue_client(Path("certs"), "ci-bot")          # certs/client-ci-bot.pem + .key

Private keys are written 0600. Keys are EC P-256 by default (fast to make, ES256 for client
assertions) or RSA 2048. The CA lives 10 years; certificates it issues 397 days (the longest
lifetime browsers accept), never past the CA. A server certificate for ``localhost``, ``127.0.0.1``
or ``::1`` names all three, so either spelling of the address verifies.

This module also loads PEM certificates and keys for the rest of prefctl (``load_certificate``,
``load_private_key``), turning malformed files into one-line ``ConfigError``s (exit 2), and tells
whether a server certificate covers a host the way a verifying TLS client decides it
(``host_names``, ``covers_host``, ``require_host``), so servers can refuse one that no client could
verify before they announce their URL.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import re
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from prefctl.errors import ConfigError, UsageError
from prefctl.private_files import locked, make_private_dir, os_reason, write_private

if TYPE_CHECKING:
    from prefctl.clock import Clock

__all__ = [
    "CA_CERT_FILE",
    "CA_KEY_FILE",
    "CA_LIFETIME",
    "LEAF_LIFETIME",
    "IssuedCertificate",
    "KeyType",
    "PrivateKey",
    "covers_host",
    "default_certs_dir",
    "host_names",
    "init_ca",
    "issue_client",
    "issue_server",
    "load_certificate",
    "load_private_key",
    "require_host",
    "thumbprint_sha256",
]

KeyType = Literal["ec", "rsa"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

CA_LIFETIME = timedelta(days=3650)
LEAF_LIFETIME = timedelta(days=397)
# Backdate validity a little so a peer whose clock runs slightly behind still accepts it.
_BACKDATE = timedelta(minutes=5)
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HOST = re.compile(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9-]{1,63})*\.?$")

CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"


@dataclass(frozen=True)
class IssuedCertificate:
    """Where a certificate and its key were written, and what they are."""

    kind: Literal["ca", "server", "client"]
    name: str
    certificate: Path
    private_key: Path
    ca_certificate: Path
    not_after: datetime
    sha256: str
    created: bool = True

    def as_dict(self) -> dict[str, str | bool]:
        return {
            "kind": self.kind,
            "name": self.name,
            "certificate": str(self.certificate),
            "private_key": str(self.private_key),
            "ca_certificate": str(self.ca_certificate),
            "not_after": self.not_after.isoformat(),
            "sha256": self.sha256,
            "created": self.created,
        }


def default_certs_dir(env: Mapping[str, str] | None = None) -> Path:
    """``certs`` in prefctl's data dir (``PREFCTL_DATA_DIR``, else the platform's user data dir)."""
    from prefctl.config.paths import resolve_data_dir

    return resolve_data_dir(None, env) / "certs"


def thumbprint_sha256(certificate: x509.Certificate) -> str:
    """The certificate's SHA-256 thumbprint, base64url without padding (JOSE ``x5t#S256``)."""
    digest = hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


# -- loading --------------------------------------------------------------------------------------
def load_certificate(path: Path) -> x509.Certificate:
    """The first PEM certificate in ``path``; ConfigError when unreadable or not a certificate."""
    data = _read(path, "certificate")
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        raise ConfigError(
            f"{path} is not a PEM certificate",
            hint="it should start with '-----BEGIN CERTIFICATE-----'",
        ) from None


def load_private_key(path: Path) -> PrivateKey:
    """An unencrypted PEM RSA or EC private key; ConfigError for anything else."""
    data = _read(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise ConfigError(
            f"the private key {path} is encrypted",
            hint="prefctl needs an unencrypted key: openssl pkey -in KEY -out KEY.plain",
        ) from None
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(
            f"{path} is not a PEM private key",
            hint="it should start with '-----BEGIN PRIVATE KEY-----' (or EC/RSA PRIVATE KEY)",
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ConfigError(f"the private key {path} is neither RSA nor EC")
    return key


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {os_reason(exc)}") from None


# -- which hosts a server certificate covers ------------------------------------------------------
def host_names(certificate: x509.Certificate) -> list[str]:
    """The names and addresses a verifying TLS client accepts ``certificate`` for.

    Its DNS and IP subject alternative names; when it has no DNS name, its common name too if that
    is a host name (OpenSSL, and so Python and httpx, then match DNS hosts against it).
    """
    dns, addresses = _alt_names(certificate)
    return [*_dns_patterns(certificate, dns), *(str(address) for address in addresses)]


def covers_host(certificate: x509.Certificate, host: str) -> bool:
    """Whether a client verifying ``certificate`` for ``host`` (a DNS name, an IP address, or an
    IPv6 address in brackets as in a URL) would accept it.

    As OpenSSL checks it for Python's ``ssl``: an IP address must be an IP subject alternative
    name; a DNS name must equal a DNS name, case aside, or match a wildcard that is the whole
    left-most label (``*.example.test`` covers ``a.example.test``, not ``example.test``).
    """
    host = _bare_host(host)
    dns, addresses = _alt_names(certificate)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return any(_dns_match(pattern, host) for pattern in _dns_patterns(certificate, dns))
    return address in addresses


def require_host(cert_path: Path, host: str, *, role: str, host_option: str = "--host") -> None:
    """UsageError (exit 2) unless the PEM certificate in ``cert_path`` covers ``host``.

    ``role`` says where clients meet ``host`` (``"the host in profile local's URLs"``);
    ``host_option`` is the option that chooses it. A file that holds no PEM certificate is not
    judged here: loading it for TLS reports that.
    """
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (OSError, ValueError):
        return
    if covers_host(certificate, host):
        return
    host = _bare_host(host)
    names = host_names(certificate)
    covered = ", ".join(names) if names else "no host name"
    raise UsageError(
        f"the TLS certificate {cert_path} covers {covered}, not {host}, {role}; "
        "clients would refuse it",
        hint=f"issue one for {host} with 'prefctl certs issue --server {host}', "
        f"or set {host_option} to a name it covers",
    )


def _alt_names(
    certificate: x509.Certificate,
) -> tuple[list[str], list[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    try:
        sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    addresses = [
        value
        for value in sans.get_values_for_type(x509.IPAddress)
        if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address)
    ]
    return list(sans.get_values_for_type(x509.DNSName)), addresses


def _dns_patterns(certificate: x509.Certificate, dns: list[str]) -> list[str]:
    if dns:
        return dns
    names = []
    for attribute in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME):
        value = attribute.value if isinstance(attribute.value, str) else ""
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if _HOST.match(value):
                names.append(value)
    return names


def _bare_host(host: str) -> str:
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.rstrip(".").lower()


def _dns_match(pattern: str, host: str) -> bool:
    pattern = pattern.rstrip(".").lower()
    if pattern == host:
        return True
    if not pattern.startswith("*.") or pattern.count(".") < 2:
        return False
    label, _, rest = host.partition(".")
    return bool(label) and rest == pattern[2:]


# -- issuing --------------------------------------------------------------------------------------
def init_ca(
    directory: Path, *, clock: Clock | None = None, key_type: KeyType = "ec"
) -> IssuedCertificate:
    """Create the development CA in ``directory``; an existing CA is kept (``created=False``).

    Re-creating it would invalidate every certificate it issued, so this never overwrites; of two
    ``certs init`` at the same moment, one creates the CA and the other finds it.
    """
    with _pki_locked(directory):
        cert_path, key_path = directory / CA_CERT_FILE, directory / CA_KEY_FILE
        if cert_path.exists() or key_path.exists():
            certificate, _ = _load_ca(directory)
            return _issued("ca", "ca", cert_path, key_path, cert_path, certificate, created=False)
        return _new_ca(directory, clock, key_type)


def _pki_locked(directory: Path) -> AbstractContextManager[None]:
    """The development PKI's lock: a CA or a certificate is a key and a certificate file written
    one after the other, so two commands writing them at once could pair one's key with the
    other's certificate."""
    make_private_dir(directory, "the certificates folder")
    return locked(directory / CA_KEY_FILE)


def _new_ca(directory: Path, clock: Clock | None, key_type: KeyType) -> IssuedCertificate:
    cert_path, key_path = directory / CA_CERT_FILE, directory / CA_KEY_FILE
    now = _now(clock)
    key = _new_key(key_type)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "prefctl development"),
            x509.NameAttribute(NameOID.COMMON_NAME, "prefctl development CA"),
        ]
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    certificate = builder.sign(key, hashes.SHA256())
    _write(directory, cert_path, key_path, certificate, key)
    return _issued("ca", "ca", cert_path, key_path, cert_path, certificate)


def issue_server(
    directory: Path, host: str, *, clock: Clock | None = None, key_type: KeyType = "ec"
) -> IssuedCertificate:
    """A TLS server certificate for ``host`` (a DNS name or an IP address), signed by the CA."""
    sans = _server_names(host)
    return _issue(directory, "server", host, sans, ExtendedKeyUsageOID.SERVER_AUTH, clock, key_type)


def issue_client(
    directory: Path, name: str, *, clock: Clock | None = None, key_type: KeyType = "ec"
) -> IssuedCertificate:
    """A client certificate (``clientAuth``) with common name ``name``, signed by the CA.

    Use it for mTLS, or register it with ``prefctl emulator clients add --certificate`` and set
    ``auth_method = "certificate"``.
    """
    if not _NAME.match(name):
        raise UsageError(
            f"invalid client name '{name}'",
            hint="use letters, digits, '.', '_' or '-' (at most 64 characters)",
        )
    return _issue(directory, "client", name, [], ExtendedKeyUsageOID.CLIENT_AUTH, clock, key_type)


def _issue(
    directory: Path,
    kind: Literal["server", "client"],
    name: str,
    sans: list[x509.GeneralName],
    usage: x509.ObjectIdentifier,
    clock: Clock | None,
    key_type: KeyType,
) -> IssuedCertificate:
    if not directory.is_dir():
        _load_ca(directory)  # raises: no CA there (and the folder is not created for nothing)
    with _pki_locked(directory):
        ca_cert, ca_key = _load_ca(directory)
        key = _new_key(key_type)
        certificate = _leaf(ca_cert, ca_key, key, name, sans, usage, _now(clock))
        stem = f"{kind}-{re.sub(r'[^A-Za-z0-9._-]', '_', name)}"
        cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
        _write(directory, cert_path, key_path, certificate, key)
    return _issued(kind, name, cert_path, key_path, directory / CA_CERT_FILE, certificate)


def _leaf(
    ca_cert: x509.Certificate,
    ca_key: PrivateKey,
    key: PrivateKey,
    name: str,
    sans: list[x509.GeneralName],
    usage: x509.ObjectIdentifier,
    now: datetime,
) -> x509.Certificate:
    """A certificate for ``key`` named ``name``, signed by the CA."""
    not_after = min(now + LEAF_LIFETIME, ca_cert.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=isinstance(key, rsa.RSAPrivateKey),
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _server_names(host: str) -> list[x509.GeneralName]:
    host = host.strip().lower()
    if host in _LOOPBACK_NAMES:
        return [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]
    try:
        return [x509.IPAddress(ipaddress.ip_address(host))]
    except ValueError:
        pass
    if not _HOST.match(host) or len(host) > 253:
        raise UsageError(f"invalid host '{host}'", hint="give a DNS name or an IP address")
    return [x509.DNSName(host.rstrip("."))]


def _load_ca(directory: Path) -> tuple[x509.Certificate, PrivateKey]:
    cert_path, key_path = directory / CA_CERT_FILE, directory / CA_KEY_FILE
    if not cert_path.exists() or not key_path.exists():
        raise UsageError(
            f"no development CA in {directory}",
            hint=f"create one with 'prefctl certs init --dir {directory}'",
        )
    certificate, key = load_certificate(cert_path), load_private_key(key_path)
    if certificate.public_key() != key.public_key():
        raise ConfigError(f"{key_path} is not the private key of {cert_path}")
    return certificate, key


def _new_key(key_type: KeyType) -> PrivateKey:
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if key_type == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    raise UsageError(f"unknown key type '{key_type}'", hint="use ec or rsa")


def _write(
    directory: Path,
    cert_path: Path,
    key_path: Path,
    certificate: x509.Certificate,
    key: PrivateKey,
) -> None:
    make_private_dir(directory, "the certificates folder")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_private(key_path, key_pem)
    # Certificates are public; readable by others so servers running as another user can load them.
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    os.chmod(cert_path, 0o644)


def _issued(
    kind: Literal["ca", "server", "client"],
    name: str,
    cert_path: Path,
    key_path: Path,
    ca_path: Path,
    certificate: x509.Certificate,
    *,
    created: bool = True,
) -> IssuedCertificate:
    return IssuedCertificate(
        kind=kind,
        name=name,
        certificate=cert_path,
        private_key=key_path,
        ca_certificate=ca_path,
        not_after=certificate.not_valid_after_utc,
        sha256=thumbprint_sha256(certificate),
        created=created,
    )


def _now(clock: Clock | None) -> datetime:
    if clock is None:
        from prefctl.clock import SystemClock

        clock = SystemClock()
    return clock.now()
