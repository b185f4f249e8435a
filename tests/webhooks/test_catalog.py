"""The event catalog against the spec's "Event types by entity" table and docs/webhooks.md."""

from __future__ import annotations

import subprocess
import sys

import pytest

from prefctl.webhooks import catalog

# The spec table, copied as written (the StandardFields row expands "for each of prefix, …").
SPEC_TABLE = {
    "Profile": "profile.created, profile.replaced, profile.deactivated, profile.reactivated, "
    "profile.deleted, profile.updated, profile.updatedfull",
    "Preferences": "preference.added, preference.updated, preference.archived",
    "Consents": "consent.added, consent.updated, consent.deactivated, "
    "consent.elementassociation.created, consent.elementassociation.updated, "
    "consent.elementassociation.deactivated, consent.filterassociation.created, "
    "consent.filterassociation.updated, consent.filterassociation.deactivated",
    "Contacts": "contacts.email.added, contacts.email.updated, contacts.email.deleted, "
    "contacts.phone.added, contacts.phone.updated, contacts.phone.deleted, "
    "contacts.address.added, contacts.address.updated, contacts.address.deleted, "
    "contacts.alternateid.added, contacts.alternateid.updated, contacts.alternateid.deleted, "
    "contacts.customertype.updated",
    "StandardFields": "standardfield.defaultlocale.updated, "
    "standardfield.registrationstatus.updated, "
    + ", ".join(
        f"standardfield.{part}.{action}"
        for part in ("prefix", "firstname", "middlename", "lastname", "suffix")
        for action in ("added", "updated", "deleted")
    ),
    "CustomFields": "customfield.added, customfield.updated, customfield.deleted",
    "Groups": "group.added, group.updated, group.deactivated",
    "Tags": "tag.added, tag.deleted",
}


def _spec_names(entity: str) -> list[str]:
    return [name.strip() for name in SPEC_TABLE[entity].split(",")]


@pytest.mark.parametrize(
    ("entity", "count"),
    [
        ("Profile", 7),
        ("Preferences", 3),
        ("Consents", 9),
        ("Contacts", 13),
        ("StandardFields", 17),
        ("CustomFields", 3),
        ("Groups", 3),
        ("Tags", 2),
    ],
)
def test_types_for_each_entity_matches_spec_table(entity: str, count: int) -> None:
    names = [t.name for t in catalog.types_for(entity)]
    assert len(names) == count
    assert sorted(names) == sorted(_spec_names(entity))


def test_all_types_every_spec_type_once_and_nothing_else() -> None:
    spec = [name for entity in SPEC_TABLE for name in _spec_names(entity)]
    names = [t.name for t in catalog.ALL_TYPES]
    assert len(names) == len(set(names)) == 57
    assert set(names) == set(spec)


def test_entities_are_the_spec_entities_in_table_order() -> None:
    assert tuple(SPEC_TABLE) == catalog.ENTITIES


def test_has_previous_data_on_every_event_of_the_spec_entities() -> None:
    # Spec, envelope: "PreviousData | ... present for Standard Field, Custom Field, Customer
    # Type, Contact and AlternateId events" -- added ones included.
    expected = {
        t.name
        for t in catalog.ALL_TYPES
        if t.entity in ("StandardFields", "CustomFields", "Contacts")
    }
    marked = {t.name for t in catalog.ALL_TYPES if t.has_previous_data}
    assert marked == expected
    assert len(marked) == 33
    assert {"contacts.customertype.updated", "contacts.alternateid.added"} <= marked
    assert {"contacts.email.added", "standardfield.firstname.added", "customfield.added"} <= marked


@pytest.mark.parametrize(
    ("entity", "key", "wildcard"),
    [
        ("Preferences", "Filters", "AllFilters"),
        ("Consents", "ConsentTypes", "AllConsents"),
        ("Contacts", "ContactTypes", "AllContactTypes"),
        ("Groups", "Groups", "AllGroups"),
        ("CustomFields", "CustomFields", "AllCustomFields"),
    ],
)
def test_filter_key_filtered_entity_returns_key_and_wildcard(
    entity: str, key: str, wildcard: str
) -> None:
    assert catalog.filter_key(entity) == catalog.FilterKey(key, wildcard)


@pytest.mark.parametrize("entity", ["Profile", "StandardFields", "Tags"])
def test_filter_key_global_entity_returns_none(entity: str) -> None:
    assert catalog.filter_key(entity) is None


def test_entity_of_known_type_returns_its_entity() -> None:
    assert catalog.entity_of("contacts.email.added") == "Contacts"
    assert catalog.entity_of("standardfield.suffix.deleted") == "StandardFields"
    assert catalog.entity_of("consent.filterassociation.created") == "Consents"


def test_entity_of_unknown_type_raises_key_error_naming_it() -> None:
    with pytest.raises(KeyError, match=r"contacts\.fax\.added"):
        catalog.entity_of("contacts.fax.added")


def test_types_for_unknown_entity_raises_key_error_listing_entities() -> None:
    with pytest.raises(KeyError, match="Preferences"):
        catalog.types_for("Preference")
    with pytest.raises(KeyError):
        catalog.filter_key("Nope")


def test_is_event_type_is_exact_and_case_sensitive() -> None:
    assert catalog.is_event_type("tag.added")
    assert not catalog.is_event_type("Tag.Added")
    assert not catalog.is_event_type("subscription.validation")


def test_event_type_entries_are_immutable() -> None:
    entry = catalog.event_type("tag.added")
    with pytest.raises(AttributeError):
        entry.name = "tag.removed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        catalog.EVENT_TYPES["x"] = entry  # type: ignore[index]


def test_every_type_has_a_description() -> None:
    assert all(t.description for t in catalog.ALL_TYPES)


def test_catalog_import_does_not_load_pydantic() -> None:
    code = "import sys, prefctl.webhooks.catalog; print('pydantic' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
