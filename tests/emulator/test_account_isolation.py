"""Two accounts in one emulator (``emulator accounts add``): a token of one never reads or changes
the other's profiles, subscriptions, settings, events, imports or deliveries, even when it names
the other's resource ids under its own account path; with the emulator on SQLite and on PostgreSQL
(tests/fixtures/emulator.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from prefctl.clock import SystemClock
from prefctl.dispatcher import operations
from prefctl.emulator import admin
from prefctl.emulator.serve import RunningEmulator
from prefctl.receiver.serve import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.receiver.verdict import Verdict
from prefctl.store.db import connect
from prefctl.webhooks.signature import SigningCredentials
from tests.emulator.subscriptions.conftest import body, wait_for_state
from tests.fixtures.emulator import EmulatorSlot
from tests.helpers import wait_until


class Receiver:
    """A real ``prefctl receive`` keeping every verdict; it checks signatures against
    ``signing`` (one account's), or none."""

    def __init__(self, signing: SigningCredentials | None = None) -> None:
        config = ReceiverConfig(port=0, verify=signing is not None, credentials=signing)
        self.running: RunningReceiver = start_in_thread(config)
        self.url = self.running.webhook_url
        self.seen: list[Verdict] = []

    def events(self, subscription_id: int, event_id: str) -> list[Verdict]:
        while not self.running.verdicts.empty():
            self.seen.append(self.running.verdicts.get_nowait())
        return [
            v for v in self.seen if v.subscription_id == subscription_id and v.event_id == event_id
        ]


@pytest.fixture(scope="module")
def emulator_backend(emulator_on_both_backends: str) -> str:
    return emulator_on_both_backends


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.running.stop()


@dataclass
class Team:
    name: str
    api: httpx.Client
    signing: SigningCredentials


@dataclass
class Teams:
    emulator: RunningEmulator
    a: Team
    b: Team


@pytest.fixture(scope="module")
def teams(emulator_server: EmulatorSlot) -> Iterator[Teams]:
    emulator = emulator_server.get()
    clock = SystemClock()
    made = []
    with admin.open_admin_store(emulator.data_dir, str(emulator.store)) as conn:
        for name in ("TEAM_A", "TEAM_B"):
            new = admin.add_account(conn, clock, name)
            answer = httpx.post(
                emulator.token_url,
                auth=(new.client.client_id, new.secret),
                data={"grant_type": "client_credentials", "scope": f"{name}/{new.user_id}"},
            )
            assert answer.status_code == 200, answer.text
            token = answer.json()["access_token"]
            client = httpx.Client(
                base_url=f"{emulator.api_url}/{name}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )
            account = new.account
            signing = SigningCredentials(name, account.signature_user_id, account.hashkey)
            made.append(Team(name, client, signing))
    try:
        yield Teams(emulator, made[0], made[1])
    finally:
        for team in made:
            team.api.close()


def _created(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def test_profile_of_one_account_is_not_found_through_another_accounts_token(teams: Teams) -> None:
    a, b = teams.a.api, teams.b.api
    profile = _created(a.post("/profiles", json={"Emails": [{"Address": "ann@team-a.example"}]}))
    profile_id = profile["ProfileId"]

    assert b.get(f"/profiles/{profile_id}").status_code == 404
    assert b.get("/profiles", params={"email": "ann@team-a.example"}).json()["Profiles"] == []
    assert (
        b.put(
            f"/profiles/{profile_id}", json={"Emails": [{"Address": "eve@b.example"}]}
        ).status_code
        == 404
    )
    patched = b.patch(
        f"/profiles/{profile_id}",
        content=b'[{"op": "replace", "path": "/Emails", "value": []}]',
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert patched.status_code == 404
    assert b.post(f"/profiles/{profile_id}/deactivate", json={}).status_code == 404
    assert b.delete(f"/profiles/{profile_id}").status_code == 404
    # … and the other account's token on the owner's path is refused outright.
    assert b.get(f"{teams.emulator.api_url}/TEAM_A/profiles/{profile_id}").status_code == 403

    unchanged = a.get(f"/profiles/{profile_id}")
    assert unchanged.status_code == 200
    assert unchanged.json()["Emails"][0]["Address"] == "ann@team-a.example"


def test_subscription_of_one_account_is_not_found_through_another_accounts_token(
    teams: Teams,
) -> None:
    a, b = teams.a.api, teams.b.api
    subscription = _created(a.post("/subscriptions", json=body("http://127.0.0.1:9/hook")))
    subscription_id = subscription["Id"]

    assert b.get(f"/subscriptions/{subscription_id}").status_code == 404
    listed = b.get("/subscriptions").json()["Subscriptions"]
    assert subscription_id not in [s["Id"] for s in listed]
    replacement = body("http://127.0.0.1:9/other", name="taken over")
    assert b.put(f"/subscriptions/{subscription_id}", json=replacement).status_code == 404
    assert b.delete(f"/subscriptions/{subscription_id}").status_code == 404

    still = a.get(f"/subscriptions/{subscription_id}")
    assert still.status_code == 200
    assert still.json()["Name"] == subscription["Name"]


def test_settings_of_one_account_do_not_change_another_accounts(teams: Teams) -> None:
    a, b = teams.a.api, teams.b.api
    before = b.get("/settings/webhooks").json()
    try:
        assert a.put("/settings/webhooks", json={"MaxDeliveryAttempts": 3}).status_code == 200
        assert b.get("/settings/webhooks").json() == before
        assert b.put("/settings/webhooks", json={"Duration": 10}).status_code == 200
        assert a.get("/settings/webhooks").json()["MaxDeliveryAttempts"] == 3
        assert a.get("/settings/webhooks").json()["Duration"] != 10
    finally:
        a.put("/settings/webhooks", json={})
        b.put("/settings/webhooks", json={})


def test_events_of_one_account_are_not_listed_for_another(teams: Teams) -> None:
    a, b = teams.a.api, teams.b.api
    profile_id = _created(a.post("/profiles", json={}))["ProfileId"]
    assert a.get("/events", params={"profileId": profile_id}).json()["Events"]

    assert b.get("/events", params={"profileId": profile_id}).json()["Events"] == []
    everything_b_sees = b.get("/events", params={"limit": 500}).json()["Events"]
    a_event_ids = {e["EventId"] for e in a.get("/events", params={"limit": 500}).json()["Events"]}
    assert a_event_ids
    assert not a_event_ids & {e["EventId"] for e in everything_b_sees}


def test_import_of_one_account_is_not_found_through_another_accounts_token(teams: Teams) -> None:
    a, b = teams.a.api, teams.b.api
    started = a.post("/imports")
    assert started.status_code == 201, started.text
    import_id = started.json()["ImportId"]

    assert b.get(f"/imports/{import_id}").status_code == 404
    staged = b.post(
        f"/imports/{import_id}/records", json=[{"Emails": [{"Address": "eve@b.example"}]}]
    )
    assert staged.status_code == 404
    assert b.post(f"/imports/{import_id}/execute").status_code == 404
    untouched = a.get(f"/imports/{import_id}").json()
    assert untouched["State"] == "Initiated"  # nothing staged, nothing run


def test_changes_in_one_account_are_delivered_to_its_own_subscriptions_only(
    teams: Teams, receiver: Receiver
) -> None:
    a, b = teams.a.api, teams.b.api
    # Both teams subscribe the same Url to the same event type.
    mine = _created(a.post("/subscriptions", json=body(receiver.url, "profile.created")))["Id"]
    theirs = _created(b.post("/subscriptions", json=body(receiver.url, "profile.created")))["Id"]
    wait_for_state(a, mine, "Succeeded")
    wait_for_state(b, theirs, "Succeeded")

    profile_id = _created(a.post("/profiles", json={}))["ProfileId"]
    created = a.get("/events", params={"profileId": profile_id, "eventType": "profile.created"})
    event_id = created.json()["Events"][0]["EventId"]

    wait_until(lambda: receiver.events(mine, event_id), timeout=20, what="A's delivery")
    with closing(connect(str(teams.emulator.store))) as conn:
        delivered = operations.list_deliveries(conn, event_ids=[event_id])
    assert [d.subscription_id for d in delivered] == [mine]
    assert not receiver.events(theirs, event_id)
    # B cannot list the events delivered to A's subscription either.
    assert a.get("/events", params={"subscriptionId": mine}).json()["Events"]
    assert b.get("/events", params={"subscriptionId": mine}).json()["Events"] == []


def test_each_accounts_events_are_signed_with_its_own_hashkey(teams: Teams) -> None:
    a, b = teams.a.api, teams.b.api
    checking_a = Receiver(signing=teams.a.signing)  # accepts only what A's Hashkey signs
    try:
        subscriptions = {}
        for team, api in (("a", a), ("b", b)):
            created = _created(api.post("/subscriptions", json=body(checking_a.url)))
            wait_for_state(api, created["Id"], "Succeeded")
            subscriptions[team] = created["Id"]
        event_ids = {}
        for team, api in (("a", a), ("b", b)):
            profile_id = _created(api.post("/profiles", json={}))["ProfileId"]
            listed = api.get("/events", params={"profileId": profile_id})
            event_ids[team] = listed.json()["Events"][0]["EventId"]

        def answered(team: str) -> list[Verdict]:
            return checking_a.events(subscriptions[team], event_ids[team])

        wait_until(lambda: answered("a") and answered("b"), timeout=20, what="both deliveries")
        assert answered("a")[0].status == 200
        assert answered("b")[0].status == 401  # B's key is not A's
    finally:
        checking_a.running.stop()
