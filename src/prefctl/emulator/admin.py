"""Support-team operations on the emulator's store: what the real service's support team does on
request (register clients and certificates, add API users, revoke tokens, turn on failure alerts),
plus the first-start bootstrap and a reset. They act on the store directly (the data dir's SQLite
file, or the PostgreSQL database a team's emulator serves), so they work whether or not the
emulator is running. Clients, users and subscriptions belong to one account: the operations on
them take its ``service_client_id`` (None: the emulator's own account, profile ``local``'s) and
never see or change another account's. A token's jti is unique across accounts (a random UUID):
``revoke`` takes it alone.

    >>> with open_admin_store(data_dir) as conn:
    ...     boot = bootstrap(conn, clock)                 # idempotent
    ...     new = add_client(conn, clock, name="ci")      # new.secret is shown once, never stored
"""

from __future__ import annotations

import importlib
import re
import secrets
import string
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prefctl.clock import Clock
from prefctl.config import paths
from prefctl.errors import NotFoundError, PrefctlError, UsageError
from prefctl.store import Store, accounts, tokens
from prefctl.store.accounts import PERMISSIONS, Account, LocalCredentials, OAuthClient, User
from prefctl.store.db import ensure_private_store, open_store, transaction
from prefctl.store.timestamps import epoch

if TYPE_CHECKING:
    from prefctl.store.subscriptions import SubscriptionRecord

DEFAULT_SERVICE_CLIENT_ID = "DEMO_CORP"
DEFAULT_USER_ID = "admin"
DEFAULT_SIGNATURE_USER_ID = "events-signer"
DEFAULT_ENVIRONMENT = "Sandbox"
CLIENT_ID_LENGTH = 48
CLIENT_SECRET_LENGTH = 64
HASHKEY_LENGTH = 64
MAX_TOKEN_LIFETIME_MINUTES = 24 * 60
# How long the secret a rotation replaces keeps working by default, and at most (docs/emulator.md).
DEFAULT_ROTATION_OVERLAP_MINUTES = 60
MAX_ROTATION_OVERLAP_MINUTES = 7 * 24 * 60
# How long a reset waits for commands that have the store open (a list, a redrive) to finish.
RESET_WAIT_SECONDS = 3.0

# Seeders of a new account, run inside the bootstrap transaction: "module:function", each called
# as function(conn, account, clock). The REST API adds its seeded programs here.
ACCOUNT_SEEDERS: tuple[str, ...] = ("prefctl.emulator.routes.programs:seed_account_programs",)

_ALPHANUMERIC = string.ascii_letters + string.digits
_ACCOUNT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENVIRONMENTS = ("Sandbox", "Production")
_USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


@dataclass(frozen=True)
class Bootstrap:
    """The account and credentials of profile ``local``; ``created`` on the first start only."""

    account: Account
    credentials: LocalCredentials
    created: bool


@dataclass(frozen=True)
class NewClient:
    """A client just registered; ``secret`` is known only now (None for a certificate client)."""

    client: OAuthClient
    secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class RotatedSecret:
    """A client's new secret, known only now; the old one works until ``previous_valid_until``
    (Unix seconds; the moment of the rotation when there is no overlap)."""

    client: OAuthClient
    secret: str = field(repr=False)
    previous_valid_until: float = 0.0
    local_client: bool = False  # the client of profile 'local': its stored secret was updated


@dataclass(frozen=True)
class Revocation:
    token: tokens.IssuedToken
    already_revoked: bool


@contextmanager
def open_admin_store(data_dir: Path, store: str | None = None) -> Iterator[Store]:
    """The data dir's store (created 0600 and migrated if needed), or the PostgreSQL database of
    ``store`` (migrated if needed), closed when the block ends."""
    with open_store(store or ensure_private_store(data_dir)) as conn:
        yield conn


def random_string(length: int) -> str:
    """``length`` letters and digits from the OS's cryptographic random source."""
    return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(length))


def bootstrap(conn: Store, clock: Clock) -> Bootstrap:
    """Create the account, its admin client and user on first use; afterwards return them."""
    with transaction(conn):
        existing = accounts.get_local_credentials(conn)
        if existing is not None:
            account = accounts.get_account(conn, existing.service_client_id)
            if account is not None:
                return Bootstrap(account, existing, created=False)
        account, client, secret = _create_account(
            conn, clock, DEFAULT_SERVICE_CLIENT_ID, DEFAULT_ENVIRONMENT, client_name="local"
        )
        credentials = LocalCredentials(
            account.service_client_id, DEFAULT_USER_ID, client.client_id, secret
        )
        accounts.save_local_credentials(conn, credentials)
    return Bootstrap(account, credentials, created=True)


def _create_account(
    conn: Store, clock: Clock, service_client_id: str, environment: str, *, client_name: str
) -> tuple[Account, OAuthClient, str]:
    """Inside the caller's transaction: an account with a fresh Hashkey, a client with a fresh
    secret, the admin user holding every permission, and what ``ACCOUNT_SEEDERS`` add."""
    now = epoch(clock.now())
    account = Account(
        service_client_id=service_client_id,
        hashkey=random_string(HASHKEY_LENGTH),
        signature_user_id=DEFAULT_SIGNATURE_USER_ID,
        environment=environment,
        created_at=now,
    )
    accounts.add_account(conn, account)
    secret = random_string(CLIENT_SECRET_LENGTH)
    client = _new_client(service_client_id, now, name=client_name, secret=secret)
    accounts.add_client(conn, client)
    accounts.add_user(conn, User(service_client_id, DEFAULT_USER_ID, now, PERMISSIONS))
    for seeder in ACCOUNT_SEEDERS:
        module, _, function = seeder.partition(":")
        getattr(importlib.import_module(module), function)(conn, account, clock)
    return account, client, secret


# -- accounts --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NewAccount:
    """An account just added: its admin user and client; ``secret`` is known only now."""

    account: Account
    user_id: str
    client: OAuthClient
    secret: str = field(repr=False)


@dataclass(frozen=True)
class AccountSummary:
    """An account as ``emulator accounts list`` shows it (no secrets)."""

    account: Account
    default: bool
    clients: int
    users: int


def check_account_name(service_client_id: str) -> None:
    """UsageError unless ``service_client_id`` is a usable account name (it is also a profile
    name and a URL path segment)."""
    if not _ACCOUNT_ID.match(service_client_id):
        raise UsageError(
            f"invalid account name {service_client_id!r}",
            hint="use 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit",
        )


def add_account(
    conn: Store, clock: Clock, service_client_id: str, *, environment: str = DEFAULT_ENVIRONMENT
) -> NewAccount:
    """Add an account with its own Hashkey, admin user (every permission) and a client whose
    secret is returned once. UsageError for an invalid name or environment; PrefctlError when
    the account exists."""
    check_account_name(service_client_id)
    if environment not in ENVIRONMENTS:
        raise UsageError(
            f"invalid environment {environment!r}", hint=f"use one of: {', '.join(ENVIRONMENTS)}"
        )
    bootstrap(conn, clock)
    with transaction(conn):
        if accounts.get_account(conn, service_client_id) is not None:
            raise PrefctlError(
                f"account '{service_client_id}' already exists in this emulator",
                hint="'prefctl emulator accounts list' shows them",
            )
        account, client, secret = _create_account(
            conn, clock, service_client_id, environment, client_name=service_client_id
        )
    return NewAccount(account, DEFAULT_USER_ID, client, secret)


def list_accounts(conn: Store, clock: Clock) -> list[AccountSummary]:
    """Every account of the emulator, the default one (profile ``local``'s) first created."""
    default = bootstrap(conn, clock).account.service_client_id
    clients = accounts.list_clients(conn)
    users = accounts.list_users(conn)
    return [
        AccountSummary(
            account,
            default=account.service_client_id == default,
            clients=sum(c.service_client_id == account.service_client_id for c in clients),
            users=sum(u.service_client_id == account.service_client_id for u in users),
        )
        for account in accounts.list_accounts(conn)
    ]


def check_removable(conn: Store, clock: Clock, service_client_id: str) -> Account:
    """The account ``remove_account`` would delete. NotFoundError for an unknown account;
    PrefctlError for the default account, which profile ``local`` uses."""
    default = bootstrap(conn, clock).account.service_client_id
    account = accounts.get_account(conn, service_client_id)
    if account is None:
        raise NotFoundError(
            f"no account '{service_client_id}' in this emulator",
            hint="'prefctl emulator accounts list' shows them",
        )
    if service_client_id == default:
        raise PrefctlError(
            f"account '{service_client_id}' is the emulator's default account "
            "(profile 'local') and cannot be removed",
            hint="'prefctl emulator reset' wipes the whole store instead",
        )
    return account


def remove_account(conn: Store, clock: Clock, service_client_id: str) -> Account:
    """Delete an account and everything it owns (its clients and tokens, users, profiles,
    subscriptions, settings, events, deliveries, alerts); errors as ``check_removable``."""
    with transaction(conn):
        account = check_removable(conn, clock, service_client_id)
        accounts.delete_account(conn, service_client_id)
    return account


def add_client(
    conn: Store,
    clock: Clock,
    *,
    name: str = "",
    certificate: Path | None = None,
    token_lifetime_minutes: int = accounts.DEFAULT_TOKEN_LIFETIME_MINUTES,
    service_client_id: str | None = None,
) -> NewClient:
    """Register a client of the account ``service_client_id`` with a fresh 64-character secret,
    or with ``certificate`` (PEM file). NotFoundError for an unknown account."""
    if not 1 <= token_lifetime_minutes <= MAX_TOKEN_LIFETIME_MINUTES:
        raise UsageError(
            f"token lifetime must be 1 to {MAX_TOKEN_LIFETIME_MINUTES} minutes, "
            f"not {token_lifetime_minutes}"
        )
    if len(name) > 100 or not name.isprintable():
        raise UsageError("a client name is at most 100 printable characters")
    account = _account(conn, clock, service_client_id)
    now = epoch(clock.now())
    if certificate is not None:
        pem, thumbprint = _registrable_certificate(conn, certificate, clock, account)
        client = _new_client(
            account.service_client_id,
            now,
            name=name,
            lifetime=token_lifetime_minutes,
            certificate=(pem, thumbprint),
        )
        secret = None
    else:
        secret = random_string(CLIENT_SECRET_LENGTH)
        client = _new_client(
            account.service_client_id,
            now,
            name=name,
            lifetime=token_lifetime_minutes,
            secret=secret,
        )
    with transaction(conn):
        accounts.add_client(conn, client)
    return NewClient(client, secret)


def rotate_client_secret(
    conn: Store,
    clock: Clock,
    client_id: str,
    *,
    overlap_minutes: int = DEFAULT_ROTATION_OVERLAP_MINUTES,
    service_client_id: str | None = None,
) -> RotatedSecret:
    """Give a client of the account ``service_client_id`` a fresh 64-character secret; the one it
    replaces stays accepted at the token endpoint for ``overlap_minutes`` (0: refused at once), a
    secret replaced earlier no longer. NotFoundError for an unknown account, or a client that is
    not this account's (another account's client is not named as such: it is not there)."""
    if not 0 <= overlap_minutes <= MAX_ROTATION_OVERLAP_MINUTES:
        raise UsageError(
            f"the overlap must be 0 to {MAX_ROTATION_OVERLAP_MINUTES} minutes (7 days), "
            f"not {overlap_minutes}"
        )
    account = _account(conn, clock, service_client_id)
    listing = "prefctl emulator clients list"
    if service_client_id is not None:
        listing += f" --account {account.service_client_id}"
    secret = random_string(CLIENT_SECRET_LENGTH)
    salt, digest = accounts.hash_secret(secret)
    now = epoch(clock.now())
    until = now + overlap_minutes * 60
    with transaction(conn):
        client = accounts.get_client(conn, client_id)
        if client is None or client.service_client_id != account.service_client_id:
            raise NotFoundError(
                f"no client '{client_id}' in account {account.service_client_id}",
                hint=f"'{listing}' shows its client ids",
            )
        if client.secret_hash is None:
            raise UsageError(
                f"client {client_id} authenticates with a certificate: it has no secret to rotate",
                hint="register its new certificate with prefctl emulator clients add --certificate",
            )
        accounts.rotate_client_secret(
            conn, client_id, salt=salt, digest=digest, previous_expires_at=until
        )
        local = accounts.update_local_secret(conn, client_id, secret)
        rotated = accounts.get_client(conn, client_id) or client
    return RotatedSecret(rotated, secret, until, local)


def list_clients(
    conn: Store, clock: Clock, *, service_client_id: str | None = None
) -> list[OAuthClient]:
    """The clients of the account ``service_client_id`` only; NotFoundError for an unknown one."""
    account = _account(conn, clock, service_client_id)
    return accounts.list_clients(conn, account.service_client_id)


def add_user(
    conn: Store,
    clock: Clock,
    user_id: str,
    permissions: Sequence[str],
    *,
    service_client_id: str | None = None,
) -> User:
    """Add an active API user of the account ``service_client_id`` holding ``permissions`` (each
    one of ``PERMISSIONS``). NotFoundError for an unknown account."""
    if not _USER_ID.match(user_id):
        raise UsageError(
            f"invalid user id {user_id!r}",
            hint="use 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit",
        )
    unknown = [p for p in permissions if p not in PERMISSIONS]
    if unknown:
        raise UsageError(
            f"unknown permission '{unknown[0]}'",
            hint=f"valid permissions: {', '.join(PERMISSIONS)}",
        )
    account = _account(conn, clock, service_client_id)
    with transaction(conn):
        if accounts.get_user(conn, account.service_client_id, user_id) is not None:
            raise PrefctlError(
                f"user '{user_id}' already exists in account {account.service_client_id}"
            )
        accounts.add_user(
            conn,
            User(account.service_client_id, user_id, epoch(clock.now()), tuple(permissions)),
        )
    user = accounts.get_user(conn, account.service_client_id, user_id)
    assert user is not None
    return user


def list_users(conn: Store, clock: Clock, *, service_client_id: str | None = None) -> list[User]:
    """The users of the account ``service_client_id`` only; NotFoundError for an unknown one."""
    account = _account(conn, clock, service_client_id)
    return accounts.list_users(conn, account.service_client_id)


def revoke(conn: Store, clock: Clock, jti: str) -> Revocation:
    """Revoke the access token ``jti``: the REST API refuses it from now on."""
    with transaction(conn):
        issued = tokens.get_issued_token(conn, jti)
        if issued is None:
            raise NotFoundError(
                f"no token with jti '{jti}' was issued by this emulator",
                hint="'prefctl token inspect' shows a token's jti; expired tokens are forgotten",
            )
        fresh = tokens.revoke_token(conn, jti, revoked_at=epoch(clock.now()))
    return Revocation(issued, already_revoked=not fresh)


def set_subscription_alerts(
    conn: Store,
    clock: Clock,
    subscription: str,
    *,
    enabled: bool,
    recipients: Sequence[str] = (),
    actor: str = "support-team",
    service_client_id: str | None = None,
) -> SubscriptionRecord:
    """Turn failure-alert emails of a subscription (its Name or Id) on for ``recipients``
    (replacing earlier ones; duplicates dropped), or off. The REST API refuses to change alerts:
    on the real service the support team does it on request (spec "Rules" 12).

    Only the subscriptions of the account ``service_client_id`` (None: the emulator's own) are
    looked at. UsageError for an address that is not one, or a Name that several of them share;
    NotFoundError for an unknown account, or when none of its subscriptions matches (another
    account's is not named as such: it is not there).
    """
    from prefctl.store import subscriptions

    checked = _checked_recipients(recipients) if enabled else []
    account = _account(conn, clock, service_client_id).service_client_id
    listing = "prefctl subscriptions list"
    if service_client_id is not None:  # the profile 'emulator accounts add' wrote for it
        listing = f"prefctl --profile {account} subscriptions list"
    with transaction(conn):
        record = _find_subscription(
            subscriptions.list_subscriptions(conn, account), subscription, account, listing
        )
        return subscriptions.set_alerts(
            conn,
            account,
            record.id,
            enabled=enabled,
            recipients=checked,
            actor=actor,
            now=epoch(clock.now()),
        )


def _checked_recipients(recipients: Sequence[str]) -> list[str]:
    from pydantic import ValidationError

    from prefctl.models.subscription import Alerts

    try:
        alerts = Alerts(enabled=True, recipients=[r.strip() for r in recipients])
    except ValidationError as exc:
        error = exc.errors()[0]
        index = next((part for part in error["loc"] if isinstance(part, int)), None)
        shown = recipients[index] if index is not None else ", ".join(recipients)
        raise UsageError(f"--recipient {shown!r} is not an email address") from None
    return list(dict.fromkeys(alerts.recipients))


def _find_subscription(
    records: list[SubscriptionRecord], ref: str, account: str, listing: str
) -> SubscriptionRecord:
    ref = ref.strip()
    matches = [r for r in records if r.name == ref or (ref.isdigit() and r.id == int(ref))]
    if not matches:
        raise NotFoundError(
            f"no subscription named {ref!r} in account {account}",
            hint=f"'{listing}' shows them",
        )
    if len(matches) > 1:
        ids = ", ".join(str(r.id) for r in matches)
        raise UsageError(f"{len(matches)} subscriptions match {ref!r}", hint=f"use an Id: {ids}")
    return matches[0]


def reset_store(data_dir: Path) -> bool:
    """Delete the store (and its WAL files); False when there was none. The next start
    bootstraps a new account.

    UsageError while an emulator serves from ``data_dir`` (or starts on it), or another command
    (``dispatcher run``, ``replay``, any command reading it) has the store open and does not let
    go within ``RESET_WAIT_SECONDS``: deleting a store under them would lose their work unseen.
    """
    from prefctl.emulator import daemon
    from prefctl.private_files import locked

    store = paths.store_path(data_dir)
    if not data_dir.is_dir():
        return False
    busy = UsageError(
        f"the store {store} is in use by another prefctl command",
        hint="stop the emulator, 'prefctl dispatcher run' or 'prefctl replay' using it, then reset",
    )
    with (
        daemon.holding_data_dir(data_dir),
        locked(store, timeout=RESET_WAIT_SECONDS, busy=lambda: busy),
    ):
        existed = store.exists()
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{store}{suffix}").unlink(missing_ok=True)
    return existed


def _account(conn: Store, clock: Clock, service_client_id: str | None) -> Account:
    boot = bootstrap(conn, clock)
    if service_client_id is None or service_client_id == boot.account.service_client_id:
        return boot.account
    account = accounts.get_account(conn, service_client_id)
    if account is None:
        raise NotFoundError(
            f"no account '{service_client_id}' in this emulator",
            hint="'prefctl emulator accounts list' shows them",
        )
    return account


def _new_client(
    service_client_id: str,
    now: float,
    *,
    name: str,
    lifetime: int = accounts.DEFAULT_TOKEN_LIFETIME_MINUTES,
    secret: str | None = None,
    certificate: tuple[str, str] | None = None,
) -> OAuthClient:
    salt = digest = None
    if secret is not None:
        salt, digest = accounts.hash_secret(secret)
    return OAuthClient(
        client_id=random_string(CLIENT_ID_LENGTH),
        service_client_id=service_client_id,
        created_at=now,
        name=name,
        token_lifetime_minutes=lifetime,
        secret_salt=salt,
        secret_hash=digest,
        certificate_pem=certificate[0] if certificate else None,
        certificate_thumbprint=certificate[1] if certificate else None,
    )


def _registrable_certificate(
    conn: Store, path: Path, clock: Clock, account: Account
) -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    from prefctl.certs import load_certificate, thumbprint_sha256

    certificate = load_certificate(path)
    key = certificate.public_key()
    usable = isinstance(key, rsa.RSAPublicKey) or (
        isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1)
    )
    if not usable:
        raise UsageError(
            f"the certificate {path} has a key the token endpoint cannot verify",
            hint="use an RSA or EC P-256 certificate (prefctl certs issue --client NAME)",
        )
    if certificate.not_valid_after_utc <= clock.now():
        raise UsageError(
            f"the certificate {path} expired on {certificate.not_valid_after_utc:%Y-%m-%d}"
        )
    thumbprint = thumbprint_sha256(certificate)
    owner = accounts.client_with_thumbprint(conn, thumbprint)
    if owner is not None:  # the token endpoint finds a client by its certificate: one owner
        registered = (
            f"client {owner.client_id}"
            if owner.service_client_id == account.service_client_id
            else "a client of another account"  # whose id is not this account's to see
        )
        raise PrefctlError(f"the certificate {path} is already registered to {registered}")
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")
    return pem, thumbprint
