"""Provisioning failures through the REST API, on an emulator with a FakeClock: the 5 s retry
pauses and the 5-minute validation window pass at once, so each test takes well under 2 s."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from prefctl.clock import FakeClock
from prefctl.dispatcher.handshake import MANUAL_EXPIRED
from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.store.db import connect
from prefctl.store.delivery_history import DeliveryQuery, list_deliveries
from tests.emulator.subscriptions.conftest import api_client, body, wait_for_state
from tests.emulator.subscriptions.endpoints import Receiver, stub_endpoint
from tests.helpers import free_port, wait_until


class FakeTimeEmulator:
    """An emulator on a FakeClock that can be restarted on the same data dir."""

    def __init__(self, data_dir: Path, store: str | None) -> None:
        clock = FakeClock(datetime.now(UTC))
        self.config = EmulatorConfig(port=0, data_dir=data_dir, clock=clock, store=store)
        self.running: RunningEmulator = start_in_thread(self.config)

    def restart(self) -> RunningEmulator:
        self.running.stop()
        self.running = start_in_thread(self.config)
        return self.running


@pytest.fixture(scope="module")
def fake_time(
    tmp_path_factory: pytest.TempPathFactory, emulator_backend: str, request: pytest.FixtureRequest
) -> Iterator[FakeTimeEmulator]:
    store = None
    if emulator_backend == "postgresql":
        store = str(request.getfixturevalue("postgres_module_url"))
    emulator = FakeTimeEmulator(tmp_path_factory.mktemp("fake-time") / "data", store)
    yield emulator
    emulator.running.stop()


@pytest.fixture
def api(fake_time: FakeTimeEmulator) -> Iterator[httpx.Client]:
    with api_client(fake_time.running) as client:
        yield client


def test_handshake_answered_202_fails_with_the_reason_in_get(api: httpx.Client) -> None:
    with stub_endpoint(202) as stub:
        created = api.post("/subscriptions", json=body(stub.url)).json()
        failed = wait_for_state(api, created["Id"], "Failed")
    assert len(stub.requests) == 3
    assert failed["ProvisioningError"] == (
        "3 handshake attempts failed; the last answered 202, not 200"
        " (202 is not accepted: only 200 is)"
    )


def test_handshake_refused_connection_fails(api: httpx.Client) -> None:
    created = api.post("/subscriptions", json=body(f"http://127.0.0.1:{free_port()}/h")).json()
    failed = wait_for_state(api, created["Id"], "Failed")
    assert "nothing is listening at" in failed["ProvisioningError"]


def test_manual_validation_not_done_fails_after_five_minutes(
    api: httpx.Client, manual_receiver: Receiver
) -> None:
    created = api.post("/subscriptions", json=body(manual_receiver.url + "?t=late")).json()
    failed = wait_for_state(api, created["Id"], "Failed")
    assert failed["ProvisioningError"] == MANUAL_EXPIRED
    (handshake,) = manual_receiver.handshakes(created["Id"])
    assert handshake.validation_url is not None
    late = httpx.get(handshake.validation_url)  # docs/subscriptions.md: the window is over
    assert late.status_code == 410
    assert "expired" in late.json()["detail"]
    assert wait_for_state(api, created["Id"], "Failed")["ProvisioningError"] == MANUAL_EXPIRED


def test_failed_subscription_given_a_new_url_is_provisioned_again(
    api: httpx.Client, receiver: Receiver
) -> None:
    with stub_endpoint(500) as stub:
        created = api.post("/subscriptions", json=body(stub.url)).json()
        wait_for_state(api, created["Id"], "Failed")
    answer = api.put(f"/subscriptions/{created['Id']}", json=body(receiver.url + "?t=retry"))
    assert answer.json()["ProvisioningState"] == "Updating"
    assert "ProvisioningError" not in answer.json()
    succeeded = wait_for_state(api, created["Id"], "Succeeded")
    assert "ProvisioningError" not in succeeded


def test_url_change_that_fails_dead_letters_the_events_that_waited_for_it(
    fake_time: FakeTimeEmulator, api: httpx.Client, receiver: Receiver
) -> None:
    # docs/subscriptions.md: an event during a Url change is held; a Failed handshake
    # dead-letters it with a reason instead of losing it.
    payload = body(receiver.url + "?t=move-fails")
    created = api.post("/subscriptions", json=payload).json()
    wait_for_state(api, created["Id"], "Succeeded")
    with stub_endpoint(hang=True) as stub:
        api.put(f"/subscriptions/{created['Id']}", json={**payload, "Url": stub.url})
        wait_until(lambda: len(stub.requests) == 1, timeout=5)
        made = api.post("/profiles", json={"Emails": [{"Address": "moving@example.com"}]})
        assert made.status_code == 201, made.text
        stub.answer(500)
        failed = wait_for_state(api, created["Id"], "Failed")
    assert "3 handshake attempts failed" in failed["ProvisioningError"]
    conn = connect(fake_time.running.store)
    try:
        [letter] = list_deliveries(conn, DeliveryQuery(subscription_id=created["Id"]))
    finally:
        conn.close()
    assert (letter.state, letter.dead_letter_reason) == (
        "dead_lettered",
        "SubscriptionValidationFailed",
    )


def test_emulator_restart_resumes_an_unfinished_handshake(fake_time: FakeTimeEmulator) -> None:
    with stub_endpoint(hang=True) as stub:
        with api_client(fake_time.running) as api:
            created = api.post("/subscriptions", json=body(stub.url)).json()
            wait_until(lambda: len(stub.requests) == 1, timeout=5)
        stub.hang, stub.echo = False, True  # the endpoint comes back while the emulator is down
        restarted = fake_time.restart()
        with api_client(restarted) as api:
            record = wait_for_state(api, created["Id"], "Succeeded")
    assert len(stub.requests) == 2
    assert stub.requests[0]["data"]["validationCode"] != stub.requests[1]["data"]["validationCode"]
    assert record["ProvisioningState"] == "Succeeded"
