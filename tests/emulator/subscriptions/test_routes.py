"""``/subscriptions`` and the validation URL on a real emulator, with real receivers."""

from __future__ import annotations

import httpx

from prefctl.emulator import admin
from prefctl.emulator.serve import RunningEmulator
from prefctl.store.db import connect, open_store
from prefctl.store.delivery_history import DeliveryQuery, list_deliveries
from tests.emulator.subscriptions.conftest import api_client, body, create, wait_for_state
from tests.emulator.subscriptions.endpoints import Receiver, stub_endpoint
from tests.helpers import wait_until


def delivery_states(emulator: RunningEmulator, subscription_id: int) -> list[str]:
    conn = connect(emulator.store)
    try:
        query = DeliveryQuery(subscription_id=subscription_id)
        return [delivery.state for delivery in list_deliveries(conn, query)]
    finally:
        conn.close()


def new_profile(api: httpx.Client, email: str) -> None:
    answer = api.post("/profiles", json={"Emails": [{"Address": email}]})
    assert answer.status_code == 201, answer.text


def test_post_subscription_answers_201_creating_then_handshake_succeeds(
    api: httpx.Client, receiver: Receiver
) -> None:
    answer = api.post("/subscriptions", json=body(receiver.url + "?t=create"))
    assert answer.status_code == 201
    created = answer.json()
    assert created["ProvisioningState"] == "Creating"
    assert (
        answer.headers["Location"]
        == f"{str(api.base_url).rstrip('/')}/subscriptions/{created['Id']}"
    )

    record = wait_for_state(api, created["Id"], "Succeeded")
    assert receiver.handshakes(created["Id"])[0].status == 200
    assert "ProvisioningError" not in record
    assert record["State"] == "Active"


def test_handshake_message_carries_every_envelope_field_of_an_event(api: httpx.Client) -> None:
    # Spec: "Same schema as an event, except the data object is named data in camel case".
    with stub_endpoint(echo=True) as stub:
        created = create(api, body(stub.url, name="schema"))
        wait_for_state(api, created["Id"], "Succeeded")
    [message] = stub.requests
    envelope = ["EventId", "EventType", "Entity", "SubscriptionId", "ClientId", "ProfileId"]
    assert list(message) == [*envelope, "EventTime", "OriginalEventTime", "data"]
    assert (message["Entity"], message["SubscriptionId"]) == ("Subscription", created["Id"])
    assert "Service-Webhook" not in stub.headers[0]


def test_get_subscriptions_lists_every_subscription_of_the_account(
    api: httpx.Client, receiver: Receiver
) -> None:
    first = create(api, body(receiver.url + "?t=list1", name="one"))
    second = create(api, body(receiver.url + "?t=list2", name="two"))
    listed = api.get("/subscriptions").json()["Subscriptions"]
    assert {first["Id"], second["Id"]} <= {record["Id"] for record in listed}


def test_manual_validation_get_succeeds_once(api: httpx.Client, manual_receiver: Receiver) -> None:
    created = create(api, body(manual_receiver.url + "?t=manual", name="CRM sync"))
    waiting = wait_for_state(api, created["Id"], "AwaitingManualAction")
    assert "ValidationExpiresAt" in waiting
    (handshake,) = manual_receiver.handshakes(created["Id"])
    assert handshake.validation_url is not None

    confirmed = httpx.get(handshake.validation_url)  # no Authorization: the token is the key
    assert confirmed.status_code == 200
    assert confirmed.json() == {
        "SubscriptionId": created["Id"],
        "Name": "CRM sync",
        "ProvisioningState": "Succeeded",
    }
    assert api.get(f"/subscriptions/{created['Id']}").json()["ProvisioningState"] == "Succeeded"

    again = httpx.get(handshake.validation_url)
    assert again.status_code == 404
    assert again.headers["Content-Type"] == "application/problem+json"


def test_manual_validation_from_a_browser_gets_a_page(
    api: httpx.Client, manual_receiver: Receiver
) -> None:
    created = create(api, body(manual_receiver.url + "?t=browser", name="<b>shop</b>"))
    (handshake,) = manual_receiver.handshakes(created["Id"])
    assert handshake.validation_url is not None
    page = httpx.get(handshake.validation_url, headers={"Accept": "text/html,*/*;q=0.8"})
    assert page.status_code == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert "&lt;b&gt;shop&lt;/b&gt;" in page.text


def test_validation_unknown_token_is_404_problem(emulator: RunningEmulator) -> None:
    answer = httpx.get(f"{emulator.api_url}/validation/{'x' * 40}")
    assert answer.status_code == 404
    assert answer.json()["title"] == "Not Found"


def test_post_same_url_and_event_type_is_409_naming_the_subscription(
    api: httpx.Client, receiver: Receiver
) -> None:
    url = receiver.url + "?t=dup"
    first = create(api, body(url, "profile.created", "tag.added", name="first"))
    answer = api.post("/subscriptions", json=body(url, "tag.added", name="second"))
    assert answer.status_code == 409
    problem = answer.json()
    assert (problem["subscriptionId"], problem["eventType"]) == (first["Id"], "tag.added")
    assert f"subscription {first['Id']} ('first') already sends tag.added" in problem["detail"]
    other_type = api.post("/subscriptions", json=body(url, "tag.deleted", name="third"))
    assert other_type.status_code == 201


def test_post_unknown_event_type_is_400_with_field_errors(
    api: httpx.Client, receiver: Receiver
) -> None:
    payload = body(receiver.url)
    payload["Subscriptions"] = [
        {"Entity": "Profile", "EventType": "profile.exploded"},
        {"Entity": "Tags", "EventType": "tag.added", "Filters": ["x"]},
    ]
    answer = api.post("/subscriptions", json=payload)
    assert answer.status_code == 400
    fields = {error["field"] for error in answer.json()["errors"]}
    assert fields == {"Subscriptions[0].EventType", "Subscriptions[1]"}


def test_post_subscription_with_alerts_is_refused(api: httpx.Client, receiver: Receiver) -> None:
    payload = body(receiver.url, Alerts={"Enabled": True, "Recipients": ["ops@example.com"]})
    answer = api.post("/subscriptions", json=payload)
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["field"] == "Alerts"


def test_put_new_url_runs_the_handshake_again(api: httpx.Client, receiver: Receiver) -> None:
    created = create(api, body(receiver.url + "?t=put-old"))
    wait_for_state(api, created["Id"], "Succeeded")

    new_url = receiver.url + "?t=put-new"
    answer = api.put(f"/subscriptions/{created['Id']}", json=body(new_url))
    assert answer.status_code == 200
    assert (answer.json()["ProvisioningState"], answer.json()["Url"]) == ("Updating", new_url)
    wait_for_state(api, created["Id"], "Succeeded")
    assert len(receiver.handshakes(created["Id"], count=2)) == 2


def test_put_new_url_holds_events_until_the_handshake_succeeds_then_delivers_them(
    emulator: RunningEmulator,
    api: httpx.Client,
    receiver: Receiver,
    manual_receiver: Receiver,
) -> None:
    # docs/subscriptions.md: events during a Url change wait for the subscription, not vanish.
    payload = body(receiver.url + "?t=move-old")
    created = create(api, payload)
    wait_for_state(api, created["Id"], "Succeeded")
    moved = {**payload, "Url": manual_receiver.url + "?t=move-new"}
    assert api.put(f"/subscriptions/{created['Id']}", json=moved).status_code == 200
    wait_for_state(api, created["Id"], "AwaitingManualAction")

    new_profile(api, "during-move@example.com")
    assert delivery_states(emulator, created["Id"]) == ["queued"]  # waits for the handshake

    (handshake,) = manual_receiver.handshakes(created["Id"])
    assert handshake.validation_url is not None
    assert httpx.get(handshake.validation_url).status_code == 200
    wait_until(lambda: delivery_states(emulator, created["Id"]) == ["delivered"], timeout=10)


def test_put_same_url_keeps_provisioning_and_round_trips_alerts(
    api: httpx.Client, receiver: Receiver
) -> None:
    created = create(api, body(receiver.url + "?t=rename"))
    record = wait_for_state(api, created["Id"], "Succeeded")
    edited = {key: record[key] for key in ("Name", "Url", "Subscriptions", "Alerts")}
    edited["Name"] = "renamed"
    answer = api.put(f"/subscriptions/{created['Id']}", json=edited)
    assert answer.status_code == 200
    assert (answer.json()["Name"], answer.json()["ProvisioningState"]) == ("renamed", "Succeeded")

    edited["Alerts"] = {"Enabled": True, "Recipients": ["ops@example.com"]}
    refused = api.put(f"/subscriptions/{created['Id']}", json=edited)
    assert refused.status_code == 400
    assert refused.json()["errors"][0]["field"] == "Alerts"


def test_paused_subscription_with_catch_up_keeps_events_for_the_resume(
    emulator: RunningEmulator, api: httpx.Client, receiver: Receiver
) -> None:
    payload = body(receiver.url + "?t=catch-up", CatchUpOnResume=True)
    created = create(api, payload)
    wait_for_state(api, created["Id"], "Succeeded")
    paused = api.put(f"/subscriptions/{created['Id']}", json={**payload, "State": "Paused"})
    assert paused.json()["State"] == "Paused"

    new_profile(api, "held@example.com")
    assert delivery_states(emulator, created["Id"]) == ["held"]

    api.put(f"/subscriptions/{created['Id']}", json={**payload, "State": "Active"})
    assert delivery_states(emulator, created["Id"]) in (["queued"], ["in_flight"], ["delivered"])


def test_paused_subscription_without_catch_up_drops_events(
    emulator: RunningEmulator, api: httpx.Client, receiver: Receiver
) -> None:
    payload = body(receiver.url + "?t=no-catch-up")
    created = create(api, payload)
    wait_for_state(api, created["Id"], "Succeeded")
    api.put(f"/subscriptions/{created['Id']}", json={**payload, "State": "Paused"})

    new_profile(api, "dropped@example.com")
    api.put(f"/subscriptions/{created['Id']}", json={**payload, "State": "Active"})
    assert delivery_states(emulator, created["Id"]) == []


def test_delete_subscription_answers_204_and_notifications_stop(
    emulator: RunningEmulator, api: httpx.Client, receiver: Receiver
) -> None:
    payload = body(receiver.url + "?t=delete", CatchUpOnResume=True, State="Paused")
    created = create(api, payload)
    wait_for_state(api, created["Id"], "Succeeded")
    new_profile(api, "before@example.com")
    assert delivery_states(emulator, created["Id"]) == ["held"]

    assert api.delete(f"/subscriptions/{created['Id']}").status_code == 204
    new_profile(api, "after@example.com")
    assert delivery_states(emulator, created["Id"]) == []
    assert api.get(f"/subscriptions/{created['Id']}").status_code == 404
    assert api.delete(f"/subscriptions/{created['Id']}").status_code == 404


def test_subscriptions_need_their_permissions(
    emulator: RunningEmulator, receiver: Receiver
) -> None:
    with open_store(emulator.store) as conn:
        if not any(
            user.user_id == "sub-reader" for user in admin.list_users(conn, emulator.context.clock)
        ):
            admin.add_user(conn, emulator.context.clock, "sub-reader", ["subscriptions:read"])
    with api_client(emulator, "sub-reader") as reader:
        assert reader.get("/subscriptions").status_code == 200
        refused = reader.post("/subscriptions", json=body(receiver.url + "?t=reader"))
        assert refused.status_code == 403
        assert "subscriptions:write" in refused.json()["detail"]
    anonymous = httpx.get(f"{emulator.api_url}/{emulator.account.service_client_id}/subscriptions")
    assert anonymous.status_code == 401
