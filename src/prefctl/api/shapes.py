"""Reading the fields of a service's answer by their shape, for any deployment of the service.

The API layer checks the top of an answer (``as_resource``, ``as_page``); what is inside is the
service's business, and a real deployment may send a field in another shape than the spec's (an
object where a list is expected, a number for a text, a key missing). These helpers read such
fields for the table views without ever raising, by one rule:

- a JSON scalar (text, number, boolean) is shown wherever a single value is expected, a number
  or boolean where text is expected as its JSON text (``42``, ``true``);
- anything else (null, an object or a list where a single value is expected; a non-list where a
  list is expected; a non-object where an object is expected) reads as *nothing*: the cell stays
  empty, and items of the wrong shape in a list are left out.

``-o json`` does not use them: it prints the answer as it came.

    >>> objects_at({"Emails": [{"Address": "ada@example.com"}, "x@y"]}, "Emails")
    [{'Address': 'ada@example.com'}]
    >>> text({"a": 1}), text(42), texts_at({"Tags": "vip"}, "Tags")
    (None, '42', [])

Changes that rewrite what they read cannot be lenient (leaving out what they cannot read would
send it back deleted): ``required_id`` and ``list_to_edit`` raise ``PrefctlError`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefctl.errors import PrefctlError

__all__ = [
    "Scalar",
    "list_to_edit",
    "object_at",
    "object_to_edit",
    "objects_at",
    "required_id",
    "scalar",
    "text",
    "texts_at",
]

Scalar = str | int | float | bool


def scalar(value: Any) -> Scalar | None:
    """``value`` when it is a JSON scalar (text, number, boolean); None for anything else."""
    return value if isinstance(value, str | int | float) else None


def text(value: Any) -> str | None:
    """A scalar as text: a string as it is, a number or boolean as its JSON text; None for
    anything else (null, an object, a list)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


def object_at(resource: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The JSON object under ``key``; ``{}`` when it is missing or not an object."""
    value = resource.get(key)
    return value if isinstance(value, dict) else {}


def objects_at(resource: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """The JSON objects in the list under ``key``, items that are not objects left out; ``[]``
    when the value is missing or not a list."""
    value = resource.get(key)
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def texts_at(resource: Mapping[str, Any], key: str) -> list[str]:
    """The scalars in the list under ``key`` as ``text``, other items left out; ``[]`` when the
    value is missing or not a list."""
    value = resource.get(key)
    if not isinstance(value, list):
        return []
    return [shown for item in value if (shown := text(item)) is not None]


def required_id(resource: Mapping[str, Any], key: str, what: str) -> int:
    """The positive integer id under ``key`` (digits in a string are accepted), for a request
    that needs it; PrefctlError naming ``what`` the service answered when there is none."""
    value = resource.get(key)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PrefctlError(f"the REST API answered {what} without a numeric {key}")
    return value


def list_to_edit(resource: Mapping[str, Any], key: str, what: str) -> list[Any]:
    """A copy of the list under ``key`` (``[]`` when missing or null), for a change that rewrites
    it; PrefctlError naming ``what`` when it is something else."""
    value = resource.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PrefctlError(f"{what}: {key} in the service's answer is not a list; not changed")
    return list(value)


def object_to_edit(resource: Mapping[str, Any], key: str, what: str) -> dict[str, Any]:
    """``list_to_edit`` for a JSON object (``{}`` when missing or null)."""
    value = resource.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PrefctlError(f"{what}: {key} in the service's answer is not an object; not changed")
    return dict(value)
