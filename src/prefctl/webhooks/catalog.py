"""The event catalog: every event type of the service, its entity and its filter key.

Each event type belongs to one entity (spec "Events → Event types by entity"). A subscription
selects event types; for five entities it also narrows them with a filter list:

    Entity          filter key       wildcard
    Preferences     Filters          AllFilters
    Consents        ConsentTypes     AllConsents
    Contacts        ContactTypes     AllContactTypes
    Groups          Groups           AllGroups
    CustomFields    CustomFields     AllCustomFields
    Profile, StandardFields, Tags: no filter key (global)

``has_previous_data`` marks the types whose notifications carry ``PreviousData``: every event of
standard fields, custom fields, customer type, contacts and alternate ids (spec, envelope:
"present for Standard Field, Custom Field, Customer Type, Contact and AlternateId events"). It
is an empty object where nothing existed before (``*.added``).

This module is imported by ``prefctl events types`` and by the dispatcher, so it holds plain data
(no pydantic) and is cheap to import.

>>> entity_of("contacts.email.added")
'Contacts'
>>> filter_key("Preferences")
FilterKey(name='Filters', wildcard='AllFilters')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "ALL_TYPES",
    "ENTITIES",
    "EVENT_TYPES",
    "FILTER_KEYS",
    "NAME_PARTS",
    "EventType",
    "FilterKey",
    "entity_of",
    "event_type",
    "filter_key",
    "is_event_type",
    "types_for",
]

ENTITIES: tuple[str, ...] = (
    "Profile",
    "Preferences",
    "Consents",
    "Contacts",
    "StandardFields",
    "CustomFields",
    "Groups",
    "Tags",
)


@dataclass(frozen=True, slots=True)
class EventType:
    """One event type: its wire name, entity, whether it carries PreviousData, what it means."""

    name: str
    entity: str
    has_previous_data: bool
    description: str


@dataclass(frozen=True, slots=True)
class FilterKey:
    """The subscription key that narrows an entity's events, and the value selecting all."""

    name: str
    wildcard: str


FILTER_KEYS: Mapping[str, FilterKey] = MappingProxyType(
    {
        "Preferences": FilterKey("Filters", "AllFilters"),
        "Consents": FilterKey("ConsentTypes", "AllConsents"),
        "Contacts": FilterKey("ContactTypes", "AllContactTypes"),
        "Groups": FilterKey("Groups", "AllGroups"),
        "CustomFields": FilterKey("CustomFields", "AllCustomFields"),
    }
)

# CustomerName parts: (event name segment, wire field) for standardfield.<segment>.<action>.
NAME_PARTS: tuple[tuple[str, str], ...] = (
    ("prefix", "Prefix"),
    ("firstname", "FirstName"),
    ("middlename", "MiddleName"),
    ("lastname", "LastName"),
    ("suffix", "Suffix"),
)


def _contact_types() -> list[EventType]:
    kinds = (
        ("email", "an email address"),
        ("phone", "a phone number"),
        ("address", "a postal address"),
        ("alternateid", "an alternate id"),
    )
    types = []
    for segment, what in kinds:
        types += [
            EventType(f"contacts.{segment}.added", "Contacts", True, f"{what} was added"),
            EventType(f"contacts.{segment}.updated", "Contacts", True, f"{what} was changed"),
            EventType(f"contacts.{segment}.deleted", "Contacts", True, f"{what} was removed"),
        ]
    types.append(
        EventType("contacts.customertype.updated", "Contacts", True, "the customer type changed")
    )
    return types


def _standard_field_types() -> list[EventType]:
    types = [
        EventType(
            "standardfield.defaultlocale.updated",
            "StandardFields",
            True,
            "the default locale changed",
        ),
        EventType(
            "standardfield.registrationstatus.updated",
            "StandardFields",
            True,
            "the registration status changed",
        ),
    ]
    for segment, field in NAME_PARTS:
        types += [
            EventType(f"standardfield.{segment}.added", "StandardFields", True, f"{field} set"),
            EventType(
                f"standardfield.{segment}.updated", "StandardFields", True, f"{field} changed"
            ),
            EventType(
                f"standardfield.{segment}.deleted", "StandardFields", True, f"{field} cleared"
            ),
        ]
    return types


def _consent_types() -> list[EventType]:
    types = [
        EventType("consent.added", "Consents", False, "a consent type was added to the profile"),
        EventType("consent.updated", "Consents", False, "a consent's status or terms changed"),
        EventType("consent.deactivated", "Consents", False, "a consent was removed"),
    ]
    for kind, what in (("element", "a contact"), ("filter", "a filter")):
        types += [
            EventType(
                f"consent.{kind}association.created",
                "Consents",
                False,
                f"{what} was associated with a consent",
            ),
            EventType(
                f"consent.{kind}association.updated",
                "Consents",
                False,
                f"the consent status or version of {what} association changed",
            ),
            EventType(
                f"consent.{kind}association.deactivated",
                "Consents",
                False,
                f"{what} association was removed from a consent",
            ),
        ]
    return types


def _all_types() -> tuple[EventType, ...]:
    profile = [
        EventType("profile.created", "Profile", False, "a profile was created (whole profile)"),
        EventType("profile.replaced", "Profile", False, "a PUT replaced the profile (whole)"),
        EventType("profile.deactivated", "Profile", False, "the profile was deactivated"),
        EventType("profile.reactivated", "Profile", False, "the profile was reactivated"),
        EventType("profile.deleted", "Profile", False, "the profile was deleted"),
        EventType("profile.updated", "Profile", False, "the profile changed (changed fields)"),
        EventType("profile.updatedfull", "Profile", False, "the profile changed (whole profile)"),
    ]
    preferences = [
        EventType("preference.added", "Preferences", False, "a preference was added"),
        EventType("preference.updated", "Preferences", False, "a preference changed"),
        EventType("preference.archived", "Preferences", False, "a preference was archived"),
    ]
    custom_fields = [
        EventType("customfield.added", "CustomFields", True, "a custom field was set"),
        EventType("customfield.updated", "CustomFields", True, "a custom field's value changed"),
        EventType("customfield.deleted", "CustomFields", True, "a custom field was removed"),
    ]
    groups = [
        EventType("group.added", "Groups", False, "the profile joined a group"),
        EventType("group.updated", "Groups", False, "a group membership was reactivated"),
        EventType("group.deactivated", "Groups", False, "a group membership was deactivated"),
    ]
    tags = [
        EventType("tag.added", "Tags", False, "a tag was added"),
        EventType("tag.deleted", "Tags", False, "a tag was removed"),
    ]
    return (
        *profile,
        *preferences,
        *_consent_types(),
        *_contact_types(),
        *_standard_field_types(),
        *custom_fields,
        *groups,
        *tags,
    )


ALL_TYPES: tuple[EventType, ...] = _all_types()
EVENT_TYPES: Mapping[str, EventType] = MappingProxyType({t.name: t for t in ALL_TYPES})
_BY_ENTITY: Mapping[str, tuple[EventType, ...]] = MappingProxyType(
    {entity: tuple(t for t in ALL_TYPES if t.entity == entity) for entity in ENTITIES}
)


def is_event_type(name: str) -> bool:
    """Whether ``name`` is an event type of the catalog (exact, lowercase wire name)."""
    return name in EVENT_TYPES


def event_type(name: str) -> EventType:
    """The catalog entry of ``name``; raises ``KeyError`` for an unknown type."""
    try:
        return EVENT_TYPES[name]
    except KeyError:
        raise KeyError(f"unknown event type {name!r}") from None


def entity_of(name: str) -> str:
    """The entity an event type belongs to; raises ``KeyError`` for an unknown type."""
    return event_type(name).entity


def types_for(entity: str) -> tuple[EventType, ...]:
    """The event types of one entity, in catalog order; raises ``KeyError`` for an unknown one."""
    try:
        return _BY_ENTITY[entity]
    except KeyError:
        raise KeyError(
            f"unknown entity {entity!r}; expected one of {', '.join(ENTITIES)}"
        ) from None


def filter_key(entity: str) -> FilterKey | None:
    """The subscription filter key of ``entity``, or None when its events are global."""
    if entity not in _BY_ENTITY:
        raise KeyError(f"unknown entity {entity!r}; expected one of {', '.join(ENTITIES)}")
    return FILTER_KEYS.get(entity)
