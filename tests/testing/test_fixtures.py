"""The plugin's fixtures, used here as a user's tests use them (the plugin is active in this session).

Delivery rules run 600 times faster: a failed handshake's three attempts, 5 s apart, take 25 ms.
"""

from __future__ import annotations

import json

import httpx
import pytest

from prefctl.errors import PrefctlError, UsageError
from prefctl.testing import sign_headers, validation_request
from prefctl.testing._emulator import PrefctlEmulator
from prefctl.testing._receiver import PrefctlReceiver
from prefctl.webhooks.signature import SigningCredentials, Verifier
from tests.helpers import free_port, wait_until

pytestmark = pytest.mark.prefctl(time_scale=600)


def test_emulator_token_and_client_reach_the_account(prefctl_emulator: PrefctlEmulator) -> None:
    assert prefctl_emulator.time_scale == 600
    assert prefctl_emulator.api_url.endswith(f"/api/v1/{prefctl_emulator.service_client_id}")
    response = prefctl_emulator.client.get("/programs")
    assert response.status_code == 200
    assert response.json()["Programs"]
    own = httpx.get(
        f"{prefctl_emulator.api_url}/programs",
        headers={"Authorization": f"Bearer {prefctl_emulator.token()}"},
    )
    assert own.status_code == 200


def test_emulator_token_url_issues_tokens_for_its_client(prefctl_emulator: PrefctlEmulator) -> None:
    response = httpx.post(
        prefctl_emulator.token_url,
        data={
            "grant_type": "client_credentials",
            "scope": f"{prefctl_emulator.service_client_id}/admin",
        },
        auth=(prefctl_emulator.client_id, prefctl_emulator.client_secret),
    )
    assert response.status_code == 200
    assert response.json()["token_type"] == "Bearer"


def test_emulator_settings_are_set_by_name_and_range_checked(
    prefctl_emulator: PrefctlEmulator,
) -> None:
    settings = prefctl_emulator.settings(MaxDeliveryAttempts=5)
    assert settings["MaxDeliveryAttempts"] == 5
    assert prefctl_emulator.client.get("/settings/webhooks").json()["MaxDeliveryAttempts"] == 5
    with pytest.raises(UsageError, match="MaxDeliveryAttempts=99 is out of range"):
        prefctl_emulator.settings(MaxDeliveryAttempts=99)
    prefctl_emulator.settings(MaxDeliveryAttempts=30)


def test_emulator_trigger_returns_the_envelopes_the_receiver_gets(
    prefctl_emulator: PrefctlEmulator, prefctl_receiver: PrefctlReceiver
) -> None:
    prefctl_emulator.subscribe(prefctl_receiver.url, ["contacts.email.added"])
    produced = prefctl_emulator.trigger("contacts.email.added")
    [arrived] = prefctl_receiver.wait_for("contacts.email.added")
    assert [e["EventId"] for e in produced] == [arrived["EventId"]]
    assert arrived["ClientId"] == prefctl_emulator.service_client_id
    assert prefctl_receiver.events == [arrived]  # the handshake is not an event


def test_emulator_subscribe_to_a_closed_port_says_nothing_listens_at_that_url(
    prefctl_emulator: PrefctlEmulator,
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/webhooks"
    with pytest.raises(PrefctlError, match="failed provisioning: ") as info:
        prefctl_emulator.subscribe(nobody, "tag.added")
    assert str(info.value).endswith(
        f"the last could not connect: nothing is listening at {nobody} (connection refused)"
    )
    assert "Error" not in str(info.value)  # no exception class: ConnectError, OSError


def test_receiver_fail_next_makes_the_service_retry(
    prefctl_emulator: PrefctlEmulator, prefctl_receiver: PrefctlReceiver
) -> None:
    prefctl_emulator.subscribe(prefctl_receiver.url, ["tag.added"])
    prefctl_receiver.fail_next(1)
    prefctl_receiver.fail_next(1, status=500)
    [event] = prefctl_emulator.trigger("tag.added")
    attempts = prefctl_receiver.wait_for("tag.added", count=3)
    assert {a["EventId"] for a in attempts} == {event["EventId"]}

    def statuses() -> list[int]:  # the recording is written off the answering path
        lines = prefctl_receiver.recording.read_text().splitlines()
        recorded = [json.loads(line) for line in lines]
        return [r["verdict"]["status"] for r in recorded if r["verdict"]["kind"] == "event"]

    wait_until(lambda: len(statuses()) >= 3)
    assert statuses() == [503, 500, 200]


def test_receiver_fail_next_refuses_what_is_not_a_count_or_status(
    prefctl_receiver: PrefctlReceiver,
) -> None:
    with pytest.raises(UsageError, match="number of events"):
        prefctl_receiver.fail_next(0)
    with pytest.raises(UsageError, match="HTTP status"):
        prefctl_receiver.fail_next(1, status=99)


def _post_event(receiver: PrefctlReceiver, emulator: PrefctlEmulator, hashkey: str) -> int:
    """POST a tag.added event signed with ``hashkey`` to the receiver; the status it answers."""
    body = json.dumps({"EventId": "e-1", "EventType": "tag.added"}).encode()
    headers = sign_headers(
        body,
        hashkey=hashkey,
        client_id=emulator.service_client_id,
        user_id=emulator.signature_user_id,
    )
    return httpx.post(receiver.url, content=body, headers=headers).status_code


def test_receiver_wait_for_names_what_arrived_when_it_times_out(
    prefctl_emulator: PrefctlEmulator, prefctl_receiver: PrefctlReceiver
) -> None:
    assert _post_event(prefctl_receiver, prefctl_emulator, prefctl_emulator.hashkey) == 200
    with pytest.raises(TimeoutError) as info:
        prefctl_receiver.wait_for("tag.removed", timeout=0.2)
    assert str(info.value).endswith("arrived: 1 × tag.added")


def test_receiver_leaves_out_events_that_fail_verification(
    prefctl_emulator: PrefctlEmulator, prefctl_receiver: PrefctlReceiver
) -> None:
    assert _post_event(prefctl_receiver, prefctl_emulator, "not-the-hashkey") == 401
    handshake, headers = validation_request(code="c0de")
    answer = httpx.post(prefctl_receiver.url, content=handshake, headers=headers)
    assert answer.json() == {"validationResponse": "c0de"}
    with pytest.raises(TimeoutError, match="arrived: 1 × handshake"):
        prefctl_receiver.wait_for("tag.added", timeout=0.2)
    assert prefctl_receiver.events == []


def test_sign_headers_verify_with_prefctl_verifier() -> None:
    credentials = SigningCredentials("DEMO_CORP", "events-signer", "s3cret")
    headers = sign_headers(b"{}", hashkey="s3cret", client_id="DEMO_CORP", user_id="events-signer")
    assert headers["Content-Type"] == "application/json"
    from prefctl.clock import SystemClock

    Verifier(credentials).verify(headers["Service-Webhook"], now=SystemClock().now())


def test_sign_headers_signs_a_given_timestamp_verbatim() -> None:
    headers = sign_headers(
        b"{}", hashkey="k", client_id="C", user_id="u", timestamp="2020-01-01T00:00:00.000Z"
    )
    assert headers["Service-Webhook"].startswith("Timestamp=2020-01-01T00:00:00.000Z,Signature=")
    with pytest.raises(TypeError, match="bytes"):
        sign_headers("{}", hashkey="k", client_id="C", user_id="u")  # type: ignore[arg-type]


def test_validation_request_is_an_unsigned_handshake_with_a_fresh_code() -> None:
    first, headers = validation_request()
    second, _ = validation_request()
    message = json.loads(first)
    assert message["EventType"] == "subscription.validation"
    assert "Service-Webhook" not in headers
    assert len(message["data"]["validationCode"]) == 32
    assert message["data"]["validationCode"] != json.loads(second)["data"]["validationCode"]


def test_receiver_without_a_fault_plan_refuses_faults_at_run_time() -> None:
    from prefctl.receiver.faults import FaultStep
    from prefctl.receiver.serve import ReceiverConfig, start_in_thread

    with (
        start_in_thread(ReceiverConfig(port=0, verify=False)) as receiver,
        pytest.raises(UsageError, match="no fault plan"),
    ):
        receiver.inject_fault(FaultStep(count=1, status=503))
