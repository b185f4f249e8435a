"""Subscription selections against events: event type, entity, filter key and wildcard."""

from __future__ import annotations

import json
from typing import Any

import pytest

from prefctl.emulator.changes import ChangeEvent
from prefctl.emulator.matching import matches, selection_matches, selector_for
from prefctl.models._base import dump_wire
from prefctl.models.subscription import EventSelection
from prefctl.webhooks import catalog


def _event(event_type: str, *filter_values: str) -> ChangeEvent:
    return ChangeEvent(
        event_type=event_type,
        entity=catalog.entity_of(event_type),
        data={},
        filter_values=filter_values,
    )


def test_matches_global_entity_same_type_selected() -> None:
    selection = {"Entity": "Tags", "EventType": "tag.added"}
    assert matches([selection], _event("tag.added"))
    assert not matches([selection], _event("tag.deleted"))


def test_matches_any_selection_of_the_list_suffices() -> None:
    selections: list[dict[str, Any]] = [
        {"Entity": "Profile", "EventType": "profile.created"},
        {"Entity": "Groups", "EventType": "group.added", "Groups": ["Beta"]},
    ]
    assert matches(selections, _event("group.added", "Beta"))
    assert matches(selections, _event("profile.created"))
    assert not matches(selections, _event("group.added", "Alpha"))


def test_matches_empty_selection_list_selects_nothing() -> None:
    assert not matches([], _event("profile.created"))


@pytest.mark.parametrize(
    ("event_type", "key", "wildcard", "value"),
    [
        ("preference.updated", "Filters", "AllFilters", "Weekly"),
        ("consent.filterassociation.created", "ConsentTypes", "AllConsents", "Marketing"),
        ("contacts.email.added", "ContactTypes", "AllContactTypes", "Work"),
        ("group.deactivated", "Groups", "AllGroups", "Beta"),
        ("customfield.updated", "CustomFields", "AllCustomFields", "ShoeSize"),
    ],
)
def test_matches_filtered_entity_listed_value_or_wildcard_selects(
    event_type: str, key: str, wildcard: str, value: str
) -> None:
    entity = catalog.entity_of(event_type)
    listed = {"Entity": entity, "EventType": event_type, key: ["Other", value]}
    other = {"Entity": entity, "EventType": event_type, key: ["Other"]}
    everything = {"Entity": entity, "EventType": event_type, key: [wildcard]}
    assert matches([listed], _event(event_type, value))
    assert not matches([other], _event(event_type, value))
    assert matches([everything], _event(event_type, value))
    # An event without filter values (e.g. a preference with no Filter) needs the wildcard.
    assert not matches([listed], _event(event_type))
    assert matches([everything], _event(event_type))


def test_matches_event_with_several_filter_values_needs_one_listed() -> None:
    selection = {
        "Entity": "Contacts",
        "EventType": "contacts.email.updated",
        "ContactTypes": ["Work"],
    }
    # The email moved from Personal to Work: both types relate to the event.
    assert matches([selection], _event("contacts.email.updated", "Personal", "Work"))


def test_matches_filter_key_of_another_entity_is_not_consulted() -> None:
    selection = {
        "Entity": "Preferences",
        "EventType": "preference.added",
        "Groups": ["AllGroups"],
        "Filters": ["X"],
    }
    assert not matches([selection], _event("preference.added", "Weekly"))


def test_matches_filtered_selection_without_key_selects_everything() -> None:
    selection = {"Entity": "Consents", "EventType": "consent.added"}
    assert matches([selection], _event("consent.added", "Marketing"))


def test_matches_wrong_entity_does_not_select() -> None:
    selection = {"Entity": "Profile", "EventType": "tag.added"}
    assert not selection_matches(selection, _event("tag.added"))


def test_matches_selection_without_entity_uses_the_type_entity() -> None:
    assert selection_matches({"EventType": "tag.added"}, _event("tag.added"))


def test_matches_model_dumped_selection_with_filled_wildcard_selects() -> None:
    selection = EventSelection.model_validate({"Entity": "Groups", "EventType": "group.added"})
    assert matches([dump_wire(selection)], _event("group.added", "Anything"))


def test_selector_matches_exactly_like_matches() -> None:
    from prefctl.emulator.changes import ChangeEvent
    from prefctl.emulator.matching import Selector, matches

    selections: list[dict[str, Any]] = [
        {"Entity": "Preferences", "EventType": "preference.added", "Filters": ["Weekly"]},
        {"Entity": "Tags", "EventType": "tag.added"},
    ]
    events = [
        ChangeEvent("preference.added", "Preferences", {}, None, ("Weekly",)),
        ChangeEvent("preference.added", "Preferences", {}, None, ("Daily",)),
        ChangeEvent("tag.added", "Tags", {}, None, ()),
        ChangeEvent("tag.deleted", "Tags", {}, None, ()),
    ]
    selector = Selector(selections)
    assert [selector.matches(e) for e in events] == [matches(selections, e) for e in events]
    assert [selector.matches(e) for e in events] == [True, False, True, False]


def test_selector_agrees_with_matches_for_every_catalog_type_and_filter_shape() -> None:
    # Selector answers unfiltered selections from a set; it must say what matches() says.
    values = ("Weekly", "Other")
    for event_type in catalog.EVENT_TYPES:
        entity = catalog.entity_of(event_type)
        key = catalog.filter_key(entity)
        shapes: list[list[dict[str, Any]]] = [
            [{"Entity": entity, "EventType": event_type}],
            [{"EventType": event_type}],
            [{"Entity": "Profile" if entity != "Profile" else "Tags", "EventType": event_type}],
            [{"Entity": entity, "EventType": "profile.created"}],
        ]
        if key is not None:
            shapes += [
                [{"Entity": entity, "EventType": event_type, key.name: ["Weekly"]}],
                [{"Entity": entity, "EventType": event_type, key.name: [key.wildcard]}],
                [
                    {"Entity": entity, "EventType": event_type, key.name: ["Nope"]},
                    {"Entity": entity, "EventType": event_type, key.name: ["Other"]},
                ],
            ]
        for selections in shapes:
            selector = selector_for(json.dumps(selections))
            for event in (_event(event_type), *(_event(event_type, v) for v in values)):
                assert selector.matches(event) == matches(selections, event), (selections, event)
