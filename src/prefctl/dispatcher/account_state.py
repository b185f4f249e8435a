"""What the engine keeps of each account between its cycles: cadence, signer and TLS identity.

``AccountState`` holds when the account's next cycle is due and how its last one went (``full``,
``idle``: read by ``turns.Turns`` and the engine's waiting), and the signer and TLS identity its
requests go out with. ``prepare`` makes those two again only when the account's Hashkey or TLS
rows changed; ``sign`` makes the ``Service-Webhook`` header once per Timestamp, so the attempts
sent in the same millisecond share it.

    state = AccountState()
    state.prepare(row, tls_row, RAW)               # at each cycle that sends
    header = state.sign(wire_time(sent_at))
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from prefctl.dispatcher.transport import TlsIdentity
from prefctl.logs import register_secret
from prefctl.store.accounts import Account
from prefctl.store.dispatcher_state import TlsRow
from prefctl.webhooks.signature import SigningCredentials, Verifier, format_header

__all__ = ["AccountState"]


@dataclass
class AccountState:
    """Per-account state: cadence, signer and TLS identity."""

    next_cycle_at: float = 0.0
    full: bool = False  # the last cycle claimed all it had room for: more may be due
    idle: bool = False  # the last cycle claimed nothing: a wake-up may start the next one now
    credentials: SigningCredentials | None = None
    verifier: Verifier | None = None
    timestamp: str = ""
    header: str = ""
    tls_stamp: float | None = None
    tls: TlsIdentity | None = None

    def sign(self, timestamp: str) -> str:
        """The ``Service-Webhook`` header for attempts sent at ``timestamp``."""
        if timestamp != self.timestamp:
            assert self.verifier is not None
            signature = base64.b64encode(self.verifier.signed_bytes(timestamp)).decode("ascii")
            self.timestamp, self.header = timestamp, format_header(timestamp, signature)
        return self.header

    def prepare(self, row: Account, tls: TlsRow | None, signature_encoding: str) -> None:
        """The account's signer and TLS identity, made again only when they changed."""
        credentials = SigningCredentials(
            row.service_client_id, row.signature_user_id, row.hashkey, signature_encoding
        )
        if credentials != self.credentials:
            register_secret(row.hashkey)
            self.credentials = credentials
            self.verifier = Verifier(credentials)
            self.timestamp = ""
        stamp = None if tls is None else tls.updated_at
        if stamp != self.tls_stamp:
            self.tls_stamp = stamp
            self.tls = None
            if tls is not None:
                register_secret(tls.client_key_pem)
                self.tls = TlsIdentity(
                    _bytes(tls.client_cert_pem), _bytes(tls.client_key_pem), _bytes(tls.ca_pem)
                )


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()
