"""Webhook messages (docs/webhooks.md): the event notification, the validation handshake, the reply.

These pydantic models validate and document the shapes. Code that *builds* messages at volume
(the dispatcher) uses ``prefctl.webhooks.envelope`` and ``prefctl.webhooks.handshake``, which
produce the same dicts without pydantic; ``wire()`` here returns exactly what they build.

The models are tolerant, as a receiver must be: unknown fields are ignored, and an EventType the
catalog does not know is accepted (a service may add types), but a known EventType must come with
its own Entity.

>>> EventNotification.model_validate(body).event_type
'contacts.email.added'
"""

from __future__ import annotations

from typing import Any, Literal, Self
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from prefctl.models._base import Timestamp, WireModel, dump_wire
from prefctl.webhooks.catalog import EVENT_TYPES

__all__ = [
    "EventNotification",
    "ValidationData",
    "ValidationHandshake",
    "ValidationReply",
]


class EventNotification(WireModel):
    """One event as POSTed to a subscription's Url (PascalCase; ``Data`` holds the change)."""

    event_id: UUID
    event_type: str = Field(min_length=1)
    entity: str = Field(min_length=1)
    subscription_id: int
    client_id: str
    profile_id: int
    event_time: Timestamp
    original_event_time: Timestamp
    data: dict[str, Any]
    previous_data: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _entity_of_known_type(self) -> Self:
        known = EVENT_TYPES.get(self.event_type)
        if known is not None and known.entity != self.entity:
            raise ValueError(
                f"EventType {self.event_type!r} belongs to entity {known.entity!r}, "
                f"not {self.entity!r}"
            )
        return self

    def wire(self) -> dict[str, Any]:
        """The JSON body (PreviousData left out when there is none)."""
        return dump_wire(self)


class _CamelModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        extra="ignore",
    )


class ValidationData(_CamelModel):
    """The handshake's camelCase ``data``: the code to echo and the URL for manual validation."""

    validation_code: str = Field(min_length=1)
    validation_url: str = Field(min_length=1)


class ValidationHandshake(WireModel):
    """The validation message: an event's envelope (Entity ``Subscription``), ProfileId null,
    ``data`` camelCase. A message without Entity still validates."""

    event_id: UUID
    event_type: Literal["subscription.validation"] = "subscription.validation"
    entity: str = "Subscription"
    subscription_id: int
    client_id: str
    profile_id: None = None
    event_time: Timestamp
    original_event_time: Timestamp
    data: ValidationData = Field(alias="data")

    def wire(self) -> dict[str, Any]:
        """The JSON body, with ``"ProfileId": null`` as the service sends it."""
        return dump_wire(self, exclude_none=False)


class ValidationReply(_CamelModel):
    """The endpoint's synchronous answer: ``{"validationResponse": "<validationCode>"}``."""

    validation_response: str = Field(min_length=1, alias="validationResponse")
