"""Which subscriptions an event goes to: a subscription's selections against one event.

A subscription's ``Subscriptions`` list selects an event when one selection has the event's
``EventType`` (and, when given, its ``Entity``) and, for the five filtered entities, its filter
list (``Filters``, ``ConsentTypes``, ``ContactTypes``, ``Groups``, ``CustomFields``) holds the
entity's wildcard (``AllFilters``…) or one of the event's filter values. A filtered selection
without its key selects everything, as ``models/subscription.py`` would fill it with the wildcard.
Whether the subscription is Active and Succeeded is the caller's business.

>>> from prefctl.emulator.changes import events_for_change
>>> [event] = events_for_change("create", None, {"ProfileId": 7})
>>> matches([{"Entity": "Profile", "EventType": "profile.created"}], event)
True
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import orjson

from prefctl.webhooks import catalog

__all__ = ["MatchableEvent", "Selector", "matches", "selection_matches", "selector_for"]


class MatchableEvent(Protocol):
    """What matching needs of an event (``changes.ChangeEvent`` has it)."""

    @property
    def event_type(self) -> str: ...

    @property
    def filter_values(self) -> tuple[str, ...]: ...


def selection_matches(selection: Mapping[str, Any], event: MatchableEvent) -> bool:
    """Whether one wire-shaped selection ``{Entity, EventType, <filter key>: [...]}`` selects
    ``event``."""
    if selection.get("EventType") != event.event_type:
        return False
    wanted = _wanted(selection, event.event_type)
    if wanted is _ANY or wanted is _NONE:
        return wanted is _ANY
    return not set(wanted).isdisjoint(event.filter_values)


def matches(selections: Iterable[Mapping[str, Any]], event: MatchableEvent) -> bool:
    """Whether any selection of a subscription's ``Subscriptions`` list selects ``event``."""
    return any(selection_matches(selection, event) for selection in selections)


class Selector:
    """A subscription's selections indexed by EventType, for matching many events in a row
    (the write path checks every event of a change against every subscription).

    Event types that one of the selections takes whatever the event's filter values (global
    entities, a wildcard or no filter list) are answered from a set; only filtered selections
    look at the event.
    """

    __slots__ = ("_always", "_by_type")

    def __init__(self, selections: Iterable[Mapping[str, Any]]) -> None:
        self._by_type: dict[str, list[Mapping[str, Any]]] = {}
        self._always: set[str] = set()
        for selection in selections:
            event_type = str(selection.get("EventType"))
            if event_type in self._always:
                continue
            if _selects_any_filter(selection, event_type):
                self._always.add(event_type)
                self._by_type.pop(event_type, None)
            else:
                self._by_type.setdefault(event_type, []).append(selection)

    def matches(self, event: MatchableEvent) -> bool:
        if event.event_type in self._always:
            return True
        candidates = self._by_type.get(event.event_type)
        return candidates is not None and any(
            selection_matches(selection, event) for selection in candidates
        )


@functools.lru_cache(maxsize=1024)
def selector_for(selections_json: str) -> Selector:
    """The Selector of a stored ``Subscriptions`` list (JSON text), built once per distinct text:
    every write matches its events against every subscription, and the lists rarely change."""
    return Selector(orjson.loads(selections_json))


# What a selection wants of an event type's filter values: any, none (another entity, or a type
# that does not exist), or one of the listed values.
_ANY: Any = object()
_NONE: Any = object()


def _wanted(selection: Mapping[str, Any], event_type: str) -> Any:
    try:
        entity = catalog.entity_of(event_type)
    except KeyError:
        return _NONE  # no event has this type
    if selection.get("Entity", entity) != entity:
        return _NONE
    key = catalog.filter_key(entity)
    if key is None:
        return _ANY
    wanted = selection.get(key.name)
    return _ANY if wanted is None or key.wildcard in wanted else wanted


def _selects_any_filter(selection: Mapping[str, Any], event_type: str) -> bool:
    """Whether ``selection`` selects every event of ``event_type``, whatever its filter values."""
    return _wanted(selection, event_type) is _ANY
