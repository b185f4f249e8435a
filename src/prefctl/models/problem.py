"""RFC 9457 problem details: the error body of every REST endpoint (DESIGN §7.2).

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

__all__ = ["FieldError", "Problem", "field_path", "problem_from_validation_errors"]

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


def _message(error: Mapping[str, Any]) -> str:
    message = str(error.get("msg", "invalid value"))
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
) -> Problem:
    """A problem listing each validation error (``ValidationError.errors()`` or FastAPI's)."""
    field_errors = [
        FieldError(field=field_path(error.get("loc", ())), message=_message(error))
        for error in errors
    ]
    count = len(field_errors)
    detail = "1 field is invalid" if count == 1 else f"{count} fields are invalid"
    return Problem(title=title, status=status, detail=detail, errors=field_errors)
