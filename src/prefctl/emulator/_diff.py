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
    """A ChangeEvent with its entity from the catalog; copies the dicts, drops empty filters."""
    values = tuple(dict.fromkeys(str(v) for v in filter_values if v not in (None, "")))
    return ChangeEvent(
        event_type=event_type,
        entity=catalog.entity_of(event_type),
        data=copy.deepcopy(dict(data)),
        previous_data=None if previous_data is None else copy.deepcopy(dict(previous_data)),
        filter_values=values,
    )


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
            if isinstance(item, list):
                item = [canonical(element, _LIST_KINDS.get(key, "")) for element in item]
            elif isinstance(item, Mapping):
                item = canonical(item, "")
            if not is_empty(item):
                result[key] = item
        return result
    return value


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
