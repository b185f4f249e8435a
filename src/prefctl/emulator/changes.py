"""Turn a profile write into the events it produces (spec "Events → Rules" and envelope).

``events_for_change(operation, old, new)`` is pure: it reads wire-shaped (PascalCase) profile dicts,
as ``dump_wire(Profile)`` makes them, and returns ``ChangeEvent``s in a stable order. It never sees
the store, the clock or subscriptions; ``matching.matches`` decides who receives what.

Operations
    create → profile.created; replace (PUT) → profile.replaced; both carry the whole new profile
    and nothing else is emitted. deactivate / reactivate / delete → their one profile event with
    ``{ProfileId, IsActive, ReasonCode}`` (delete: ``{ProfileId, ReasonCode}``), read from ``new``
    when given, else ``old``. import → nothing. update → nothing when nothing changed; otherwise
    profile.updated ``{ProfileId, ChangedFields: [top-level keys]}``, profile.updatedfull (whole new
    profile; left out with ``updated_full=False``, the account setting EmitUpdatedFull=false),
    then one event per changed element, in the order of the sections below.

What counts as a change
    ``ProfileId`` and ``Edited`` are ignored (the service maintains them). A missing key, null and
    an empty list are the same value, and so are a missing field and its model default (IsActive
    true, IsDefault false…), so a sparse dict and its full dump compare equal. A change of list
    order alone yields profile.updated and profile.updatedfull but no element event.

Identities (what makes an element "the same" before and after)
    Emails by Address, PhoneNumbers by Number, Addresses by Type, AlternateIds by Type, Consents by
    ConsentType, CustomFields by Name, Groups by Name, Tags by value; a preference by its location
    (the profile, or a contact as a contact reference ``Email:<Address>``, ``Phone:<Number>``,
    ``Address:<Type>``) plus Program, Filter and Channel. Changing an identity (an email's Address)
    is a deletion and an addition. Identities are compared exactly; models/profile.py keeps them
    unique.

Data and PreviousData
    Elements appear with nulls left out and model defaults filled in. added: Data = the new
    element (PreviousData ``{}`` where the catalog marks the type). updated: Data = the whole new element, PreviousData = its identity plus the prior
    values of the fields that changed. deleted: Data = the identity, PreviousData = the whole old
    element. Disappearances without a delete type carry the element as it was, deactivated:
    consent.deactivated the old consent, group.deactivated ``{Name, IsActive: false}``,
    preference.archived the preference with ``IsArchived: true``. Standard fields and customer type: Data =
    ``{Field: new}``, PreviousData = ``{Field: old}`` (``standardfield.<part>.*`` use the
    CustomerName part, e.g. ``{"FirstName": "Ann"}``). Custom fields: ``{Name, Value}``. Tags:
    ``{"Tag": value}``. Preferences: the preference plus ``"Contact"`` (its contact reference, or
    null on the profile). Consent associations: ``{ConsentType, ConsentStatus, ConsentVersion,
    Element | Filter}`` (nulls left out). PreviousData is set exactly on the types the catalog
    marks.

Per-entity rules
    Contacts: added / updated (any field but Preferences changed) / deleted; customer type:
    contacts.customertype.updated on any change, including set and cleared.
    Standard fields: defaultlocale and registrationstatus: updated on any change; name parts: added
    (was unset), updated, deleted (cleared).
    Preferences: added; archived when IsArchived turns true or an unarchived preference disappears
    (also with its contact); updated for any other change, un-archiving included. An archived
    preference that disappears yields nothing.
    Consents: added / updated (a field other than Elements and Filters changed) / deactivated (the
    consent disappears). Each Elements and Filters entry is an association: created when it appears
    (also with a new consent), deactivated when it disappears (also with its consent), updated when
    the consent's ConsentStatus or ConsentVersion changes while it stays.
    Groups: added; deactivated when IsActive turns false or an active group disappears; updated
    when an inactive group turns active. Custom fields: added / updated / deleted. Tags: added /
    deleted.

Filter values (what subscription filters match, see matching.py)
    Preferences: the preference's Filter. Consents: the ConsentType. Contacts: the element's Type
    (old and new when it changed); customer type: the old and new CustomerType. Groups: Name.
    CustomFields: Name. Profile, StandardFields and Tags: none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

from prefctl.emulator._diff import (
    ChangeEvent,
    canonical_member,
    changed_keys,
    diff_keyed,
    is_empty,
    keyed,
    make_event,
    same,
)
from prefctl.emulator._element_changes import (
    consent_events,
    custom_field_events,
    group_events,
    preference_events,
    tag_events,
)
from prefctl.webhooks import catalog

__all__ = ["OPERATIONS", "ChangeEvent", "Operation", "changed_fields", "events_for_change"]

Operation = Literal["create", "replace", "update", "deactivate", "reactivate", "delete", "import"]
OPERATIONS: frozenset[str] = frozenset(get_args(Operation))

WireDict = Mapping[str, Any]

# Keys the service maintains itself; a write that only touches them changes nothing.
_IGNORED_KEYS = frozenset({"ProfileId", "Edited"})

# Contact lists: (profile key, event segment, identity key, element kind).
_CONTACT_LISTS = (
    ("Emails", "email", "Address", "Email"),
    ("PhoneNumbers", "phone", "Number", "PhoneNumber"),
    ("Addresses", "address", "Type", "Address"),
    ("AlternateIds", "alternateid", "Type", "AlternateId"),
)


def changed_fields(old: WireDict, new: WireDict) -> list[str]:
    """Top-level keys whose values differ, sorted; ``ProfileId`` and ``Edited`` never count."""
    # Member by member: a member equal as it is needs no canonical form (most are, in a PATCH).
    keys = (old.keys() | new.keys()) - _IGNORED_KEYS
    return sorted(
        key
        for key in keys
        if old.get(key) != new.get(key)
        and not same(canonical_member(key, old.get(key)), canonical_member(key, new.get(key)))
    )


def events_for_change(
    operation: Operation,
    old: WireDict | None,
    new: WireDict | None,
    *,
    updated_full: bool = True,
) -> list[ChangeEvent]:
    """The events a profile write produces; see the module docstring for every rule.
    ``updated_full`` False leaves profile.updatedfull out of an update's events.

    >>> [e.event_type for e in events_for_change("create", None, {"ProfileId": 1})]
    ['profile.created']
    """
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; expected one of {sorted(OPERATIONS)}")
    if operation == "import":
        return []
    if operation in ("create", "replace"):
        if new is None:
            raise ValueError(f"{operation} needs the new profile")
        return [make_event(f"profile.{operation}d", new)]
    if operation == "update":
        if old is None or new is None:
            raise ValueError("update needs the old and the new profile")
        return _update_events(old, new, updated_full=updated_full)
    profile = new if new is not None else old
    if profile is None:
        raise ValueError(f"{operation} needs the profile")
    return [_lifecycle_event(operation, profile)]


def _lifecycle_event(operation: str, profile: WireDict) -> ChangeEvent:
    data: dict[str, Any] = {"ProfileId": profile.get("ProfileId")}
    if operation != "delete":
        data["IsActive"] = operation == "reactivate"
    if operation != "reactivate" and profile.get("ReasonCode") is not None:
        data["ReasonCode"] = profile["ReasonCode"]
    return make_event(f"profile.{operation}d", data)


def _update_events(old: WireDict, new: WireDict, *, updated_full: bool) -> list[ChangeEvent]:
    fields = changed_fields(old, new)
    if not fields:
        return []
    profile_id = new.get("ProfileId", old.get("ProfileId"))
    events = [make_event("profile.updated", {"ProfileId": profile_id, "ChangedFields": fields})]
    if updated_full:
        events.append(make_event("profile.updatedfull", new))
    changed = frozenset(fields)
    for keys, section in _SECTIONS:
        # A section whose keys all compare equal (canonically, as ChangedFields does) has no
        # element that changed, so it is not diffed (most updates touch one or two sections).
        if not keys.isdisjoint(changed):
            events += section(old, new)
    return events


def _standard_field_events(old: WireDict, new: WireDict) -> list[ChangeEvent]:
    events = []
    for key, segment in (
        ("DefaultLocale", "defaultlocale"),
        ("RegistrationStatus", "registrationstatus"),
    ):
        before, after = old.get(key), new.get(key)
        if not same(before, after):
            events.append(
                make_event(f"standardfield.{segment}.updated", {key: after}, {key: before})
            )
    old_name = old.get("CustomerName") or {}
    new_name = new.get("CustomerName") or {}
    for segment, key in catalog.NAME_PARTS:
        before, after = old_name.get(key), new_name.get(key)
        if same(before, after):
            continue
        if is_empty(before):
            events.append(make_event(f"standardfield.{segment}.added", {key: after}))
        elif is_empty(after):
            events.append(
                make_event(f"standardfield.{segment}.deleted", {key: None}, {key: before})
            )
        else:
            events.append(
                make_event(f"standardfield.{segment}.updated", {key: after}, {key: before})
            )
    return events


def _contact_events(old: WireDict, new: WireDict) -> list[ChangeEvent]:
    events = []
    before_type, after_type = old.get("CustomerType"), new.get("CustomerType")
    if not same(before_type, after_type):
        events.append(
            make_event(
                "contacts.customertype.updated",
                {"CustomerType": after_type},
                {"CustomerType": before_type},
                (before_type, after_type),
            )
        )
    for list_key, segment, identity_key, kind in _CONTACT_LISTS:
        before_items = keyed(old.get(list_key), identity_key, kind)
        after_items = keyed(new.get(list_key), identity_key, kind)
        for identity, before, after in diff_keyed(before_items, after_items):
            identity_data = {identity_key: identity}
            if before is None and after is not None:
                events.append(
                    make_event(f"contacts.{segment}.added", after, None, (after.get("Type"),))
                )
            elif after is None and before is not None:
                events.append(
                    make_event(
                        f"contacts.{segment}.deleted", identity_data, before, (before.get("Type"),)
                    )
                )
            elif before is not None and after is not None:
                # A contact's preferences are elements of their own (preference.* events).
                changed = changed_keys(before, after, ignore=frozenset({"Preferences"}))
                if changed:
                    previous = {
                        **identity_data,
                        **{key: before.get(key) for key in sorted(changed)},
                    }
                    filter_values = (before.get("Type"), after.get("Type"))
                    events.append(
                        make_event(f"contacts.{segment}.updated", after, previous, filter_values)
                    )
    return events


_CONTACT_KEYS = frozenset(list_key for list_key, *_ in _CONTACT_LISTS)
# The element sections of an update, in event order, with the top-level keys each one reads
# (contact preferences live under the contact lists).
_SECTIONS: tuple[tuple[frozenset[str], Callable[[WireDict, WireDict], list[ChangeEvent]]], ...] = (
    (frozenset({"DefaultLocale", "RegistrationStatus", "CustomerName"}), _standard_field_events),
    (_CONTACT_KEYS | {"CustomerType"}, _contact_events),
    (_CONTACT_KEYS | {"ProfilePreferences"}, preference_events),
    (frozenset({"Consents"}), consent_events),
    (frozenset({"CustomFields"}), custom_field_events),
    (frozenset({"Groups"}), group_events),
    (frozenset({"Tags"}), tag_events),
)
