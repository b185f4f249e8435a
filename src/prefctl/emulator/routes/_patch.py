"""JSON Patch (RFC 6902) and JSON Merge Patch (RFC 7396) on wire dicts — the server side of
``PATCH /profiles/{ProfileId}``.

Both are pure and never modify their input. ``apply_json_patch`` checks the whole document first
(``PatchDocumentError``: the request is malformed, 400), then applies the operations in order; an
operation that cannot apply — a path that does not exist, a failing ``test`` — raises
``PatchConflictError`` (409, RFC 5789 §2.2) and nothing is applied, as RFC 6902 §5 requires.

    >>> apply_json_patch({"Tags": ["a"]}, [{"op": "add", "path": "/Tags/-", "value": "b"}])
    {'Tags': ['a', 'b']}
    >>> apply_merge_patch({"CustomerName": {"FirstName": "Ann"}}, {"CustomerName": None})
    {}
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

__all__ = [
    "PatchConflictError",
    "PatchDocumentError",
    "apply_json_patch",
    "apply_merge_patch",
    "parse_pointer",
]

# Members each operation needs besides "op" and "path" (RFC 6902 §4).
_MEMBERS: dict[str, tuple[str, ...]] = {
    "add": ("value",),
    "remove": (),
    "replace": ("value",),
    "move": ("from",),
    "copy": ("from",),
    "test": ("value",),
}
# JSON's names of the kinds of values.
_KINDS: dict[type, str] = {
    bool: "boolean",
    str: "string",
    int: "number",
    float: "number",
    dict: "object",
    list: "array",
}
# Characters of a string member quoted in an error message at most.
_SHOWN_CHARS = 40


class PatchDocumentError(ValueError):
    """The patch document is malformed; ``field`` locates the fault (``[2].path``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class PatchConflictError(ValueError):
    """An operation cannot be applied to the current document (RFC 5789 "conflicting state")."""


def parse_pointer(pointer: str) -> list[str]:
    """The reference tokens of an RFC 6901 JSON Pointer: ``"/a~1b/0"`` → ``["a/b", "0"]``."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError("a JSON Pointer is empty or starts with '/'")
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def apply_json_patch(document: Any, operations: Any) -> Any:
    """``document`` with the RFC 6902 ``operations`` applied (a new value)."""
    checked = _check_document(operations)
    result = copy.deepcopy(document)
    for index, (op, path, source, value) in enumerate(checked):
        try:
            result = _apply(result, op, path, source, value)
        except PatchConflictError as exc:
            shown = _shown(path, source)
            raise PatchConflictError(f"operation {index} ({op} {shown}): {exc}") from None
    return result


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 §2: objects merge member by member, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = apply_merge_patch(result.get(name), value)
    return result


# -- the document ----------------------------------------------------------------------------------
Checked = tuple[str, list[str], list[str] | None, Any]


def _check_document(operations: Any) -> list[Checked]:
    if not isinstance(operations, list):
        raise PatchDocumentError("", "a JSON Patch is a JSON array of operations")
    checked: list[Checked] = []
    for index, operation in enumerate(operations):
        where = f"[{index}]"
        if not isinstance(operation, dict):
            raise PatchDocumentError(where, "an operation is a JSON object")
        op = operation.get("op")
        # A list or an object is no member of _MEMBERS, and cannot be looked up in it.
        if not isinstance(op, str) or op not in _MEMBERS:
            raise PatchDocumentError(f"{where}.op", _expected(f"one of {', '.join(_MEMBERS)}", op))
        path = _pointer(operation, "path", where)
        source = _pointer(operation, "from", where) if "from" in _MEMBERS[op] else None
        if "value" in _MEMBERS[op] and "value" not in operation:
            raise PatchDocumentError(f"{where}.value", f"is required by {op}")
        if op == "move" and source is not None and _is_prefix(source, path) and source != path:
            raise PatchDocumentError(
                f"{where}.from", "cannot move a value into one of its children"
            )
        checked.append((op, path, source, operation.get("value")))
    return checked


def _pointer(operation: dict[str, Any], member: str, where: str) -> list[str]:
    value = operation.get(member)
    if not isinstance(value, str):
        raise PatchDocumentError(f"{where}.{member}", _expected("a JSON Pointer", value))
    try:
        return parse_pointer(value)
    except ValueError as exc:
        raise PatchDocumentError(f"{where}.{member}", str(exc)) from None


def _expected(what: str, value: Any) -> str:
    """The message for a member that is not ``what``: a string value is quoted (and cut, as it
    may be long), any other by its JSON kind."""
    if value is None:
        return f"is required: {what}"
    if isinstance(value, str):
        shown = repr(value) if len(value) <= _SHOWN_CHARS else repr(value[:_SHOWN_CHARS]) + "…"
    else:
        shown = f"a JSON {_kind(value)}"
    return f"must be {what}, not {shown}"


def _is_prefix(prefix: Sequence[str], path: Sequence[str]) -> bool:
    return list(path[: len(prefix)]) == list(prefix)


def _shown(path: list[str], source: list[str] | None) -> str:
    def pointer(tokens: list[str]) -> str:
        return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)

    return f"{pointer(source)} → {pointer(path)}" if source is not None else pointer(path)


# -- the operations --------------------------------------------------------------------------------
def _apply(doc: Any, op: str, path: list[str], source: list[str] | None, value: Any) -> Any:
    if op == "add":
        return _add(doc, path, copy.deepcopy(value))
    if op == "remove":
        return _remove(doc, path)[0]
    if op == "replace":
        return _replace(doc, path, copy.deepcopy(value))
    if op == "test":
        if not _json_equal(_get(doc, path), value):
            raise PatchConflictError("the value differs from the one tested")
        return doc
    assert source is not None
    if op == "move":
        if source == path:
            _get(doc, source)
            return doc
        doc, moved = _remove(doc, source)
        return _add(doc, path, moved)
    return _add(doc, path, copy.deepcopy(_get(doc, source)))  # copy


def _get(doc: Any, path: list[str]) -> Any:
    for token in path:
        if isinstance(doc, dict):
            if token not in doc:
                raise PatchConflictError(f"member {token!r} does not exist")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(doc, token, allow_end=False)]
        else:
            raise PatchConflictError(f"cannot descend into a {_kind(doc)} with {token!r}")
    return doc


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(doc, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, allow_end=True), value)
    else:
        raise PatchConflictError(f"cannot add {token!r} to a {_kind(parent)}")
    return doc


def _replace(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(doc, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchConflictError(f"member {token!r} does not exist")
        parent[token] = value
    elif isinstance(parent, list):
        parent[_index(parent, token, allow_end=False)] = value
    else:
        raise PatchConflictError(f"cannot replace {token!r} in a {_kind(parent)}")
    return doc


def _remove(doc: Any, path: list[str]) -> tuple[Any, Any]:
    if not path:
        return None, doc
    parent = _get(doc, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchConflictError(f"member {token!r} does not exist")
        return doc, parent.pop(token)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, token, allow_end=False))
    raise PatchConflictError(f"cannot remove {token!r} from a {_kind(parent)}")


def _index(items: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(items)
    # RFC 6901 §4: decimal digits without leading zeros.
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise PatchConflictError(f"{token!r} is not an array index")
    index = int(token)
    if index > len(items) or (index == len(items) and not allow_end):
        raise PatchConflictError(f"index {index} is out of range (the array has {len(items)})")
    return index


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return _KINDS.get(type(value), type(value).__name__)


def _json_equal(left: Any, right: Any) -> bool:
    """Equality of JSON values (RFC 6902 §4.6): ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(
            _json_equal(a, b) for a, b in zip(left, right, strict=True)
        )
    return type(left) is type(right) and left == right
