"""Properties of the profile diff over generated valid profiles (hypothesis).

Profiles are drawn from small pools of values so that two draws share elements, then validated and
dumped through models/profile.py, so every input is a profile the emulator could store.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from prefctl.emulator.changes import ChangeEvent, changed_fields, events_for_change
from prefctl.models._base import dump_wire
from prefctl.models.profile import Profile
from prefctl.webhooks import catalog

Draw = Callable[[st.SearchStrategy[Any]], Any]


def _maybe(values: list[Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from([None, *values])


# Strategies are built once here: building them inside the composite dominates the run time.
def _ids(pool: list[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.sampled_from(pool), unique=True, max_size=2)


_PREFERENCE_IDS = _ids(
    [
        (program, filter_name, channel)
        for program in ("News", "Offers")
        for filter_name in (None, "Weekly", "Daily")
        for channel in ("Email", "SMS")
    ]
)
_PREFERENCE = st.fixed_dictionaries(
    {
        "Status": st.sampled_from(["OptIn", "OptOut"]),
        "IsArchived": st.booleans(),
        "Frequency": _maybe(["Weekly", "Monthly"]),
        "Attributes": st.sampled_from([[], [{"Key": "Source", "Value": "web"}]]),
    }
)
_EMAIL = (
    _ids(["a@x.io", "b@x.io", "c@x.io"]),
    st.fixed_dictionaries({"Type": _maybe(["Work", "Home"])}),
)
_PHONE = (
    _ids(["+15550100", "+15550101"]),
    st.fixed_dictionaries({"Type": _maybe(["Mobile"]), "IsMobile": st.booleans()}),
)
_ADDRESS = (
    _ids(["Home", "Work"]),
    st.fixed_dictionaries(
        {"Line1": st.sampled_from(["1 Main St", "2 Side St"]), "CountryCode": _maybe(["US", "FR"])}
    ),
)
_ALTERNATE_ID = (
    _ids(["Loyalty", "Crm"]),
    st.fixed_dictionaries({"Value": st.sampled_from(["1", "2"])}),
)
_CONSENT = (
    _ids(["Marketing", "Profiling", "Sharing"]),
    st.fixed_dictionaries(
        {
            "ConsentStatus": st.sampled_from(["Granted", "Denied", "Revoked", "NotSet"]),
            "ConsentVersion": _maybe(["v1", "v2"]),
            "Filters": st.lists(st.sampled_from(["Weekly", "Daily"]), unique=True),
        }
    ),
)
_CUSTOM_FIELD = (_ids(["A", "B", "C"]), st.fixed_dictionaries({"Value": _maybe([1, "x", True])}))
_GROUP = (_ids(["G1", "G2", "G3"]), st.fixed_dictionaries({"IsActive": st.booleans()}))
_NAME = st.none() | st.fixed_dictionaries(
    {
        key: _maybe([f"{key}1", f"{key}2"])
        for key in ("Prefix", "FirstName", "MiddleName", "LastName", "Suffix")
    }
)
_TAGS = st.lists(st.sampled_from(["vip", "new", "gold"]), unique=True)
_STANDARD_FIELDS = st.fixed_dictionaries(
    {
        "IsActive": st.booleans(),
        "CustomerType": _maybe(["Individual", "Business"]),
        "DefaultLocale": _maybe(["en-US", "fr-FR"]),
        "RegistrationStatus": _maybe(["Registered", "Guest"]),
        "CustomerName": _NAME,
    }
)


def _elements(
    draw: Draw,
    identity_key: str,
    kind: tuple[st.SearchStrategy[list[Any]], st.SearchStrategy[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Elements with distinct identities (drawn from a pool, so no rejection sampling)."""
    identities, fields = kind
    return [{identity_key: identity, **draw(fields)} for identity in draw(identities)]


def _preferences(draw: Draw) -> list[dict[str, Any]]:
    preferences = []
    for program, filter_name, channel in draw(_PREFERENCE_IDS):
        pref = {"Program": program, "Channel": channel, **draw(_PREFERENCE)}
        if filter_name is not None:
            pref["Filter"] = filter_name
        preferences.append(pref)
    return preferences


@st.composite
def profiles(draw: Draw) -> dict[str, Any]:
    """A valid profile, as dump_wire(Profile) stores it."""
    emails = _elements(draw, "Address", _EMAIL)
    phones = _elements(draw, "Number", _PHONE)
    addresses = _elements(draw, "Type", _ADDRESS)
    for contact in (*emails, *phones, *addresses):
        contact["Preferences"] = _preferences(draw)
    refs = (
        [f"Email:{e['Address']}" for e in emails]
        + [f"Phone:{p['Number']}" for p in phones]
        + [f"Address:{a['Type']}" for a in addresses]
    )
    consents = _elements(draw, "ConsentType", _CONSENT)
    for consent in consents:
        consent["Elements"] = [ref for ref in refs if draw(st.booleans())]
    raw = {
        "ProfileId": 1001,
        **draw(_STANDARD_FIELDS),
        "Emails": emails,
        "PhoneNumbers": phones,
        "Addresses": addresses,
        "AlternateIds": _elements(draw, "Type", _ALTERNATE_ID),
        "ProfilePreferences": _preferences(draw),
        "Consents": consents,
        "CustomFields": _elements(draw, "Name", _CUSTOM_FIELD),
        "Groups": _elements(draw, "Name", _GROUP),
        "Tags": draw(_TAGS),
    }
    return dump_wire(Profile.model_validate(raw))


# No deadline: generation validates through pydantic, and a busy CI machine must not fail a test
# for being slow. 200 examples find the interplay of nested lists reliably in a few seconds.
_SETTINGS = settings(max_examples=200, deadline=None)


def _types(events: list[ChangeEvent]) -> list[str]:
    return [event.event_type for event in events]


@given(profiles())
@_SETTINGS
def test_update_same_profile_yields_no_events(profile: dict[str, Any]) -> None:
    touched = copy.deepcopy(profile)
    touched["Edited"] = {"ModifiedDate": "2026-11-21T19:20:30.123Z", "ModifiedBy": "bot"}
    assert events_for_change("update", profile, copy.deepcopy(profile)) == []
    assert events_for_change("update", profile, touched) == []


@given(profiles(), profiles())
@_SETTINGS
def test_create_and_replace_yield_exactly_one_event(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    assert _types(events_for_change("create", None, new)) == ["profile.created"]
    assert _types(events_for_change("replace", old, new)) == ["profile.replaced"]
    assert events_for_change("import", old, new) == []


@given(profiles(), profiles())
@_SETTINGS
def test_update_events_are_catalog_types_with_previous_data_exactly_where_marked(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    events = events_for_change("update", old, new)
    assert bool(events) == bool(changed_fields(old, new))
    if events:
        assert _types(events[:2]) == ["profile.updated", "profile.updatedfull"]
        assert events[1].data == new
    for event in events:
        entry = catalog.event_type(event.event_type)
        assert event.entity == entry.entity
        assert (event.previous_data is not None) is entry.has_previous_data, event
        if catalog.filter_key(event.entity) is None:
            assert event.filter_values == ()
    assert _types(events).count("profile.updated") == (1 if events else 0)


def _reconstructed(old: dict[str, Any], events: list[ChangeEvent]) -> dict[str, Any]:
    """Memberships and values of ``old`` with the element events applied one by one."""
    state = _state(old)
    groups = {name: True for name in state["groups"]}
    for event in events:
        name, data = event.event_type, event.data
        if name.startswith("contacts.") and name != "contacts.customertype.updated":
            list_key = _CONTACT_KEYS[name.split(".")[1]]
            identity_key = _IDENTITY[list_key]
            identity = data[identity_key]
            if name.endswith(".deleted"):
                del state[list_key][identity]
            else:
                state[list_key][identity] = {k: v for k, v in data.items() if k != "Preferences"}
        elif name == "contacts.customertype.updated" or name.startswith("standardfield."):
            state["fields"].update(data)
        elif name.startswith("preference."):
            key = (data["Contact"], data["Program"], data.get("Filter"), data["Channel"])
            if data["IsArchived"]:
                state["preferences"].pop(key, None)
            else:
                state["preferences"][key] = data["Status"]
        elif name in ("consent.added", "consent.updated"):
            state["consents"][data["ConsentType"]] = data.get("ConsentStatus")
        elif name == "consent.deactivated":
            del state["consents"][data["ConsentType"]]
        elif ".elementassociation." in name or ".filterassociation." in name:
            member = (data["ConsentType"], data.get("Element"), data.get("Filter"))
            if name.endswith(".deactivated"):
                state["associations"].discard(member)
            else:
                state["associations"].add(member)
        elif name.startswith("customfield."):
            if name.endswith(".deleted"):
                del state["custom"][data["Name"]]
            else:
                state["custom"][data["Name"]] = data.get("Value")
        elif name.startswith("group."):
            groups[data["Name"]] = data["IsActive"]
        elif name.startswith("tag."):
            (state["tags"].add if name == "tag.added" else state["tags"].discard)(data["Tag"])
    # Inactive groups are not distinguishable from absent ones by events (no group.deleted).
    state["groups"] = {name for name, active in groups.items() if active}
    return state


_CONTACT_KEYS = {
    "email": "Emails",
    "phone": "PhoneNumbers",
    "address": "Addresses",
    "alternateid": "AlternateIds",
}
_IDENTITY = {
    "Emails": "Address",
    "PhoneNumbers": "Number",
    "Addresses": "Type",
    "AlternateIds": "Type",
}


def _state(profile: dict[str, Any]) -> dict[str, Any]:
    name = profile.get("CustomerName") or {}
    preferences = {}
    holders = [(None, profile)] + [
        (f"{kind}:{contact[_IDENTITY[key]]}", contact)
        for key, kind in (("Emails", "Email"), ("PhoneNumbers", "Phone"), ("Addresses", "Address"))
        for contact in profile.get(key, [])
    ]
    for location, holder in holders:
        for pref in holder.get("ProfilePreferences" if location is None else "Preferences", []):
            if not pref["IsArchived"]:
                key = (location, pref["Program"], pref.get("Filter"), pref["Channel"])
                preferences[key] = pref["Status"]
    return {
        **{
            key: {
                item[_IDENTITY[key]]: {k: v for k, v in item.items() if k != "Preferences"}
                for item in profile.get(key, [])
            }
            for key in _IDENTITY
        },
        "fields": {
            "CustomerType": profile.get("CustomerType"),
            "DefaultLocale": profile.get("DefaultLocale"),
            "RegistrationStatus": profile.get("RegistrationStatus"),
            **{
                part: name.get(part)
                for part in ("Prefix", "FirstName", "MiddleName", "LastName", "Suffix")
            },
        },
        "preferences": preferences,
        "consents": {c["ConsentType"]: c.get("ConsentStatus") for c in profile.get("Consents", [])},
        "associations": {
            (c["ConsentType"], element, None)
            for c in profile.get("Consents", [])
            for element in c.get("Elements", [])
        }
        | {
            (c["ConsentType"], None, name)
            for c in profile.get("Consents", [])
            for name in c.get("Filters", [])
        },
        "custom": {f["Name"]: f.get("Value") for f in profile.get("CustomFields", [])},
        "groups": {g["Name"] for g in profile.get("Groups", []) if g["IsActive"]},
        "tags": set(profile.get("Tags", [])),
    }


@given(profiles(), profiles())
@_SETTINGS
def test_update_applying_element_events_to_old_reconstructs_new(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    events = events_for_change("update", old, new)
    assert _reconstructed(old, events) == _state(new)


@given(profiles(), profiles())
@_SETTINGS
def test_update_additions_one_way_are_removals_the_other_way(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    forward = _types(events_for_change("update", old, new))
    backward = _types(events_for_change("update", new, old))
    for kind in ("email", "phone", "address", "alternateid"):
        assert forward.count(f"contacts.{kind}.added") == backward.count(f"contacts.{kind}.deleted")
    assert forward.count("customfield.added") == backward.count("customfield.deleted")
    assert forward.count("tag.added") == backward.count("tag.deleted")
    assert forward.count("consent.added") == backward.count("consent.deactivated")
