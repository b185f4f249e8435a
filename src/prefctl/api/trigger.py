"""``trigger``: perform, through the REST API, a real profile change that yields a given event type.

Each of the catalog's event types has a *recipe* (``trigger_recipes.py``): setup changes that put
the profile in the state the change needs (an email to delete must exist first), then the change
itself. Updates are sent as merge patches computed from the current profile, so only the touched
fields change; lifecycle types use their own operations (POST, PUT, deactivate, reactivate,
DELETE). The EventIds of the type that the final change produced are read back from
``GET /events`` (those of the profile and type that were not there before it), so what is reported
is what the service stored — and what subscribers of the type are sent.

Without a profile id a throwaway profile is created first (profile.created makes its own). Elements
the recipes add are named ``prefctl-trigger-<token>`` (addresses ``trigger-<token>@example.com``)
so they never collide with the profile's data; ``filter_value`` sets the value subscription
filters match instead (a preference's Filter, the ConsentType, a contact's Type, a custom field's
or group's Name, the new CustomerType). The changes stay on the profile.

    >>> result = trigger(client, "contacts.email.added", profile_id=None, rng=random.Random())
    >>> result.profile_id, result.event_ids
    (1042, ['6f0c…'])
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from prefctl.api.client import ApiClient, Resource
from prefctl.api.events import EventQuery, EventsApi
from prefctl.api.profiles import ProfilesApi
from prefctl.api.shapes import required_id, text
from prefctl.api.trigger_recipes import Names, Target, recipes
from prefctl.errors import PrefctlError, UsageError
from prefctl.models.setting_ranges import EMIT_UPDATED_FULL
from prefctl.webhooks import catalog

__all__ = ["TriggerResult", "trigger"]


@dataclass(frozen=True)
class TriggerResult:
    """What ``trigger`` did: the profile it changed and the EventIds of the type it produced."""

    event_type: str
    profile_id: int
    created_profile: bool
    event_ids: list[str]


def trigger(
    client: ApiClient,
    event_type: str,
    *,
    profile_id: int | None,
    rng: random.Random,
    filter_value: str | None = None,
) -> TriggerResult:
    """Make the service emit ``event_type`` (see the module docstring); PrefctlError if it did
    not appear in the event history."""
    if not catalog.is_event_type(event_type):
        raise UsageError(
            f"unknown event type '{event_type}'", hint="'prefctl events types' lists them"
        )
    entity = catalog.entity_of(event_type)
    if filter_value is not None and catalog.filter_key(entity) is None:
        raise UsageError(f"{event_type} is a {entity} event: it takes no filter value")
    if event_type == "profile.created" and profile_id is not None:
        raise UsageError("profile.created creates a new profile; --profile-id does not apply")
    profiles, events = ProfilesApi(client), EventsApi(client)
    names = Names(f"{rng.getrandbits(32):08x}", filter_value, _programs_of(client))
    if event_type == "profile.created":
        created = profiles.create(names.throwaway_profile())
        new_id = required_id(created, "ProfileId", "POST /profiles")
        return TriggerResult(event_type, new_id, True, _event_ids(events, new_id, event_type))
    created_profile = profile_id is None
    if profile_id is None:
        created = profiles.create(names.throwaway_profile())
        profile_id = required_id(created, "ProfileId", "POST /profiles")
    target = Target(profiles, profile_id)
    recipe = recipes(names)[event_type]
    for step in recipe.setup:
        step(target, profiles.get(profile_id))
    before = set(_event_ids(events, profile_id, event_type))
    recipe.final(target, profiles.get(profile_id))
    produced = [i for i in _event_ids(events, profile_id, event_type) if i not in before]
    if not produced:
        hint = "'prefctl events list --profile-id' shows what it produced"
        if event_type == "profile.updatedfull":
            hint = (
                f"the emulator sends it only while the account setting {EMIT_UPDATED_FULL} is "
                f"true: prefctl settings set {EMIT_UPDATED_FULL}=true"
            )
        raise PrefctlError(
            f"the change made on profile {profile_id} produced no {event_type} event", hint=hint
        )
    return TriggerResult(event_type, profile_id, created_profile, produced)


def _event_ids(events: EventsApi, profile_id: int, event_type: str) -> list[str]:
    query = EventQuery(profile_id=profile_id, event_type=event_type)
    events_of_type = events.list_all(query, page_size=500)
    return [event_id for e in events_of_type if (event_id := text(e.get("EventId"))) is not None]


def _programs_of(client: ApiClient) -> Callable[[], list[Resource]]:
    """The account's programs, fetched on first use (only preference recipes need them)."""
    from prefctl.api.programs import ProgramsApi

    cache: list[list[Resource]] = []

    def programs() -> list[Resource]:
        if not cache:
            cache.append(ProgramsApi(client).list())
        return cache[0]

    return programs
