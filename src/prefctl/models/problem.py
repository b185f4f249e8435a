"""RFC 9457 problem details: the error body of every REST endpoint (docs/api.md).

Keys are lowercase as RFC 9457 defines them (not PascalCase), and extension members a service adds
are kept. ``problem_from_validation_errors`` turns pydantic (or FastAPI) validation errors into a
400 problem whose ``errors`` address each field by its wire path::

    {"type": "about:blank", "title": "Invalid request body", "status": 400,
     "detail": "2 fields are invalid",
     "errors": [{"field": "Emails[0].Address", "message": "..."}, ...]}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "FieldError",
    "Problem",
    "field_path",
    "pattern_in_words",
    "problem_from_validation_errors",
]

# Where FastAPI says a value came from; not part of the field's path inside the body.
_SOURCES = frozenset({"body", "query", "path", "header", "cookie"})


class FieldError(BaseModel):
    """One invalid field: its wire path and what is wrong with it."""

    model_config = ConfigDict(extra="ignore")

    field: str
    message: str


class Problem(BaseModel):
    """An RFC 9457 problem: ``{type, title, status, detail, errors?}``."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[FieldError] | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """The body to send: absent members left out."""
        return self.model_dump(mode="json", exclude_none=True)


def field_path(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a wire path: ``("body", "Emails", 0, "Address")`` →
    ``Emails[0].Address``; an empty location (the whole body) is ``""``."""
    parts = list(loc)
    if parts and parts[0] in _SOURCES:
        parts = parts[1:]
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


# The validator's phrasing of the commonest errors → words a user of the API reads at once.
_WORDS = {
    "missing": "is required",
    "int_parsing": "expected a whole number",
    "int_type": "expected a whole number",
    "float_parsing": "expected a number",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "dict_type": "expected a JSON object",
    "model_type": "expected a JSON object",
    "list_type": "expected a JSON array",
    "int_from_float": "expected a whole number",
}


# A pattern a field must match → what a value of that form is, in words (``pattern_in_words``).
_PATTERN_WORDS: dict[str, str] = {}


def pattern_in_words(pattern: str, words: str) -> str:
    """``pattern``, remembered with ``words`` (what a matching value is: "an email address such
    as ann@example.com") for the error of a value that does not match: the field's constraint
    declares both where it is defined, and no client ever reads a regular expression."""
    _PATTERN_WORDS[pattern] = words
    return pattern


def _plural(count: object, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _in_words(kind: str, ctx: Mapping[str, Any]) -> str | None:
    """The message of a constraint's error (a pattern, a length, a bound, a choice) in words,
    with the constraint's own figures; None for another error."""
    if kind == "string_pattern_mismatch":
        words = _PATTERN_WORDS.get(str(ctx.get("pattern")))
        return f"must be {words}" if words else "is not in the expected form"
    if kind == "string_too_short":
        least = ctx.get("min_length")
        return (
            "must not be empty" if least == 1 else f"must be at least {_plural(least, 'character')}"
        )
    if kind == "string_too_long":
        return f"must be at most {_plural(ctx.get('max_length'), 'character')}"
    if kind == "too_short":
        return f"must hold at least {_plural(ctx.get('min_length'), 'item')}"
    if kind == "too_long":
        return f"must hold at most {_plural(ctx.get('max_length'), 'item')}"
    bounds = {
        "greater_than_equal": ("ge", "must be {} or more"),
        "less_than_equal": ("le", "must be {} or less"),
        "greater_than": ("gt", "must be more than {}"),
        "less_than": ("lt", "must be less than {}"),
    }
    if kind in bounds:
        key, words = bounds[kind]
        return words.format(ctx.get(key))
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected')}"
    return None


def _known_fields(model: type[BaseModel] | None, loc: Sequence[int | str]) -> list[str]:
    """The wire names of the fields where ``loc`` points (its last part a field name), when
    the models on the way are known."""
    import typing

    for part in loc[:-1]:
        if model is None or isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return []
        found = None
        for candidate in [field.annotation, *typing.get_args(field.annotation)]:
            for inner in [candidate, *typing.get_args(candidate)]:
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    found = inner
        model = found
    if model is None:
        return []
    return [f.alias or n for n, f in model.model_fields.items()]


def _message(error: Mapping[str, Any], model: type[BaseModel] | None = None) -> str:
    kind = error.get("type")
    if kind == "extra_forbidden":
        from prefctl.errors import did_you_mean

        loc = list(error.get("loc", ()))
        known = _known_fields(model, loc)
        name = str(loc[-1]) if loc else ""
        if not known:
            return "is not a known field"
        hint = did_you_mean(name, known) or f" (known: {', '.join(known)})"
        return f"is not a known field{hint}"
    if kind in _WORDS:
        return _WORDS[str(kind)]
    constraint = _in_words(str(kind), error.get("ctx") or {})
    if constraint is not None:
        return constraint
    message = str(error.get("msg", "invalid value"))
    message = message.replace("Input should be ", "should be ")
    # pydantic prefixes errors raised by validators; the prefix tells a client nothing.
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def problem_from_validation_errors(
    errors: Iterable[Mapping[str, Any]],
    *,
    status: int = 400,
    title: str = "Invalid request body",
    model: type[BaseModel] | None = None,
) -> Problem:
    """A problem listing each validation error (``ValidationError.errors()`` or FastAPI's);
    ``model``, the model validated, names the fields an unknown one may have meant."""
    field_errors = [
        FieldError(field=field_path(error.get("loc", ())), message=_message(error, model))
        for error in errors
    ]
    count = len(field_errors)
    detail = "1 field is invalid" if count == 1 else f"{count} fields are invalid"
    return Problem(title=title, status=status, detail=detail, errors=field_errors)
