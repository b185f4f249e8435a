"""``trigger`` produces every event type of the catalog through real REST changes, as GET /events
shows afterwards."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from prefctl.api.client import ApiClient
from prefctl.api.events import EventQuery, EventsApi
from prefctl.api.profiles import ProfilesApi
from prefctl.api.trigger import trigger
from prefctl.auth.cache import TokenCache
from prefctl.auth.httpx_auth import BearerAuth
from prefctl.auth.provider import TokenProvider
from prefctl.clock import SystemClock
from prefctl.config import load_config, resolve_profile
from prefctl.errors import NotFoundError
from prefctl.webhooks import catalog
from tests.fixtures.emulator import EmulatorSlot


@pytest.fixture(scope="module")
def client(
    emulator_server: EmulatorSlot, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiClient]:
    """One client for the whole module (the emulator fixture is per test; this is cheaper)."""
    home = tmp_path_factory.mktemp("trigger")
    running = emulator_server.get().write_profile(home / "profiles.toml")
    assert running.config_path is not None
    profile = resolve_profile(load_config(running.config_path), "local", env={})
    clock = SystemClock()
    provider = TokenProvider.for_profile(
        profile, clock=clock, cache=TokenCache(home / "tokens", clock), env={}
    )
    with ApiClient(profile.api_url, profile.service_client_id, auth=BearerAuth(provider)) as api:
        yield api


@pytest.mark.parametrize("event_type", [t.name for t in catalog.ALL_TYPES])
def test_trigger_produces_each_catalog_type_as_stored_events_show(
    client: ApiClient, event_type: str
) -> None:
    result = trigger(client, event_type, profile_id=None, rng=random.Random())
    assert result.created_profile
    assert len(result.event_ids) == 1
    stored = EventsApi(client).list(EventQuery(profile_id=result.profile_id)).items
    by_id = {event["EventId"]: event for event in stored}
    assert by_id[result.event_ids[0]]["EventType"] == event_type
    assert by_id[result.event_ids[0]]["ProfileId"] == result.profile_id


def test_trigger_twice_on_one_profile_reports_only_the_new_events(client: ApiClient) -> None:
    first = trigger(client, "tag.added", profile_id=None, rng=random.Random(1))
    second = trigger(client, "tag.added", profile_id=first.profile_id, rng=random.Random(2))
    assert not second.created_profile
    assert second.profile_id == first.profile_id
    assert second.event_ids != first.event_ids
    assert len(second.event_ids) == 1


def test_trigger_leaves_the_rest_of_a_given_profile_alone(client: ApiClient) -> None:
    profiles = ProfilesApi(client)
    profile = profiles.create(
        {"CustomerName": {"FirstName": "Grace"}, "Tags": ["keep"], "DefaultLocale": "en-US"}
    )
    trigger(client, "standardfield.firstname.updated", profile_id=profile["ProfileId"],
            rng=random.Random())  # fmt: skip
    trigger(client, "standardfield.defaultlocale.updated", profile_id=profile["ProfileId"],
            rng=random.Random())  # fmt: skip
    after = profiles.get(profile["ProfileId"])
    assert after["CustomerName"]["FirstName"] != "Grace"
    assert after["DefaultLocale"] != "en-US"
    assert after["Tags"] == ["keep"]


def test_trigger_on_a_missing_profile_is_not_found(client: ApiClient) -> None:
    with pytest.raises(NotFoundError):
        trigger(client, "tag.added", profile_id=10**9, rng=random.Random())
