"""The recipes of ``trigger``: for each event type, the setup changes and the change that yields it.

A ``Recipe`` is steps on one profile (``Target``): ``setup`` steps put the profile in the state
the change needs, then ``final`` makes the change whose events are reported. A step reads the
profile as it is now and calls the REST API: ``_update(*changes)`` sends the merge patch of
``changes`` applied to a copy (nothing when they change nothing); the lifecycle steps use their
own operations. ``Names`` says what the recipes add, so it never collides with the profile's data.

    >>> recipe = recipes(names)["contacts.email.deleted"]    # setup: add an email; final: drop it
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prefctl.api.client import Resource
from prefctl.api.patches import merge_patch
from prefctl.api.profiles import ProfilesApi
from prefctl.api.shapes import list_to_edit, object_to_edit, objects_at, text, texts_at
from prefctl.webhooks import catalog

__all__ = ["REASON", "Names", "Recipe", "Target", "recipes"]

REASON = "prefctl events trigger"
Change = Callable[[dict[str, Any]], None]  # edits a copy of the profile in place


@dataclass
class Target:
    """The profile the steps change."""

    profiles: ProfilesApi
    profile_id: int


Step = Callable[[Target, Resource], None]  # (the target, the profile as it is now)


@dataclass(frozen=True)
class Recipe:
    """Setup steps, then the step that yields the event type."""

    final: Step
    setup: tuple[Step, ...] = field(default=())


# -- names of what the recipes add -----------------------------------------------------------------
@dataclass(frozen=True)
class Names:
    """What the recipes add: named after ``token``, or after the filter value when given."""

    token: str
    filter_value: str | None
    programs: Callable[[], list[Resource]]

    @property
    def label(self) -> str:
        return self.filter_value or f"prefctl-trigger-{self.token}"

    @property
    def email(self) -> str:
        return f"trigger-{self.token}@example.com"

    @property
    def phone(self) -> str:
        return f"+1 555 {int(self.token, 16) % 10_000_000:07d}"

    def throwaway_profile(self) -> dict[str, Any]:
        return {
            "CustomerName": {"FirstName": "Trigger", "LastName": "Profile"},
            "Emails": [{"Address": f"profile-{self.token}@example.com", "IsDefault": True}],
            "Tags": ["prefctl-trigger"],
        }

    def preference(self) -> dict[str, Any]:
        """A preference of a real program: the one offering ``filter_value`` when given."""
        wanted = self.filter_value
        for program in self.programs():
            name = text(program.get("Name"))
            if not name:
                continue
            filters = [
                f for item in objects_at(program, "Filters") if (f := text(item.get("Name")))
            ]
            if wanted is None or wanted in filters:
                channels = texts_at(program, "Channels") or ["Email"]
                chosen = wanted or (filters[0] if filters else None)
                return _preference(name, channels[0], chosen)
        return _preference("prefctl-trigger", "Email", wanted)


def _preference(program: str, channel: str, filter_name: str | None) -> dict[str, Any]:
    preference = {"Program": program, "Channel": channel, "Status": "OptIn"}
    return preference if filter_name is None else {**preference, "Filter": filter_name}


# -- steps -----------------------------------------------------------------------------------------
def _update(*changes: Change) -> Step:
    """A PATCH with the merge patch of ``changes`` (nothing is sent when they change nothing)."""

    def step(target: Target, current: Resource) -> None:
        new = copy.deepcopy(current)
        for change in changes:
            change(new)
        patch = merge_patch(current, new)
        if patch:
            target.profiles.patch(target.profile_id, patch)

    return step


def _replace(target: Target, current: Resource) -> None:
    target.profiles.replace(target.profile_id, current)


def _deactivate(target: Target, current: Resource) -> None:
    target.profiles.deactivate(target.profile_id, REASON)


def _reactivate(target: Target, current: Resource) -> None:
    target.profiles.reactivate(target.profile_id)


def _delete(target: Target, current: Resource) -> None:
    target.profiles.delete(target.profile_id, "prefctl-trigger")


def _when(condition: Callable[[Resource], bool], step: Step) -> Step:
    def guarded(target: Target, current: Resource) -> None:
        if condition(current):
            step(target, current)

    return guarded


def _active(profile: Resource) -> bool:
    return profile.get("IsActive", True) is not False


# -- changes ---------------------------------------------------------------------------------------
def _of(profile: dict[str, Any]) -> str:
    return f"profile {text(profile.get('ProfileId'))}"


def _add(key: str, item: Any) -> Change:
    def change(profile: dict[str, Any]) -> None:
        profile[key] = [*list_to_edit(profile, key, _of(profile)), copy.deepcopy(item)]

    return change


def _matches(item: Any, identity: Any) -> bool:
    if isinstance(identity, dict):
        return isinstance(item, dict) and all(item.get(k) == v for k, v in identity.items())
    return bool(item == identity)


def _drop(key: str, identity: Any) -> Change:
    def change(profile: dict[str, Any]) -> None:
        items = list_to_edit(profile, key, _of(profile))
        profile[key] = [i for i in items if not _matches(i, identity)]

    return change


def _edit(key: str, identity: dict[str, Any], **fields: Any) -> Change:
    def change(profile: dict[str, Any]) -> None:
        for item in list_to_edit(profile, key, _of(profile)):  # the profile's own items
            if _matches(item, identity):
                item.update(copy.deepcopy(fields))

    return change


def _other(current: Any, first: str, second: str) -> str:
    return second if current == first else first


def _toggle(key: str, first: str, second: str, wanted: str | None = None) -> Change:
    def change(profile: dict[str, Any]) -> None:
        current = profile.get(key)
        profile[key] = (
            wanted if wanted is not None and wanted != current else _other(current, first, second)
        )

    return change


def _name_part(part: str, value: Callable[[Any], Any]) -> Change:
    """Set CustomerName.<part> to ``value(current)``; None clears it."""

    def change(profile: dict[str, Any]) -> None:
        name = object_to_edit(profile, "CustomerName", _of(profile))
        new = value(name.get(part))
        if new is None:
            name.pop(part, None)
        else:
            name[part] = new
        profile["CustomerName"] = name

    return change


# -- recipes ---------------------------------------------------------------------------------------
def recipes(names: Names) -> dict[str, Recipe]:
    recipes: dict[str, Recipe] = {
        "profile.replaced": Recipe(_replace),
        "profile.deactivated": Recipe(_deactivate, (_when(lambda p: not _active(p), _reactivate),)),
        "profile.reactivated": Recipe(_reactivate, (_when(_active, _deactivate),)),
        "profile.deleted": Recipe(_delete),
        "profile.updated": Recipe(_update(_add("Tags", names.label))),
        "profile.updatedfull": Recipe(_update(_add("Tags", names.label))),
        "contacts.customertype.updated": Recipe(
            _update(_toggle("CustomerType", "Individual", "Business", names.filter_value))
        ),
        "standardfield.defaultlocale.updated": Recipe(
            _update(_toggle("DefaultLocale", "en-US", "fr-FR"))
        ),
        "standardfield.registrationstatus.updated": Recipe(
            _update(_toggle("RegistrationStatus", "Registered", "Unregistered"))
        ),
        "tag.added": Recipe(_update(_add("Tags", names.label))),
        "tag.deleted": Recipe(
            _update(_drop("Tags", names.label)), (_update(_add("Tags", names.label)),)
        ),
    }
    contact_type = names.filter_value
    elements = (
        ("contacts.email", "Emails", {"Address": names.email, "Type": contact_type or "Personal"},
         "Address", {"Type": _other(contact_type, "Work", "Personal")}),
        ("contacts.phone", "PhoneNumbers", {"Number": names.phone, "Type": contact_type or "Mobile"},
         "Number", {"IsMobile": True}),
        ("contacts.address", "Addresses",
         {"Type": names.label, "Line1": "1 Trigger Street", "City": "Springfield",
          "CountryCode": "US"},
         "Type", {"City": "Shelbyville"}),
        ("contacts.alternateid", "AlternateIds", {"Type": names.label, "Value": "T-1"},
         "Type", {"Value": "T-2"}),
        ("customfield", "CustomFields", {"Name": names.label, "Value": "1"}, "Name", {"Value": "2"}),
    )  # fmt: skip
    for prefix, key, item, identity_key, edit in elements:
        identity = {identity_key: item[identity_key]}
        add = _update(_add(key, item))
        recipes[f"{prefix}.added"] = Recipe(add)
        recipes[f"{prefix}.updated"] = Recipe(_update(_edit(key, identity, **edit)), (add,))
        recipes[f"{prefix}.deleted"] = Recipe(_update(_drop(key, identity)), (add,))
    group = {"Name": names.label}
    recipes["group.added"] = Recipe(_update(_add("Groups", {**group, "IsActive": True})))
    recipes["group.updated"] = Recipe(
        _update(_edit("Groups", group, IsActive=True)),
        (_update(_add("Groups", {**group, "IsActive": False})),),
    )
    recipes["group.deactivated"] = Recipe(
        _update(_edit("Groups", group, IsActive=False)),
        (_update(_add("Groups", {**group, "IsActive": True})),),
    )
    recipes.update(_name_recipes())
    recipes.update(_preference_recipes(names))
    recipes.update(_consent_recipes(names))
    return recipes


def _name_recipes() -> dict[str, Recipe]:
    recipes = {}
    for segment, part in catalog.NAME_PARTS:
        ensure_set = _update(_name_part(part, lambda v: v or "Trigger"))
        recipes[f"standardfield.{segment}.added"] = Recipe(
            _update(_name_part(part, lambda _v: "Trigger")),
            (_update(_name_part(part, lambda _v: None)),),
        )
        recipes[f"standardfield.{segment}.updated"] = Recipe(
            _update(_name_part(part, lambda v: _other(v, "Trigger", "Triggered"))), (ensure_set,)
        )
        recipes[f"standardfield.{segment}.deleted"] = Recipe(
            _update(_name_part(part, lambda _v: None)), (ensure_set,)
        )
    return recipes


def _preference_recipes(names: Names) -> dict[str, Recipe]:
    # Preferences live on a contact the recipe adds, so they never collide with existing ones.
    email = {"Address": names.email}

    def with_preference(**fields: Any) -> Change:
        def change(profile: dict[str, Any]) -> None:
            _edit("Emails", email, Preferences=[{**names.preference(), **fields}])(profile)

        return change

    add_email = _update(_add("Emails", email))
    add_both = _update(_add("Emails", email), with_preference())
    return {
        "preference.added": Recipe(_update(with_preference()), (add_email,)),
        "preference.updated": Recipe(_update(with_preference(Status="OptOut")), (add_both,)),
        "preference.archived": Recipe(_update(with_preference(IsArchived=True)), (add_both,)),
    }


def _consent_recipes(names: Names) -> dict[str, Recipe]:
    consent = {"ConsentType": names.label, "ConsentStatus": "Granted", "ConsentVersion": "1"}
    identity = {"ConsentType": names.label}
    revoke = _update(_edit("Consents", identity, ConsentStatus="Revoked"))
    add = _update(_add("Consents", consent))
    recipes = {
        "consent.added": Recipe(add),
        "consent.updated": Recipe(revoke, (add,)),
        "consent.deactivated": Recipe(_update(_drop("Consents", identity)), (add,)),
    }
    email = {"Address": names.email}
    associations = (
        ("elementassociation", "Elements", f"Email:{names.email}", (_add("Emails", email),)),
        ("filterassociation", "Filters", "prefctl-trigger", ()),
    )
    for segment, key, value, needs in associations:
        plain = _update(*needs, _add("Consents", consent))
        linked = _update(*needs, _add("Consents", {**consent, key: [value]}))
        recipes[f"consent.{segment}.created"] = Recipe(
            _update(_edit("Consents", identity, **{key: [value]})), (plain,)
        )
        recipes[f"consent.{segment}.updated"] = Recipe(revoke, (linked,))
        recipes[f"consent.{segment}.deactivated"] = Recipe(
            _update(_edit("Consents", identity, **{key: []})), (linked,)
        )
    return recipes
