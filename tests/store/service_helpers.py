"""Helpers for tests of the service tables: a migrated store file with an account, and a
subscription that has passed its handshake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prefctl.store import Store, subscriptions
from prefctl.store.accounts import Account, add_account
from prefctl.store.connection import Store as SqliteStore
from prefctl.store.db import connect, transaction
from prefctl.store.migrations import migrate

ACCOUNT = "DEMO_CORP"
OTHER_ACCOUNT = "OTHER_CORP"


def open_service_store(path: Path | str) -> Store:
    """A migrated store at ``path`` (a SQLite file, or a PostgreSQL URL: the fixture
    ``store_location``) with the accounts DEMO_CORP and OTHER_CORP."""
    conn = connect(str(path))
    migrate(conn)
    with transaction(conn):
        for account in (ACCOUNT, OTHER_ACCOUNT):
            add_account(
                conn,
                Account(
                    account,
                    hashkey="test-hashkey",
                    signature_user_id="events-signer",
                    created_at=1_767_225_600.0,  # 2026-01-01T00:00:00Z
                ),
            )
    return conn


def sqlite_only(conn: Store, what: str) -> SqliteStore:
    """``conn`` as the SQLite store it is; the test is skipped on another backend (it checks
    ``what``, which only SQLite has)."""
    if not isinstance(conn, SqliteStore):
        pytest.skip(f"SQLite only: {what}")
    return conn


def subscription_body(
    url: str = "https://hooks.example/events",
    *selections: dict[str, Any],
    name: str = "CRM sync",
    state: str = "Active",
    catch_up: bool = False,
) -> dict[str, Any]:
    """A wire subscription body; by default it selects profile.created."""
    return {
        "Name": name,
        "Url": url,
        "State": state,
        "CatchUpOnResume": catch_up,
        "Subscriptions": list(selections)
        or [{"Entity": "Profile", "EventType": "profile.created"}],
        "Alerts": {"Enabled": False, "Recipients": []},
    }


def add_subscription(
    conn: Store,
    body: dict[str, Any],
    *,
    account: str = ACCOUNT,
    provisioned: bool = True,
    now: float = 1_767_225_600.0,
) -> int:
    """Create a subscription (in its own transaction), Succeeded unless ``provisioned`` is
    False; returns its id."""
    with transaction(conn):
        record = subscriptions.create_subscription(conn, account, body, actor="admin", now=now)
        if provisioned:
            subscriptions.set_provisioning_state(conn, record.id, "Succeeded", now=now)
    return record.id
