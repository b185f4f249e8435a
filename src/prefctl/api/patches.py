"""Bodies of ``PATCH /profiles/{id}``: JSON Patch (RFC 6902) or JSON merge patch (RFC 7396).

- ``content_type_of(patch)``: a JSON array is a JSON Patch, a JSON object a merge patch.
- ``parse_assignment("Emails.0.IsDefault=true")``: one ``--set`` pair. The path is dotted PascalCase;
  a segment of digits is a list index, ``-`` appends to a list. The value is JSON when it parses
  as JSON (``true``, ``42``, ``null``, ``["a"]``, ``"007"``), else the text itself.
- ``patch_from_assignments(pairs, current)``: without list indexes, a merge patch built from the
  paths alone (``null`` clears a field); with any index, a JSON Patch made against the current
  profile (``current()`` is called once), which adds missing parent objects, ``replace``s list
  items and ``add``s everything else, so only the named places change.
- ``merge_patch(old, new)``: the merge patch that turns ``old`` into ``new`` (lists whole).

>>> patch_from_assignments([parse_assignment("CustomerName.FirstName=Ada")], dict)
{'CustomerName': {'FirstName': 'Ada'}}
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefctl.api.client import JSON_PATCH, MERGE_PATCH, encode_body, parse_json
from prefctl.errors import UsageError

__all__ = [
    "APPEND",
    "Assignment",
    "content_type_of",
    "merge_patch",
    "parse_assignment",
    "patch_from_assignments",
]

APPEND = "-"
Segment = str | int


@dataclass(frozen=True)
class Assignment:
    """One ``--set Path=Value``: path segments (ints index lists, ``-`` appends) and the value."""

    text: str
    path: tuple[Segment, ...]
    value: Any

    @property
    def indexed(self) -> bool:
        return any(isinstance(s, int) or s == APPEND for s in self.path)


def content_type_of(patch: Any) -> str:
    """The content type of a patch body, by its shape; UsageError if it is neither."""
    if isinstance(patch, list):
        if not all(isinstance(op, dict) and "op" in op and "path" in op for op in patch):
            raise UsageError(
                "a JSON Patch is an array of operations like "
                '{"op": "add", "path": "/Tags/-", "value": "vip"}'
            )
        return JSON_PATCH
    if isinstance(patch, dict):
        return MERGE_PATCH
    raise UsageError(
        "a patch must be a JSON array (JSON Patch) or a JSON object (merge patch)",
        hint=f"got {type(patch).__name__}",
    )


def parse_assignment(text: str) -> Assignment:
    """``Path=Value`` → Assignment; UsageError naming the pair when it is malformed."""
    path_text, sep, raw = text.partition("=")
    if not sep or not path_text.strip():
        raise UsageError(
            f"--set {text!r} is not Path=Value", hint="e.g. --set CustomerName.FirstName=Ada"
        )
    segments: list[Segment] = []
    for part in path_text.strip().split("."):
        if not part:
            raise UsageError(f"--set {text!r}: the path has an empty segment")
        segments.append(int(part) if part.isdigit() else part)
    if isinstance(segments[0], int) or segments[0] == APPEND:
        raise UsageError(f"--set {text!r}: the path must start with a field name")
    if APPEND in segments[:-1]:
        raise UsageError(f"--set {text!r}: '-' (append) can only end a path")
    # Named by its path: the value itself may be thousands of characters long.
    where = f"--set {path_text.strip()}=…"
    try:
        value = _value(raw)
    except RecursionError:
        raise UsageError(f"{where}: the value is nested too deeply") from None
    encode_body(value, f"{where}: the value")
    return Assignment(text, tuple(segments), value)


def _value(raw: str) -> Any:
    try:
        return parse_json(raw)
    except ValueError:
        return raw


def patch_from_assignments(
    assignments: Sequence[Assignment], current: Callable[[], Mapping[str, Any]]
) -> dict[str, Any] | list[dict[str, Any]]:
    """A merge patch when no path indexes a list, else a JSON Patch against ``current()``."""
    if not assignments:
        raise UsageError("nothing to change", hint="pass --set Path=Value or --file")
    if any(a.indexed for a in assignments):
        return _json_patch(assignments, copy.deepcopy(dict(current())))
    patch: dict[str, Any] = {}
    for assignment in assignments:
        holder = patch
        for segment in assignment.path[:-1]:
            child = holder.setdefault(str(segment), {})
            if not isinstance(child, dict):
                raise UsageError(f"--set {assignment.text!r} conflicts with an earlier --set")
            holder = child
        leaf = str(assignment.path[-1])
        if isinstance(holder.get(leaf), dict):
            raise UsageError(f"--set {assignment.text!r} conflicts with an earlier --set")
        holder[leaf] = assignment.value
    return patch


def _json_patch(assignments: Sequence[Assignment], doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Operations for each assignment, applied to ``doc`` as they are made so later ones see
    the parents earlier ones created."""
    ops: list[dict[str, Any]] = []
    for assignment in assignments:
        node: Any = doc
        walked: list[Segment] = []
        for segment, following in zip(assignment.path, assignment.path[1:], strict=False):
            walked.append(segment)
            child = _child(node, segment, assignment)
            wants_list = isinstance(following, int) or following == APPEND
            if child is None:
                # A missing parent is created, so `CustomerName.FirstName` works on a profile
                # without a CustomerName; the add operation carries a copy, not `child` itself.
                child = [] if wants_list else {}
                ops.append({"op": "add", "path": _pointer(walked), "value": copy.copy(child)})
                _put(node, segment, child)
            elif not isinstance(child, list if wants_list else dict):
                kind = "a list" if wants_list else "an object"
                raise UsageError(f"--set {assignment.text!r}: {_dotted(walked)} is not {kind}")
            node = child
        last = assignment.path[-1]
        if isinstance(last, int):
            _child(node, last, assignment)  # raises when out of range
            op = "replace"
        else:
            op = "add"
        ops.append(
            {"op": op, "path": _pointer(assignment.path), "value": copy.deepcopy(assignment.value)}
        )
        _put(node, last, copy.deepcopy(assignment.value))
    return ops


def _child(node: Any, segment: Segment, assignment: Assignment) -> Any:
    if isinstance(node, list):
        if not isinstance(segment, int):
            raise UsageError(f"--set {assignment.text!r}: {segment!r} is not a list index")
        if segment >= len(node):
            raise UsageError(
                f"--set {assignment.text!r}: index {segment} is out of range "
                f"(the list has {len(node)} item{'' if len(node) == 1 else 's'})",
                hint="use '-' as the last segment to append",
            )
        return node[segment]
    if isinstance(segment, int):
        raise UsageError(f"--set {assignment.text!r}: index {segment} applies to a non-list")
    return node.get(segment)


def _put(node: Any, segment: Segment, value: Any) -> None:
    if isinstance(node, list):
        if segment == APPEND:
            node.append(value)
        else:
            node[int(segment)] = value
    else:
        node[str(segment)] = value


def _pointer(path: Sequence[Segment]) -> str:
    """An RFC 6901 JSON Pointer."""
    return "".join("/" + str(s).replace("~", "~0").replace("/", "~1") for s in path)


def _dotted(path: Sequence[Segment]) -> str:
    return ".".join(str(s) for s in path)


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7396 merge patch from ``old`` to ``new``: objects recursively, lists and scalars
    whole, ``null`` for a removed key; empty when they are equal."""
    patch: dict[str, Any] = {}
    for key in [*old.keys(), *(k for k in new if k not in old)]:
        if key not in new:
            if old[key] is not None:
                patch[key] = None
            continue
        before, after = old.get(key), new[key]
        if before == after:
            continue
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            patch[key] = merge_patch(before, after)
        else:
            patch[key] = copy.deepcopy(after)
    return patch
