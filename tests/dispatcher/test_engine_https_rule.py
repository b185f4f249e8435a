"""The engine keeps the HTTPS rule for subscriptions stored before the API refused plain-http
Urls: nothing goes to a plain-http Url off loopback unless the account's AllowHttpWebhooks says so
(on a FakeClock with a model endpoint: nothing leaves the test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from prefctl.store import Store
from prefctl.store.db import transaction
from prefctl.store.settings import update_settings
from tests.dispatcher.engine_helpers import (
    ACCOUNT,
    Rig,
    attempts_of,
    new_store,
    queue_events,
    record_of,
    subscribe,
)

PLAIN_REMOTE = "http://hooks.example/in"


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Store]:
    conn = new_store(tmp_path / "store.db")
    yield conn
    conn.close()


def test_engine_plain_http_off_loopback_dead_letters_unsent_naming_the_rule(conn: Store) -> None:
    [delivery] = queue_events(conn, subscribe(conn, PLAIN_REMOTE), 1)
    rig = Rig(conn)

    rig.cycle()
    rig.advance(1)

    assert rig.transport.sent == []
    record = record_of(conn, delivery)
    assert (record.state, record.dead_letter_reason) == (
        "dead_lettered",
        "SubscriptionValidationFailed",
    )
    [attempt] = attempts_of(conn, delivery)
    assert attempt.outcome == "skipped"
    assert "HTTPS is mandatory" in attempt.error
    assert "AllowHttpWebhooks" in attempt.error
    rig.close()


@pytest.mark.parametrize(
    ("url", "allow_http"),
    [(PLAIN_REMOTE, True), ("http://127.0.0.1:8751/webhooks", False)],
    ids=["allowed-by-the-account", "loopback"],
)
def test_engine_plain_http_is_delivered_to_loopback_or_when_the_account_allows_it(
    conn: Store, url: str, allow_http: bool
) -> None:
    with transaction(conn):
        update_settings(conn, ACCOUNT, {"AllowHttpWebhooks": allow_http})
    [delivery] = queue_events(conn, subscribe(conn, url), 1)
    rig = Rig(conn)

    rig.cycle()
    rig.advance(1)

    assert [request.url for request in rig.transport.sent] == [url]
    assert record_of(conn, delivery).state == "delivered"
    rig.close()
