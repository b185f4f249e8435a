"""What shell completion reads from a store, on each backend."""

from __future__ import annotations

from prefctl.store import completion, profiles
from prefctl.store.db import transaction
from tests.helpers import free_port
from tests.store.service_helpers import (
    ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)


def test_completion_offers_subscription_names_ids_and_profile_ids(store_location: str) -> None:
    conn = open_service_store(store_location)
    try:
        subscription_id = add_subscription(conn, subscription_body(name="crm"))
        with transaction(conn):
            profile_id = profiles.next_profile_id(conn, ACCOUNT)
            profiles.save_profile(conn, ACCOUNT, {"ProfileId": profile_id}, now=1.0)
    finally:
        conn.close()
    assert completion.subscription_refs(store_location) == ["crm", str(subscription_id)]
    assert completion.profile_ids(store_location) == [str(profile_id)]


def test_completion_from_an_unreachable_postgres_offers_nothing() -> None:
    port = free_port()
    assert completion.subscription_refs(f"postgresql://u@127.0.0.1:{port}/db") == []
