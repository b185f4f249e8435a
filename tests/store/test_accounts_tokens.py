"""Accounts, OAuth clients, users and the token service's bookkeeping, on each backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from prefctl.store import Store
from prefctl.store.accounts import (
    LocalCredentials,
    OAuthClient,
    User,
    add_client,
    add_user,
    get_local_credentials,
    get_user,
    list_accounts,
    list_clients,
    list_users,
    save_local_credentials,
)
from prefctl.store.db import transaction
from prefctl.store.tokens import (
    IssuedToken,
    SigningKey,
    add_signing_key,
    get_issued_token,
    record_issued_token,
    revoke_token,
    signing_keys,
    token_standing,
    use_assertion_jti,
)
from tests.store.service_helpers import ACCOUNT, OTHER_ACCOUNT, open_service_store

NOW = 1_767_225_600


@pytest.fixture
def conn(store_location: str) -> Iterator[Store]:
    conn = open_service_store(store_location)
    yield conn
    conn.close()


def _client(n: int, account: str = ACCOUNT, created_at: float = NOW) -> OAuthClient:
    return OAuthClient(
        client_id=f"{n:048d}",
        service_client_id=account,
        created_at=created_at,
        secret_salt="00",
        secret_hash="ab",
    )


def test_accounts_are_listed_in_the_order_they_were_created(conn: Store) -> None:
    assert [a.service_client_id for a in list_accounts(conn)] == [ACCOUNT, OTHER_ACCOUNT]


def test_clients_created_in_the_same_second_list_in_insertion_order(conn: Store) -> None:
    with transaction(conn):
        for n in (3, 1, 2):
            add_client(conn, _client(n))
        add_client(conn, _client(9, OTHER_ACCOUNT))
    assert [c.client_id[-1] for c in list_clients(conn, ACCOUNT)] == ["3", "1", "2"]
    assert [c.client_id[-1] for c in list_clients(conn)] == ["3", "1", "2", "9"]


def test_users_keep_their_permissions_and_insertion_order(conn: Store) -> None:
    with transaction(conn):
        add_user(conn, User(ACCOUNT, "zed", NOW, ("profiles:read", "events:read")))
        add_user(conn, User(ACCOUNT, "amy", NOW, ("settings:read",), is_active=False))
    assert [u.user_id for u in list_users(conn, ACCOUNT)] == ["zed", "amy"]
    amy = get_user(conn, ACCOUNT, "amy")
    assert amy is not None
    assert (amy.permissions, amy.is_active) == (("settings:read",), False)


def test_local_credentials_saved_again_replace_the_first(conn: Store) -> None:
    with transaction(conn):
        add_client(conn, _client(1))
        add_client(conn, _client(2))
        save_local_credentials(conn, LocalCredentials(ACCOUNT, "admin", f"{1:048d}", "first"))
        save_local_credentials(conn, LocalCredentials(ACCOUNT, "admin", f"{2:048d}", "second"))
    saved = get_local_credentials(conn)
    assert saved is not None
    assert (saved.client_id[-1], saved.client_secret) == ("2", "second")


def test_token_revoked_twice_reports_the_second_as_already_revoked(conn: Store) -> None:
    with transaction(conn):
        record_issued_token(conn, IssuedToken("j1", "c", "s", NOW, NOW + 60), now=NOW)
        first = revoke_token(conn, "j1", revoked_at=NOW)
        second = revoke_token(conn, "j1", revoked_at=NOW + 1)
    assert (first, second) == (True, False)
    assert get_issued_token(conn, "j1") == IssuedToken("j1", "c", "s", NOW, NOW + 60)


def test_assertion_jti_is_accepted_once_until_long_after_it_expired(conn: Store) -> None:
    client = f"{1:048d}"
    with transaction(conn):
        assert use_assertion_jti(conn, client, "a", expires_at=NOW + 60, now=NOW)
        assert not use_assertion_jti(conn, client, "a", expires_at=NOW + 60, now=NOW + 1)
    with transaction(conn):  # an hour past its expiry it is forgotten
        assert use_assertion_jti(conn, client, "a", expires_at=NOW + 9000, now=NOW + 3661 + 60)


def test_token_standing_reads_revocation_client_user_and_permissions(conn: Store) -> None:
    with transaction(conn):
        add_client(conn, _client(1))
        add_user(conn, User(ACCOUNT, "admin", NOW, ("profiles:read", "events:read")))
        revoke_token(conn, "gone", revoked_at=NOW)
    standing = token_standing(
        conn, jti="gone", client_id=f"{1:048d}", service_client_id=ACCOUNT, user_id="admin"
    )
    assert standing.revoked
    assert standing.client_exists
    assert standing.user_active is True
    assert standing.permissions == {"profiles:read", "events:read"}


def test_token_standing_of_an_unknown_user_and_client_is_empty(conn: Store) -> None:
    standing = token_standing(
        conn, jti="j", client_id="nobody", service_client_id=ACCOUNT, user_id="ghost"
    )
    assert (standing.revoked, standing.client_exists, standing.user_active) == (False, False, None)
    assert standing.permissions == frozenset()


def test_signing_keys_are_listed_newest_first(conn: Store) -> None:
    with transaction(conn):
        add_signing_key(conn, SigningKey("old", "pem", NOW))
        add_signing_key(conn, SigningKey("same-second-later", "pem", NOW + 5))
        add_signing_key(conn, SigningKey("newest", "pem", NOW + 5))
    assert [k.kid for k in signing_keys(conn)] == ["newest", "same-second-later", "old"]
