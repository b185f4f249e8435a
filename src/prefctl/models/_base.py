"""Base classes of the wire models: PascalCase on the wire, snake_case in Python.

Two directions, two tolerances:

- ``WireModel`` **ignores unknown fields**. The client reads what a real service returns, and a
  service that adds a field must not break prefctl. Every resource model derives from it.
- ``StrictWireModel`` **forbids unknown fields and accepts only the wire (PascalCase) names**. The
  emulator validates request bodies with strict variants, so a misspelt ``"Emial"`` gets a 400
  instead of being silently dropped.

A pydantic model's ``extra`` setting does not reach the models nested inside it, so a strict
``Profile`` needs strict ``Email``s too. ``strict_model(Model)`` builds that twin once: a subclass
of ``Model`` (and of ``StrictWireModel``) whose nested wire models are replaced by their strict
twins, keeping every field, default and validator. Resource modules publish the twins the emulator
needs, typed for mypy as the tolerant class they subclass::

    if TYPE_CHECKING:
        StrictProfile = Profile
    else:
        StrictProfile = strict_model(Profile)

Read-only fields (``ProfileId``, ``Edited``, a subscription's ``Id``) stay accepted in request
bodies so that GET → edit → PUT round-trips; the emulator ignores them.

``dump_wire(model)`` is the one way to turn a model into a wire dict: PascalCase keys, JSON-ready
values, unset optional fields (None) left out. ``Timestamp`` fields travel as RFC 3339 UTC with
milliseconds (``2026-11-21T19:20:30.123Z``), the service's time format.
"""

from __future__ import annotations

import functools
import operator
import types
import typing
from typing import Annotated, Any, TypeVar, get_args, get_origin

from pydantic import AwareDatetime, BaseModel, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_pascal

from prefctl.clock import utc_timestamp

__all__ = [
    "StrictWireModel",
    "Timestamp",
    "WireModel",
    "dump_wire",
    "format_timestamp",
    "strict_model",
]

M = TypeVar("M", bound=BaseModel)


class WireModel(BaseModel):
    """A tolerant wire model: PascalCase aliases, Python names accepted, unknown keys ignored."""

    # validate_by_name / serialize_by_alias need pydantic >= 2.11 (populate_by_name's successor).
    model_config = ConfigDict(
        alias_generator=to_pascal,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        extra="ignore",
    )


class StrictWireModel(WireModel):
    """A request-body model: wire names only, unknown keys rejected (the emulator answers 400)."""

    model_config = ConfigDict(validate_by_name=False, extra="forbid")


# RFC 3339 in UTC with milliseconds and a ``Z``: ``2026-11-21T19:20:30.123Z``.
format_timestamp = utc_timestamp


# An aware datetime that travels as RFC 3339 UTC with milliseconds (the service's time format).
Timestamp = Annotated[AwareDatetime, PlainSerializer(format_timestamp, when_used="json")]


def dump_wire(model: BaseModel, *, exclude_none: bool = True) -> dict[str, Any]:
    """The wire form of ``model``: PascalCase keys, JSON-compatible values, Nones left out."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=exclude_none)


@functools.cache
def _strict_twin(model: type[BaseModel]) -> type[BaseModel]:
    if issubclass(model, StrictWireModel):
        return model
    namespace: dict[str, Any] = {
        "__module__": model.__module__,
        "__qualname__": f"Strict{model.__qualname__}",
        "__doc__": model.__doc__,
        "model_config": ConfigDict(validate_by_name=False, extra="forbid"),
    }
    annotations: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        rewritten = _rewrite(field.annotation)
        if rewritten is not field.annotation:
            # Re-declaring the field with its own FieldInfo keeps default, alias and constraints.
            annotations[name] = rewritten
            namespace[name] = field
    namespace["__annotations__"] = annotations
    return types.new_class(
        f"Strict{model.__name__}",
        (model, StrictWireModel),
        exec_body=lambda ns: ns.update(namespace),
    )


def _rewrite(annotation: Any) -> Any:
    """``annotation`` with every WireModel inside replaced by its strict twin (or itself)."""
    if isinstance(annotation, type) and issubclass(annotation, WireModel):
        return _strict_twin(annotation)
    origin = get_origin(annotation)
    if origin is None:
        return annotation
    args = get_args(annotation)
    new_args = tuple(_rewrite(arg) for arg in args)
    if all(new is old for new, old in zip(new_args, args, strict=True)):
        return annotation
    if origin is Annotated:
        return Annotated[(new_args[0], *annotation.__metadata__)]
    if origin in (types.UnionType, typing.Union):
        return functools.reduce(operator.or_, new_args)
    return origin[new_args]


def strict_model(model: type[M]) -> type[M]:
    """The strict twin of a wire model, built once and cached (see the module docstring)."""
    return typing.cast("type[M]", _strict_twin(model))
