"""Subscription names on a real emulator: unique in the account (409), never digits only (400)."""

from __future__ import annotations

import httpx
import pytest

from prefctl.emulator.serve import RunningEmulator
from prefctl.store import subscriptions
from prefctl.store.db import connect, transaction
from tests.emulator.subscriptions.conftest import body, create
from tests.emulator.subscriptions.endpoints import Receiver


def named(api: httpx.Client, name: str) -> list[object]:
    listed = api.get("/subscriptions").json()["Subscriptions"]
    return [record["Id"] for record in listed if record["Name"] == name]


def test_post_name_taken_in_the_account_is_409_and_creates_nothing(
    api: httpx.Client, receiver: Receiver
) -> None:
    first = create(api, body(receiver.url + "?t=name-1", name="crm"))
    answer = api.post("/subscriptions", json=body(receiver.url + "?t=name-2", name="crm"))
    assert answer.status_code == 409
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert answer.json() == {
        "type": "about:blank",
        "title": "Conflict",
        "status": 409,
        "detail": f"subscription {first['Id']} is already named 'crm'; names are unique in the"
        " account",
        "subscriptionId": first["Id"],
        "subscriptionName": "crm",
    }
    assert named(api, "crm") == [first["Id"]]


def test_post_name_is_compared_case_sensitively_after_trimming(
    api: httpx.Client, receiver: Receiver
) -> None:
    create(api, body(receiver.url + "?t=case-1", name="billing"))
    assert create(api, body(receiver.url + "?t=case-2", name="Billing"))["Name"] == "Billing"
    padded = api.post("/subscriptions", json=body(receiver.url + "?t=case-3", name=" billing "))
    assert padded.status_code == 409


def test_put_renaming_onto_another_subscriptions_name_is_409(
    api: httpx.Client, receiver: Receiver
) -> None:
    taken = create(api, body(receiver.url + "?t=rename-1", name="shop"))
    other = create(api, body(receiver.url + "?t=rename-2", name="warehouse"))
    answer = api.put(
        f"/subscriptions/{other['Id']}", json=body(receiver.url + "?t=rename-2", name="shop")
    )
    assert answer.status_code == 409
    assert (answer.json()["subscriptionId"], answer.json()["subscriptionName"]) == (
        taken["Id"],
        "shop",
    )
    assert api.get(f"/subscriptions/{other['Id']}").json()["Name"] == "warehouse"


def test_put_keeping_its_own_name_is_accepted(api: httpx.Client, receiver: Receiver) -> None:
    payload = body(receiver.url + "?t=same-name", name="ledger")
    created = create(api, payload)
    answer = api.put(
        f"/subscriptions/{created['Id']}", json={**payload, "Description": "still the ledger"}
    )
    assert answer.status_code == 200, answer.text
    assert (answer.json()["Name"], answer.json()["Description"]) == ("ledger", "still the ledger")


def test_put_keeping_a_name_an_older_store_holds_twice_is_accepted(
    emulator: RunningEmulator, api: httpx.Client, receiver: Receiver
) -> None:
    # A store written before names were unique: two subscriptions named "legacy".
    conn = connect(emulator.store)
    try:
        with transaction(conn):
            for query in ("?t=legacy-1", "?t=legacy-2"):
                subscriptions.create_subscription(
                    conn,
                    emulator.account.service_client_id,
                    body(receiver.url + query, name="legacy"),
                    actor="admin",
                    now=1_767_225_600.0,
                )
    finally:
        conn.close()
    first, second = named(api, "legacy")

    paused = body(receiver.url + "?t=legacy-2", name="legacy", State="Paused")
    assert api.put(f"/subscriptions/{second}", json=paused).status_code == 200
    renamed = api.put(
        f"/subscriptions/{second}", json={**paused, "Name": "legacy (copy)", "State": "Active"}
    )
    assert renamed.status_code == 200
    assert named(api, "legacy") == [first]


@pytest.mark.parametrize("name", ["1", "007", " 42 "])
def test_post_name_of_digits_only_is_400_on_the_name(
    api: httpx.Client, receiver: Receiver, name: str
) -> None:
    answer = api.post("/subscriptions", json=body(receiver.url + "?t=digits", name=name))
    assert answer.status_code == 400
    assert answer.json()["errors"] == [
        {"field": "Name", "message": "must not be made of digits only: it would be read as an Id"}
    ]
    assert named(api, name.strip()) == []


def test_put_renaming_to_digits_only_is_400(api: httpx.Client, receiver: Receiver) -> None:
    payload = body(receiver.url + "?t=to-digits", name="orders")
    created = create(api, payload)
    answer = api.put(f"/subscriptions/{created['Id']}", json={**payload, "Name": "12"})
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["field"] == "Name"
    assert api.get(f"/subscriptions/{created['Id']}").json()["Name"] == "orders"


def test_post_name_with_digits_among_other_characters_is_accepted(
    api: httpx.Client, receiver: Receiver
) -> None:
    assert create(api, body(receiver.url + "?t=digits-inside", name="crm 2"))["Name"] == "crm 2"
