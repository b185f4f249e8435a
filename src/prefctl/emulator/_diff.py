"""Building blocks of the profile diff: the ChangeEvent record and keyed-list comparison.

The rules live in ``changes.py`` (profile, standard fields, contacts) and ``_element_changes.py``
(preferences, consents, custom fields, groups, tags); ``changes.py`` documents all of them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prefctl.webhooks import catalog

__all__ = [
    "DEFAULTS",
    "ChangeEvent",
    "canonical",
    "canonical_member",
    "changed_keys",
    "diff_keyed",
    "is_empty",
    "keyed",
    "make_event",
    "same",
    "with_defaults",
]

WireDict = Mapping[str, Any]

# The models' defaults for fields whose absence is not "empty" (IsActive defaults to true), so a
# sparse dict and a full dump of the same profile compare equal. tests/emulator check them against
# models/profile.py.
DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "Profile": {"IsActive": True},
    "Email": {"IsDefault": False},
    "PhoneNumber": {"IsMobile": False, "IsDefault": False},
    "Address": {"IsDefault": False},
    "Preference": {"IsArchived": False},
    "Consent": {"ConsentStatus": "NotSet"},
    "Group": {"IsActive": True},
}


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One event a profile write produces, before it is addressed to any subscription.

    ``data`` and ``previous_data`` become the notification's Data and PreviousData (PascalCase);
    ``filter_values`` are what the entity's subscription filter key is matched against (filter
    names, consent types, contact types, group or custom field names; empty for global entities).
    """

    event_type: str
    entity: str
    data: dict[str, Any]
    previous_data: dict[str, Any] | None = None
    filter_values: tuple[str, ...] = field(default=())


def make_event(
    event_type: str,
    data: Mapping[str, Any],
    previous_data: Mapping[str, Any] | None = None,
    filter_values: Iterable[Any] = (),
) -> ChangeEvent:
    """A ChangeEvent with its entity from the catalog; copies the dicts, drops empty filters.

    A type the catalog marks ``has_previous_data`` always carries PreviousData: ``{}`` when
    nothing existed before (an added contact, custom field or name part)."""
    values = tuple(dict.fromkeys(str(v) for v in filter_values if v not in (None, "")))
    entry = catalog.event_type(event_type)
    if previous_data is None and entry.has_previous_data:
        previous_data = {}
    return ChangeEvent(
        event_type=event_type,
        entity=entry.entity,
        data=_copied(data),
        previous_data=None if previous_data is None else _copied(previous_data),
        filter_values=values,
    )


def _copied(data: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON-shaped mapping: new dicts and lists, the same scalars (several
    times faster than ``copy.deepcopy``, which the events of every write paid for)."""
    return {key: _copied_value(value) for key, value in data.items()}


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _copied_value(value: Any) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {key: _copied_value(item) for key, item in value.items()}
    if kind is list:
        return [_copied_value(item) for item in value]
    return copy.deepcopy(value)


def is_empty(value: Any) -> bool:
    """Missing, null and empty collections are the same value on the wire."""
    return value is None or value == [] or value == {}


def same(before: Any, after: Any) -> bool:
    """Whether two wire values are equal, with every empty value equal to every other."""
    return before == after or (is_empty(before) and is_empty(after))


def with_defaults(element: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """``element`` with nulls dropped and the model defaults of ``kind`` filled in."""
    filled = {key: value for key, value in element.items() if value is not None}
    for key, value in DEFAULTS.get(kind, {}).items():
        filled.setdefault(key, value)
    return filled


# The element kind of the items under each list key, for canonical().
_LIST_KINDS = {
    "Emails": "Email",
    "PhoneNumbers": "PhoneNumber",
    "Addresses": "Address",
    "ProfilePreferences": "Preference",
    "Preferences": "Preference",
    "Consents": "Consent",
    "Groups": "Group",
}


def canonical(value: Any, kind: str = "Profile") -> Any:
    """``value`` with defaults filled in and empty members dropped at every depth, so that two
    spellings of the same profile (sparse, or a full dump) compare equal."""
    if isinstance(value, Mapping):
        result = {}
        for key, item in with_defaults(value, kind).items():
            item = _canonical_item(key, item)
            if not is_empty(item):
                result[key] = item
        return result
    return value


def _canonical_item(key: str, item: Any) -> Any:
    """The canonical form of the member ``key`` of a mapping (before dropping it if empty)."""
    if isinstance(item, list):
        return [canonical(element, _LIST_KINDS.get(key, "")) for element in item]
    if isinstance(item, Mapping):
        return canonical(item, "")
    return item


def canonical_member(key: str, value: Any) -> Any:
    """``canonical(profile).get(key)`` for a profile whose ``key`` is ``value``, without
    canonicalizing the rest of the profile (None when the member would be dropped)."""
    if value is None:
        value = DEFAULTS["Profile"].get(key)
        if value is None:
            return None
    value = _canonical_item(key, value)
    return None if is_empty(value) else value


def keyed(
    items: Iterable[Mapping[str, Any]] | None, identity_key: str, kind: str
) -> dict[Any, Mapping[str, Any]]:
    """Elements (defaults filled) by their identity field, in list order; a repeated identity
    keeps the first element."""
    result: dict[Any, Mapping[str, Any]] = {}
    for item in items or ():
        result.setdefault(item.get(identity_key), with_defaults(item, kind))
    return result


def changed_keys(
    before: Mapping[str, Any], after: Mapping[str, Any], ignore: frozenset[str] = frozenset()
) -> set[str]:
    """The keys of two elements whose values differ (empty values all alike), minus ``ignore``."""
    keys = (before.keys() | after.keys()) - ignore
    return {key for key in keys if not same(before.get(key), after.get(key))}


def diff_keyed(
    old: Mapping[Any, Mapping[str, Any]], new: Mapping[Any, Mapping[str, Any]]
) -> Iterator[tuple[Any, Mapping[str, Any] | None, Mapping[str, Any] | None]]:
    """``(identity, before, after)`` for new elements in new order, then for removed ones."""
    for key, after in new.items():
        yield key, old.get(key), after
    for key, before in old.items():
        if key not in new:
            yield key, before, None
