"""Webhook subscriptions (docs/api.md): the record, its create/replace body and its selections.

A selection picks one event type and, for the five filtered entities, narrows it with the entity's
filter key (``webhooks/catalog.py``)::

    {"Entity": "Preferences", "EventType": "preference.added", "Filters": ["Newsletter"]}
    {"Entity": "Consents", "EventType": "consent.added", "ConsentTypes": ["AllConsents"]}
    {"Entity": "Tags", "EventType": "tag.added"}

Rules enforced here: the EventType exists and belongs to the Entity; a selection carries only its
entity's filter key (none for Profile, StandardFields and Tags); a filtered selection without its
key selects everything (the key is filled with the wildcard, so stored records are explicit); the
wildcard is not mixed with specific values; an event type appears once per subscription; the Url
is http or https with a host; the Name is not made of digits only (``prefctl subscriptions get
12`` reads 12 as an Id, so such a name could not be reached). ``SubscriptionInput`` is the
create/replace body (no ``Id``, ``ProvisioningState`` or ``Edited``); ``Subscription`` is the
record the service returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, StringConstraints, field_validator, model_validator

from prefctl.models._base import Timestamp, WireModel, strict_model
from prefctl.models.profile import Edited, EmailAddress
from prefctl.webhooks import catalog

__all__ = [
    "Alerts",
    "EventSelection",
    "ProvisioningState",
    "StrictSubscriptionInput",
    "Subscription",
    "SubscriptionInput",
    "SubscriptionState",
]

SubscriptionState = Literal["Active", "Paused"]
ProvisioningState = Literal["Creating", "Updating", "AwaitingManualAction", "Succeeded", "Failed"]
FilterValue = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]

# Python attribute of each filter key, so one validator can treat them alike.
_FILTER_ATTRIBUTES = {
    "Filters": "filters",
    "ConsentTypes": "consent_types",
    "ContactTypes": "contact_types",
    "Groups": "groups",
    "CustomFields": "custom_fields",
}


class EventSelection(WireModel):
    """One selected event type, narrowed by its entity's filter key when it has one."""

    entity: str
    event_type: str
    filters: list[FilterValue] | None = None
    consent_types: list[FilterValue] | None = None
    contact_types: list[FilterValue] | None = None
    groups: list[FilterValue] | None = None
    custom_fields: list[FilterValue] | None = None

    @field_validator("entity")
    @classmethod
    def _known_entity(cls, entity: str) -> str:
        if entity not in catalog.ENTITIES:
            raise ValueError(f"unknown entity; expected one of {', '.join(catalog.ENTITIES)}")
        return entity

    @field_validator("event_type")
    @classmethod
    def _known_type(cls, name: str) -> str:
        if not catalog.is_event_type(name):
            raise ValueError(f"unknown event type {name!r}; `prefctl events types` lists them")
        return name

    @model_validator(mode="after")
    def _filters_fit_entity(self) -> Self:
        if catalog.entity_of(self.event_type) != self.entity:
            raise ValueError(
                f"EventType {self.event_type!r} belongs to entity "
                f"{catalog.entity_of(self.event_type)!r}, not {self.entity!r}"
            )
        key = catalog.filter_key(self.entity)
        for wire_name, attribute in _FILTER_ATTRIBUTES.items():
            if (key is None or wire_name != key.name) and getattr(self, attribute) is not None:
                expected = f"only {key.name}" if key else "no filter key"
                raise ValueError(
                    f"{wire_name} does not apply to {self.entity}; it takes {expected}"
                )
        if key is None:
            return self
        values = self.filter_values
        if values is None:
            setattr(self, _FILTER_ATTRIBUTES[key.name], [key.wildcard])
        elif not values:
            raise ValueError(f"{key.name} is empty; list values or [{key.wildcard!r}]")
        elif key.wildcard in values and len(values) > 1:
            raise ValueError(f"{key.wildcard} selects everything; do not list other {key.name}")
        elif len(set(values)) != len(values):
            raise ValueError(f"{key.name} lists a value twice")
        return self

    @property
    def filter_values(self) -> list[str] | None:
        """The values under this selection's filter key (None for global entities)."""
        key = catalog.filter_key(self.entity)
        if key is None:
            return None
        values: list[str] | None = getattr(self, _FILTER_ATTRIBUTES[key.name])
        return values


class Alerts(WireModel):
    """Failure-alert emails for one subscription (enabled by the support team)."""

    enabled: bool = False
    recipients: list[EmailAddress] = Field(default_factory=list)

    @model_validator(mode="after")
    def _recipients_when_enabled(self) -> Self:
        if self.enabled and not self.recipients:
            raise ValueError("enabled alerts need at least one recipient")
        return self


class SubscriptionInput(WireModel):
    """The body of a subscription create (POST) or replace (PUT)."""

    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
    description: Annotated[str, StringConstraints(max_length=1000)] | None = None
    url: Annotated[str, StringConstraints(strip_whitespace=True, max_length=2048)]
    state: SubscriptionState = "Active"
    catch_up_on_resume: bool = False
    subscriptions: Annotated[list[EventSelection], Field(min_length=1)]
    alerts: Alerts = Field(default_factory=Alerts)

    @field_validator("name")
    @classmethod
    def _not_an_id(cls, name: str) -> str:
        # The same test as the resolvers of `prefctl subscriptions get SUB` and of alert activation.
        if name.isdigit():
            raise ValueError("must not be made of digits only: it would be read as an Id")
        return name

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url):
            raise ValueError("must not contain spaces or control characters")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http:// or https:// URL with a host")
        try:
            parts.port  # noqa: B018 - raises for a port outside 0-65535
        except ValueError:
            raise ValueError("has an invalid port") from None
        return url

    @field_validator("subscriptions")
    @classmethod
    def _each_type_once(cls, selections: list[EventSelection]) -> list[EventSelection]:
        seen: dict[str, int] = {}
        for index, selection in enumerate(selections):
            if selection.event_type in seen:
                raise ValueError(
                    f"items {seen[selection.event_type]} and {index} both select "
                    f"{selection.event_type}; merge their filters"
                )
            seen[selection.event_type] = index
        return selections


class Subscription(SubscriptionInput):
    """A subscription record as the service returns it."""

    id: int
    provisioning_state: ProvisioningState = "Creating"
    # Read-only, set by the emulator: the last handshake failure, and while
    # AwaitingManualAction, when the validation URL stops working.
    provisioning_error: str | None = None
    validation_expires_at: Timestamp | None = None
    edited: Edited | None = None

    @property
    def receives_events(self) -> bool:
        """Only a Succeeded and Active subscription is sent events (docs/api.md)."""
        return self.provisioning_state == "Succeeded" and self.state == "Active"


if TYPE_CHECKING:
    StrictSubscriptionInput = SubscriptionInput
else:
    StrictSubscriptionInput = strict_model(SubscriptionInput)
