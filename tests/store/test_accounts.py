"""``accounts.delete_account``: an account goes with everything it owns, and nothing of another's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl.store import Store, accounts, alerts, deliveries, events, settings, tokens
from prefctl.store.accounts import OAuthClient, User
from prefctl.store.db import transaction
from prefctl.store.deliveries import NewDelivery
from prefctl.store.events import NewEvent
from tests.store.service_helpers import (
    ACCOUNT,
    OTHER_ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

T0 = 1_767_225_600


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Store]:
    conn = open_service_store(tmp_path / "store.db")
    for account in (ACCOUNT, OTHER_ACCOUNT):
        _fill(conn, account)
    yield conn
    conn.close()


def _fill(conn: Store, account: str) -> None:
    """A client with an issued, a revoked token and a used assertion; a user; settings; a
    subscription; an event delivered to it; an alert email."""
    client_id = (account * 48)[:48]
    subscription_id = add_subscription(
        conn, subscription_body(name=f"crm {account}"), account=account
    )
    with transaction(conn):
        salt, digest = accounts.hash_secret("s" * 64)
        accounts.add_client(
            conn, OAuthClient(client_id, account, T0, secret_salt=salt, secret_hash=digest)
        )
        accounts.add_user(conn, User(account, "admin", T0, ("profiles:read",)))
        for jti in (f"{account}-1", f"{account}-2"):
            tokens.record_issued_token(
                conn, tokens.IssuedToken(jti, client_id, f"{account}/admin", T0, T0 + 3600), now=T0
            )
        tokens.revoke_token(conn, f"{account}-2", revoked_at=T0)
        tokens.use_assertion_jti(conn, client_id, f"{account}-a", expires_at=T0 + 60, now=T0)
        settings.put_settings(conn, account, {"MaxDeliveryAttempts": 3})
        event = NewEvent(
            event_id=f"00000000-0000-4000-8000-{len(account):012d}",
            event_type="profile.created",
            entity="Profile",
            profile_id=1001,
            original_event_time=T0,
            data={},
        )
        rowids = events.insert_events(conn, account, [event])
        deliveries.add_deliveries(conn, [NewDelivery(rowids[0], subscription_id)], now=T0)
        alerts.add_alert(
            conn,
            alerts.NewAlert(
                incident_id=1,
                service_client_id=account,
                subscription_id=subscription_id,
                subscription_name=f"crm {account}",
                kind="opened",
                sequence=1,
                dead_letters=1,
                incident_dead_letters=1,
                recipients=["ops@example.com"],
                subject="alert",
                message_id=f"<{account}@example.com>",
                created_at=T0,
            ),
        )


def _counts(conn: Store, account: str) -> dict[str, int]:
    client_id = (account * 48)[:48]
    queries = {
        "clients": ("SELECT count(*) FROM oauth_clients WHERE service_client_id = ?", account),
        "users": ("SELECT count(*) FROM users WHERE service_client_id = ?", account),
        "settings": ("SELECT count(*) FROM webhook_settings WHERE service_client_id = ?", account),
        "subscriptions": (
            "SELECT count(*) FROM subscriptions WHERE service_client_id = ?",
            account,
        ),
        "events": ("SELECT count(*) FROM events WHERE service_client_id = ?", account),
        "deliveries": (
            "SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_rowid"
            " WHERE e.service_client_id = ?",
            account,
        ),
        "alerts": ("SELECT count(*) FROM alert_messages WHERE service_client_id = ?", account),
        "issued": ("SELECT count(*) FROM issued_tokens WHERE client_id = ?", client_id),
        "revoked": ("SELECT count(*) FROM revoked_tokens WHERE jti = ?", f"{account}-2"),
        "assertions": ("SELECT count(*) FROM used_assertions WHERE client_id = ?", client_id),
    }
    return {
        name: conn.execute(sql, (value,)).fetchone()[0] for name, (sql, value) in queries.items()
    }


def test_delete_account_removes_everything_it_owns_and_nothing_of_another_account(
    conn: Store,
) -> None:
    other_before = _counts(conn, OTHER_ACCOUNT)
    assert all(other_before.values()), other_before

    with transaction(conn):
        assert accounts.delete_account(conn, ACCOUNT) is True

    assert accounts.get_account(conn, ACCOUNT) is None
    assert set(_counts(conn, ACCOUNT).values()) == {0}
    assert _counts(conn, OTHER_ACCOUNT) == other_before


def test_delete_account_of_an_unknown_account_is_false_and_changes_nothing(conn: Store) -> None:
    before = _counts(conn, ACCOUNT)
    with transaction(conn):
        assert accounts.delete_account(conn, "NO_SUCH_CORP") is False
    assert _counts(conn, ACCOUNT) == before
