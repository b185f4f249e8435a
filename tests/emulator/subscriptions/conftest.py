"""Fixtures of the subscription tests: real receivers, and REST clients for a running emulator."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from prefctl.emulator.serve import RunningEmulator
from prefctl.webhooks.catalog import entity_of
from tests.emulator.subscriptions.endpoints import Receiver


# The receivers take ``emulator_backend`` so that each backend's emulator gets its own: what a
# receiver saw is found by subscription Id, and the PostgreSQL run's Ids start at 1 again.
@pytest.fixture(scope="module")
def receiver(emulator_backend: str) -> Iterator[Receiver]:
    """``prefctl receive`` answering handshakes with the code (sync validation)."""
    running = Receiver()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def manual_receiver(emulator_backend: str) -> Iterator[Receiver]:
    """``prefctl receive --manual-validation``: 200 without the code."""
    running = Receiver(manual=True)
    yield running
    running.stop()


def api_client(emulator: RunningEmulator, user_id: str | None = None) -> httpx.Client:
    """A client of ``{api_url}/{service_client_id}`` with a fresh token for ``user_id`` (default:
    the admin user)."""
    account = emulator.account
    answer = httpx.post(
        emulator.token_url,
        auth=(account.client_id, account.client_secret),
        data={
            "grant_type": "client_credentials",
            "scope": f"{account.service_client_id}/{user_id or account.user_id}",
        },
    )
    answer.raise_for_status()
    return httpx.Client(
        base_url=f"{emulator.api_url}/{account.service_client_id}",
        headers={"Authorization": f"Bearer {answer.json()['access_token']}"},
        timeout=10,
    )


_NAME_NUMBERS = itertools.count(1)


@pytest.fixture
def api(emulator: RunningEmulator) -> Iterator[httpx.Client]:
    """An authenticated client of the emulator's REST API."""
    with api_client(emulator) as client:
        yield client


def create(api: httpx.Client, payload: dict[str, object]) -> dict[str, Any]:
    """POST a subscription that must be accepted; its record."""
    answer = api.post("/subscriptions", json=payload)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def body(url: str, *event_types: str, name: str | None = None, **fields: Any) -> dict[str, Any]:
    """A subscription body selecting ``event_types`` (default profile.created), named ``name``
    or else ``CRM sync <n>``: names are unique in an account, and one emulator serves a module."""
    name = name if name is not None else f"CRM sync {next(_NAME_NUMBERS)}"
    selections = [
        {"Entity": entity_of(event_type), "EventType": event_type}
        for event_type in event_types or ("profile.created",)
    ]
    return {"Name": name, "Url": url, "Subscriptions": selections, **fields}


def wait_for_state(
    api: httpx.Client, subscription_id: int, state: str, timeout: float = 10.0
) -> dict[str, Any]:
    """GET the subscription until its ProvisioningState is ``state`` (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        record: dict[str, Any] = api.get(f"/subscriptions/{subscription_id}").json()
        if record["ProvisioningState"] == state:
            return record
        if time.monotonic() > deadline:
            raise AssertionError(f"still {record['ProvisioningState']}, not {state}: {record}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def emulator_backend(emulator_on_both_backends: str) -> str:
    """The subscription tests run on SQLite and on PostgreSQL (tests/fixtures/emulator.py)."""
    return emulator_on_both_backends
