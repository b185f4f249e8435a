"""The TLS identity an account's deliveries use: mTLS client certificate and extra trusted CAs.

Spec "mTLS for webhooks": the support team installs a client certificate on the service side; the
dispatcher presents it on event deliveries to receivers that ask for one, and verifies every
receiver's certificate. **[decision]** It is installed per account in the store
(``prefctl dispatcher tls set --cert client.pem --key client.key [--ca ca.pem]``), so it applies
to the emulator's dispatcher and to ``dispatcher run`` alike, and travels with the store; ``--ca``
adds CAs to the system's trust store for that account's deliveries (a development CA, an internal
PKI). The engine picks a change up at its next cycle.

    >>> with open_store(path) as conn:
    ...     install(conn, "DEMO_CORP", cert=Path("client.pem"), key=Path("client.key"), now=now)
    ...     describe(get_tls(conn, "DEMO_CORP"))
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from prefctl.errors import NotFoundError, UsageError
from prefctl.logs import register_secret
from prefctl.private_files import os_reason
from prefctl.store import Store
from prefctl.store.accounts import list_accounts
from prefctl.store.db import transaction
from prefctl.store.dispatcher_state import TlsRow, clear_tls, get_tls, put_tls

__all__ = ["clear", "describe", "install", "resolve_account", "show", "ssl_context"]


def resolve_account(conn: Store, account: str | None) -> str:
    """``account``, or the store's only account; a UsageError when it has several."""
    names = [a.service_client_id for a in list_accounts(conn)]
    if account is not None:
        if account not in names:
            raise NotFoundError(f"no account {account} in the store")
        return account
    if len(names) == 1:
        return names[0]
    if not names:
        raise NotFoundError(
            "the store has no account", hint="start the emulator once to create one"
        )
    raise UsageError(
        f"the store has {len(names)} accounts: name one with --account",
        hint=f"accounts: {', '.join(names)}",
    )


def install(
    conn: Store,
    account: str,
    *,
    cert: Path | None,
    key: Path | None,
    ca: Path | None,
    now: float,
) -> TlsRow:
    """Check and store the client certificate and key (together) and/or the extra CAs.

    Given parts replace the installed ones; a part not given is kept.
    """
    from cryptography.hazmat.primitives import serialization

    from prefctl.certs import load_certificate, load_private_key

    if (cert is None) != (key is None):
        raise UsageError("--cert and --key go together")
    if cert is None and ca is None:
        raise UsageError("give --cert and --key, or --ca, or all three")
    current = get_tls(conn, account)
    cert_pem = current.client_cert_pem if current else None
    key_pem = current.client_key_pem if current else None
    ca_pem = current.ca_pem if current else None
    if cert is not None and key is not None:
        certificate = load_certificate(cert)
        private_key = load_private_key(key)
        raw = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        if private_key.public_key().public_bytes(*raw) != certificate.public_key().public_bytes(
            *raw
        ):
            raise UsageError(f"the key {key} does not belong to the certificate {cert}")
        cert_pem = certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")
        key_pem = private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode("ascii")
        register_secret(key_pem)
    if ca is not None:
        ca_pem = _ca_bundle(ca)
    row = TlsRow(account, cert_pem, key_pem, ca_pem, now)
    with transaction(conn):
        put_tls(conn, row)
    return row


def show(conn: Store, account: str) -> dict[str, Any]:
    """What is installed for ``account`` (never the key)."""
    return describe(account, get_tls(conn, account))


def clear(conn: Store, account: str) -> bool:
    """Remove the account's delivery TLS settings; False when there were none."""
    with transaction(conn):
        return clear_tls(conn, account)


def describe(account: str, row: TlsRow | None) -> dict[str, Any]:
    """A record of the installed settings: client certificate subject, issuer, expiry and SHA-256
    thumbprint; the subjects of the extra CAs."""
    from cryptography import x509

    from prefctl.certs import thumbprint_sha256

    record: dict[str, Any] = {
        "account": account,
        "client_certificate": None,
        "extra_cas": [],
        "updated_at": None,
    }
    if row is None:
        return record
    from prefctl.store.timestamps import wire_time

    record["updated_at"] = wire_time(row.updated_at)
    if row.client_cert_pem:
        certificate = x509.load_pem_x509_certificate(row.client_cert_pem.encode())
        record["client_certificate"] = {
            "subject": certificate.subject.rfc4514_string(),
            "issuer": certificate.issuer.rfc4514_string(),
            "not_after": certificate.not_valid_after_utc.isoformat(),
            "sha256": thumbprint_sha256(certificate),
        }
    if row.ca_pem:
        cas = x509.load_pem_x509_certificates(row.ca_pem.encode())
        record["extra_cas"] = [ca.subject.rfc4514_string() for ca in cas]
    return record


def _ca_bundle(path: Path) -> str:
    from cryptography import x509

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {os_reason(exc)}") from None
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise UsageError(
            f"{path} holds no PEM certificate",
            hint="it should hold '-----BEGIN CERTIFICATE-----' blocks",
        ) from None
    from cryptography.hazmat.primitives import serialization

    return "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in certificates)


def ssl_context(row: TlsRow) -> ssl.SSLContext:
    """A verifying client context presenting the account's certificate and trusting its extra CA,
    for HTTP clients other than the engine's libcurl transport (the validation handshake)."""
    import os
    import tempfile

    from prefctl.auth.tls import ssl_context as verifying_context

    context = verifying_context(None)
    if row.ca_pem:
        context.load_verify_locations(cadata=row.ca_pem)
    if row.client_cert_pem and row.client_key_pem:
        register_secret(row.client_key_pem)
        # load_cert_chain reads files only: a private file that lives just long enough.
        fd, name = tempfile.mkstemp(prefix="prefctl-mtls-", suffix=".pem")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(row.client_cert_pem + "\n" + row.client_key_pem)
            context.load_cert_chain(name)
        finally:
            os.unlink(name)
    return context
