"""Events for preferences, consents, custom fields, groups and tags (rules: see changes.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefctl.emulator._diff import (
    ChangeEvent,
    changed_keys,
    diff_keyed,
    keyed,
    make_event,
    with_defaults,
)

__all__ = [
    "consent_events",
    "custom_field_events",
    "group_events",
    "preference_events",
    "tag_events",
]

WireDict = Mapping[str, Any]

# Where preferences live: the profile itself, and each contact (profile key, ref kind, identity).
_CONTACT_HOLDERS = (
    ("Emails", "Email", "Address"),
    ("PhoneNumbers", "Phone", "Number"),
    ("Addresses", "Address", "Type"),
)
# A consent association's state: the consent terms it was given under.
_ASSOCIATION_STATE = ("ConsentStatus", "ConsentVersion")


def _preferences_by_location(profile: WireDict) -> dict[Any, dict[str, Any]]:
    """Every preference of the profile keyed by (contact ref or None, Program, Filter, Channel),
    as the event Data: the preference plus its ``Contact``."""
    located: list[tuple[str | None, Mapping[str, Any]]] = [
        (None, pref) for pref in profile.get("ProfilePreferences") or ()
    ]
    for list_key, kind, identity_key in _CONTACT_HOLDERS:
        for contact in profile.get(list_key) or ():
            ref = f"{kind}:{contact.get(identity_key)}"
            located += [(ref, pref) for pref in contact.get("Preferences") or ()]
    result: dict[Any, dict[str, Any]] = {}
    for location, pref in located:
        key = (location, pref.get("Program"), pref.get("Filter"), pref.get("Channel"))
        result.setdefault(key, {**with_defaults(pref, "Preference"), "Contact": location})
    return result


def _archived(pref: Mapping[str, Any]) -> bool:
    return pref.get("IsArchived") is True


def preference_events(old: WireDict, new: WireDict) -> list[ChangeEvent]:
    """preference.added / updated / archived, on the profile and on its contacts."""
    events = []
    before_all = _preferences_by_location(old)
    after_all = _preferences_by_location(new)
    for _, before, after in diff_keyed(before_all, after_all):
        if before is None and after is not None:
            events.append(make_event("preference.added", after, None, (after.get("Filter"),)))
        elif after is None and before is not None:
            if not _archived(before):
                archived = {**before, "IsArchived": True}
                events.append(
                    make_event("preference.archived", archived, None, (before.get("Filter"),))
                )
        elif before is not None and after is not None and changed_keys(before, after):
            kind = "archived" if _archived(after) and not _archived(before) else "updated"
            events.append(make_event(f"preference.{kind}", after, None, (after.get("Filter"),)))
    return events


def _association(consent: Mapping[str, Any], kind: str, value: str) -> dict[str, Any]:
    data = {key: consent.get(key) for key in ("ConsentType", "ConsentStatus", "ConsentVersion")}
    return {**{key: item for key, item in data.items() if item is not None}, kind: value}


def consent_events(old: WireDict, new: WireDict) -> list[ChangeEvent]:
    """consent.added / updated / deactivated and their element and filter associations."""
    events = []
    before_all = keyed(old.get("Consents"), "ConsentType", "Consent")
    after_all = keyed(new.get("Consents"), "ConsentType", "Consent")
    for consent_type, before, after in diff_keyed(before_all, after_all):
        filters = (consent_type,)
        if before is None and after is not None:
            events.append(make_event("consent.added", after, None, filters))
        elif after is None and before is not None:
            events.append(make_event("consent.deactivated", before, None, filters))
        elif (
            before is not None
            and after is not None
            # Elements and Filters changes are association events, not consent updates.
            and changed_keys(before, after, ignore=frozenset({"Elements", "Filters"}))
        ):
            events.append(make_event("consent.updated", after, None, filters))
        for kind, list_key, segment in (
            ("Element", "Elements", "elementassociation"),
            ("Filter", "Filters", "filterassociation"),
        ):
            events += _association_events(before, after, kind, list_key, segment)
    return events


def _association_events(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    kind: str,
    list_key: str,
    segment: str,
) -> list[ChangeEvent]:
    """Events for one consent's Elements or Filters; a missing consent has no associations."""
    empty: Mapping[str, Any] = {}
    before_consent, after_consent = before or empty, after or empty
    before_values = list(dict.fromkeys(before_consent.get(list_key) or ()))
    after_values = list(dict.fromkeys(after_consent.get(list_key) or ()))
    state_changed = before is not None and not changed_keys(
        before, after_consent, ignore=frozenset()
    ).isdisjoint(_ASSOCIATION_STATE)
    # A deactivated association reports the consent as it is now, or as it was when it is gone.
    current = after if after is not None else before_consent
    consent_type = (current.get("ConsentType"),)
    events = []
    for value in after_values:
        if value not in before_values:
            event_type = f"consent.{segment}.created"
        elif state_changed:
            event_type = f"consent.{segment}.updated"
        else:
            continue
        events.append(
            make_event(event_type, _association(current, kind, value), None, consent_type)
        )
    for value in before_values:
        if value not in after_values:
            data = _association(current, kind, value)
            events.append(make_event(f"consent.{segment}.deactivated", data, None, consent_type))
    return events


def custom_field_events(old: WireDict, new: WireDict) -> list[ChangeEvent]:
    """customfield.added / updated / deleted, by Name."""
    events = []
    before_all = keyed(old.get("CustomFields"), "Name", "CustomField")
    after_all = keyed(new.get("CustomFields"), "Name", "CustomField")
    for name, before, after in diff_keyed(before_all, after_all):
        if before is None and after is not None:
            events.append(make_event("customfield.added", after, None, (name,)))
        elif after is None and before is not None:
            events.append(make_event("customfield.deleted", {"Name": name}, before, (name,)))
        elif before is not None and after is not None and changed_keys(before, after):
            previous = {"Name": name, "Value": before.get("Value")}
            events.append(make_event("customfield.updated", after, previous, (name,)))
    return events


def _active(group: Mapping[str, Any]) -> bool:
    return group.get("IsActive") is not False


def group_events(old: WireDict, new: WireDict) -> list[ChangeEvent]:
    """group.added / updated / deactivated, by Name; IsActive false means deactivated."""
    events = []
    before_all = keyed(old.get("Groups"), "Name", "Group")
    after_all = keyed(new.get("Groups"), "Name", "Group")
    for name, before, after in diff_keyed(before_all, after_all):
        if before is None and after is not None:
            events.append(make_event("group.added", after, None, (name,)))
        elif after is None and before is not None:
            if _active(before):
                data = {**before, "IsActive": False}
                events.append(make_event("group.deactivated", data, None, (name,)))
        elif before is not None and after is not None and changed_keys(before, after):
            kind = "deactivated" if _active(before) and not _active(after) else "updated"
            events.append(make_event(f"group.{kind}", after, None, (name,)))
    return events


def tag_events(old: WireDict, new: WireDict) -> list[ChangeEvent]:
    """tag.added / tag.deleted, by value."""
    before = list(dict.fromkeys(old.get("Tags") or ()))
    after = list(dict.fromkeys(new.get("Tags") or ()))
    events = [make_event("tag.added", {"Tag": tag}) for tag in after if tag not in before]
    events += [make_event("tag.deleted", {"Tag": tag}) for tag in before if tag not in after]
    return events
