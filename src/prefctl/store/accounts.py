"""Accounts, OAuth clients and API users (migration ``0001_accounts``).

Plain functions over a ``Store``; callers own the transaction. Secrets of clients are
stored as ``salt`` + SHA-256(salt ‖ secret): the secrets are 64 random characters (about 380 bits),
so a slow password hash would add cost and no strength.

    >>> with open_store(path) as conn, transaction(conn):
    ...     add_account(conn, Account("DEMO_CORP", hashkey="…", signature_user_id="events-signer"))
    ...     add_user(conn, User("DEMO_CORP", "admin", permissions=PERMISSIONS))
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefctl.store import Row, Store

# The permissions of docs/api.md; a user named in a token's scope holds some of them.
PERMISSIONS: tuple[str, ...] = (
    "profiles:read",
    "profiles:write",
    "subscriptions:read",
    "subscriptions:write",
    "settings:read",
    "settings:write",
    "programs:read",
    "events:read",
)

DEFAULT_TOKEN_LIFETIME_MINUTES = 60


@dataclass(frozen=True)
class Account:
    """An account: its service client id and what webhooks are signed with."""

    service_client_id: str
    hashkey: str = field(repr=False)
    signature_user_id: str
    environment: str = "Sandbox"
    created_at: float = 0.0


@dataclass(frozen=True)
class OAuthClient:
    """A client of the token endpoint, authenticated by a secret or a registered certificate."""

    client_id: str
    service_client_id: str
    created_at: float
    name: str = ""
    token_lifetime_minutes: int = DEFAULT_TOKEN_LIFETIME_MINUTES
    secret_salt: str | None = field(default=None, repr=False)
    secret_hash: str | None = field(default=None, repr=False)
    certificate_pem: str | None = None
    certificate_thumbprint: str | None = None
    # The secret a rotation replaced, accepted until previous_secret_expires_at (migration 0011).
    previous_secret_salt: str | None = field(default=None, repr=False)
    previous_secret_hash: str | None = field(default=None, repr=False)
    previous_secret_expires_at: float | None = None

    @property
    def auth_method(self) -> str:
        """``certificate`` or ``client_secret``: how this client proves who it is."""
        return "certificate" if self.certificate_pem else "client_secret"


@dataclass(frozen=True)
class User:
    """An API user of an account and the permissions it holds."""

    service_client_id: str
    user_id: str
    created_at: float
    permissions: tuple[str, ...] = ()
    is_active: bool = True


@dataclass(frozen=True)
class LocalCredentials:
    """The bootstrap credentials that ``emulator start`` writes into profile ``local``."""

    service_client_id: str
    user_id: str
    client_id: str
    client_secret: str = field(repr=False)


# -- secrets ---------------------------------------------------------------------------------------
def hash_secret(secret: str, salt: str | None = None) -> tuple[str, str]:
    """``(salt, hex digest)`` of a client secret; a fresh random salt unless one is given."""
    salt = secrets.token_hex(16) if salt is None else salt
    digest = hashlib.sha256(bytes.fromhex(salt) + secret.encode("utf-8")).hexdigest()
    return salt, digest


def secret_matches(client: OAuthClient, secret: str, *, now: float | None = None) -> bool:
    """Whether ``secret`` is the client's secret, compared in constant time; with ``now`` (Unix
    seconds), also the secret a rotation replaced, until its overlap ends."""
    current = _digest_matches(secret, client.secret_salt, client.secret_hash)
    previous = _digest_matches(secret, client.previous_secret_salt, client.previous_secret_hash)
    overlap_ends = client.previous_secret_expires_at
    return current or (
        previous and now is not None and overlap_ends is not None and now < overlap_ends
    )


def _digest_matches(secret: str, salt: str | None, digest: str | None) -> bool:
    if salt is None or digest is None:
        return False
    return hmac.compare_digest(hash_secret(secret, salt)[1], digest)


# -- accounts --------------------------------------------------------------------------------------
def add_account(conn: Store, account: Account) -> None:
    conn.execute(
        "INSERT INTO accounts (service_client_id, environment, hashkey, signature_user_id,"
        " created_at) VALUES (?, ?, ?, ?, ?)",
        (
            account.service_client_id,
            account.environment,
            account.hashkey,
            account.signature_user_id,
            account.created_at,
        ),
    )


def get_account(conn: Store, service_client_id: str) -> Account | None:
    row = conn.execute(
        "SELECT * FROM accounts WHERE service_client_id = ?", (service_client_id,)
    ).fetchone()
    return _account(row) if row else None


def list_accounts(conn: Store) -> list[Account]:
    rows = conn.execute("SELECT * FROM accounts ORDER BY created_at, service_client_id")
    return [_account(row) for row in rows]


def delete_account(conn: Store, service_client_id: str) -> bool:
    """Delete an account and everything it owns; False when there is no such account.

    Foreign keys take what hangs off the account (clients, users, profiles, subscriptions,
    settings, programs, events, deliveries and their attempts, imports, alert incidents); the
    token bookkeeping (keyed by client id), the alert emails (kept without foreign keys so that
    they outlive a subscription) and the dispatchers' shared limits are deleted here first.
    """
    for statement in _ACCOUNT_BOOKKEEPING_DELETES:
        conn.execute(statement, (service_client_id,))
    cursor = conn.execute("DELETE FROM accounts WHERE service_client_id = ?", (service_client_id,))
    return cursor.rowcount > 0


_ACCOUNT_BOOKKEEPING_DELETES = (
    "DELETE FROM revoked_tokens WHERE jti IN (SELECT jti FROM issued_tokens WHERE client_id IN"
    " (SELECT client_id FROM oauth_clients WHERE service_client_id = ?))",
    "DELETE FROM issued_tokens WHERE client_id IN"
    " (SELECT client_id FROM oauth_clients WHERE service_client_id = ?)",
    "DELETE FROM used_assertions WHERE client_id IN"
    " (SELECT client_id FROM oauth_clients WHERE service_client_id = ?)",
    "DELETE FROM alert_messages WHERE service_client_id = ?",
    # The account's limits as the dispatchers share them (no foreign keys: store/ceilings.py).
    "DELETE FROM dispatcher_cycles WHERE service_client_id = ?",
    "DELETE FROM dispatcher_slots WHERE service_client_id = ?",
)


def _account(row: Row) -> Account:
    return Account(
        service_client_id=row["service_client_id"],
        hashkey=row["hashkey"],
        signature_user_id=row["signature_user_id"],
        environment=row["environment"],
        created_at=row["created_at"],
    )


# -- OAuth clients ---------------------------------------------------------------------------------
def add_client(conn: Store, client: OAuthClient) -> None:
    conn.execute(
        "INSERT INTO oauth_clients (client_id, service_client_id, name, secret_salt, secret_hash,"
        " certificate_pem, certificate_thumbprint, token_lifetime_minutes, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            client.client_id,
            client.service_client_id,
            client.name,
            client.secret_salt,
            client.secret_hash,
            client.certificate_pem,
            client.certificate_thumbprint,
            client.token_lifetime_minutes,
            client.created_at,
        ),
    )


def get_client(conn: Store, client_id: str) -> OAuthClient | None:
    row = conn.execute("SELECT * FROM oauth_clients WHERE client_id = ?", (client_id,)).fetchone()
    return _client(row) if row else None


def client_with_thumbprint(conn: Store, thumbprint: str) -> OAuthClient | None:
    row = conn.execute(
        "SELECT * FROM oauth_clients WHERE certificate_thumbprint = ?", (thumbprint,)
    ).fetchone()
    return _client(row) if row else None


def list_clients(conn: Store, service_client_id: str | None = None) -> list[OAuthClient]:
    if service_client_id is None:
        rows = conn.execute("SELECT * FROM oauth_clients ORDER BY created_at, rowid")
    else:
        rows = conn.execute(
            "SELECT * FROM oauth_clients WHERE service_client_id = ? ORDER BY created_at, rowid",
            (service_client_id,),
        )
    return [_client(row) for row in rows]


def _client(row: Row) -> OAuthClient:
    return OAuthClient(
        client_id=row["client_id"],
        service_client_id=row["service_client_id"],
        created_at=row["created_at"],
        name=row["name"],
        token_lifetime_minutes=row["token_lifetime_minutes"],
        secret_salt=row["secret_salt"],
        secret_hash=row["secret_hash"],
        certificate_pem=row["certificate_pem"],
        certificate_thumbprint=row["certificate_thumbprint"],
        previous_secret_salt=row["previous_secret_salt"],
        previous_secret_hash=row["previous_secret_hash"],
        previous_secret_expires_at=row["previous_secret_expires_at"],
    )


def rotate_client_secret(
    conn: Store,
    client_id: str,
    *,
    salt: str,
    digest: str,
    previous_expires_at: float,
) -> None:
    """Make ``salt``/``digest`` the client's secret; the one it replaces stays accepted until
    ``previous_expires_at`` (Unix seconds). A secret replaced before is forgotten."""
    conn.execute(
        "UPDATE oauth_clients SET previous_secret_salt = secret_salt,"
        " previous_secret_hash = secret_hash, previous_secret_expires_at = ?,"
        " secret_salt = ?, secret_hash = ? WHERE client_id = ?",
        (previous_expires_at, salt, digest, client_id),
    )


# -- users -----------------------------------------------------------------------------------------
def add_user(conn: Store, user: User) -> None:
    conn.execute(
        "INSERT INTO users (service_client_id, user_id, is_active, created_at) VALUES (?, ?, ?, ?)",
        (user.service_client_id, user.user_id, int(user.is_active), user.created_at),
    )
    conn.executemany(
        "INSERT INTO user_permissions (service_client_id, user_id, permission) VALUES (?, ?, ?)",
        [(user.service_client_id, user.user_id, p) for p in dict.fromkeys(user.permissions)],
    )


def get_user(conn: Store, service_client_id: str, user_id: str) -> User | None:
    row = conn.execute(
        "SELECT * FROM users WHERE service_client_id = ? AND user_id = ?",
        (service_client_id, user_id),
    ).fetchone()
    return _user(conn, row) if row else None


def list_users(conn: Store, service_client_id: str | None = None) -> list[User]:
    if service_client_id is None:
        rows = conn.execute("SELECT * FROM users ORDER BY created_at, rowid").fetchall()
    else:
        rows = conn.execute(
            "SELECT * FROM users WHERE service_client_id = ? ORDER BY created_at, rowid",
            (service_client_id,),
        ).fetchall()
    return [_user(conn, row) for row in rows]


def _user(conn: Store, row: Row) -> User:
    held = {
        r[0]
        for r in conn.execute(
            "SELECT permission FROM user_permissions WHERE service_client_id = ? AND user_id = ?",
            (row["service_client_id"], row["user_id"]),
        )
    }
    # Known permissions in their canonical order, then any others a later release may add.
    ordered = [p for p in PERMISSIONS if p in held] + sorted(held - set(PERMISSIONS))
    return User(
        service_client_id=row["service_client_id"],
        user_id=row["user_id"],
        created_at=row["created_at"],
        permissions=tuple(ordered),
        is_active=bool(row["is_active"]),
    )


# -- the credentials of profile 'local' ------------------------------------------------------------
def save_local_credentials(conn: Store, creds: LocalCredentials) -> None:
    conn.execute(
        "INSERT INTO local_credentials"
        " (singleton, service_client_id, user_id, client_id, client_secret) VALUES (1, ?, ?, ?, ?)"
        " ON CONFLICT (singleton) DO UPDATE SET service_client_id = excluded.service_client_id,"
        " user_id = excluded.user_id, client_id = excluded.client_id,"
        " client_secret = excluded.client_secret",
        (creds.service_client_id, creds.user_id, creds.client_id, creds.client_secret),
    )


def get_local_credentials(conn: Store) -> LocalCredentials | None:
    row = conn.execute("SELECT * FROM local_credentials WHERE singleton = 1").fetchone()
    if row is None:
        return None
    return LocalCredentials(
        service_client_id=row["service_client_id"],
        user_id=row["user_id"],
        client_id=row["client_id"],
        client_secret=row["client_secret"],
    )


def update_local_secret(conn: Store, client_id: str, client_secret: str) -> bool:
    """Keep the plain secret of profile 'local' current after a rotation of its client; whether
    ``client_id`` is that client."""
    cursor = conn.execute(
        "UPDATE local_credentials SET client_secret = ? WHERE client_id = ?",
        (client_secret, client_id),
    )
    return cursor.rowcount > 0
