"""Webhook subscriptions over the REST API (docs/api.md, docs/subscriptions.md): ``/subscriptions``.

Besides the five operations, this module holds what the CLI builds on them:

- ``selection(spec)``: ``--event TYPE[:FILTER,…]`` → one selection; the entity comes from the
  catalog, the filter values fill the entity's filter key, and a filtered entity given no values
  selects everything (its wildcard, e.g. ``AllFilters``). A global entity takes no filter.
- ``input_body(record)``: the writable part of a record, for the GET → edit → PUT of ``update``,
  ``pause`` and ``resume`` (PUT replaces the whole record); ``without_read_only(body)`` lets a
  saved record serve as a ``--file`` body.
- ``SubscriptionsApi.resolve(ref)``: a subscription by Id or by its unique Name.
- ``SubscriptionsApi.wait_until_provisioned``: poll GET until ProvisioningState is Succeeded or
  Failed, or the time is up; ``provisioning_error(record, waited)`` then says whether that is a
  success (None) or the error to exit with: Failed with the service's ``ProvisioningError``, or
  not done in time. AwaitingManualAction is not final: a GET of the validationUrl the endpoint
  received (within 5 minutes, until ``ValidationExpiresAt``) still turns it into Succeeded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from prefctl.api.client import ApiClient, Resource
from prefctl.api.shapes import required_id, text
from prefctl.clock import Clock
from prefctl.errors import NotFoundError, PrefctlError, UsageError

__all__ = [
    "DEFAULT_WAIT_SECONDS",
    "INPUT_FIELDS",
    "POLL_SECONDS",
    "READ_ONLY_FIELDS",
    "SubscriptionsApi",
    "failure_reason",
    "input_body",
    "provisioning_error",
    "selection",
    "selections_to_edit",
    "subscription_id",
    "without_read_only",
]

DEFAULT_WAIT_SECONDS = 120.0
FINAL_STATES = frozenset({"Succeeded", "Failed"})
POLL_SECONDS = 0.5
# Fields of a record that a create or replace body must leave out.
READ_ONLY_FIELDS = frozenset(
    {"Id", "ProvisioningState", "ProvisioningError", "ValidationExpiresAt", "Edited"}
)
# The fields of a create/replace body (models/subscription.py SubscriptionInput).
INPUT_FIELDS = (
    "Name",
    "Description",
    "Url",
    "State",
    "CatchUpOnResume",
    "Subscriptions",
    "Alerts",
)


def selection(spec: str) -> dict[str, Any]:
    """``contacts.email.added:Work,Home`` → ``{"Entity": "Contacts", "EventType": …,
    "ContactTypes": ["Work", "Home"]}``; UsageError for an unknown type or a misplaced filter."""
    from prefctl.webhooks import catalog

    name, _, filters = spec.partition(":")
    name = name.strip()
    if not catalog.is_event_type(name):
        raise UsageError(
            f"unknown event type '{name}' in --event {spec!r}",
            hint="'prefctl events types' lists them",
        )
    entity = catalog.entity_of(name)
    chosen: dict[str, Any] = {"Entity": entity, "EventType": name}
    values = [value.strip() for value in filters.split(",") if value.strip()]
    key = catalog.filter_key(entity)
    if key is None:
        if values:
            raise UsageError(
                f"{name} is a {entity} event: it applies to all profiles and takes no filter"
            )
        return chosen
    chosen[key.name] = values or [key.wildcard]
    return chosen


def input_body(record: Mapping[str, Any]) -> Resource:
    """The create/replace body of a record the service returned: its writable fields only."""
    return {key: record[key] for key in INPUT_FIELDS if key in record}


def without_read_only(body: Mapping[str, Any]) -> Resource:
    """``body`` without the fields the service maintains, so that a saved record can be sent
    back; anything else (a misspelt field too) is kept for the service to judge."""
    return {key: value for key, value in body.items() if key not in READ_ONLY_FIELDS}


def subscription_id(record: Mapping[str, Any]) -> int:
    """The record's Id, for the next request about it; PrefctlError when the service sent none."""
    return required_id(record, "Id", "a subscription")


def selections_to_edit(value: Any, where: str) -> list[dict[str, Any]]:
    """The event selections ``value`` (a record's Subscriptions), for ``update`` to change;
    PrefctlError naming ``where`` they come from when they are not a list of objects with an
    EventType (sending back only the readable ones would delete the others)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(item, dict) and isinstance(item.get("EventType"), str) for item in value
    ):
        raise PrefctlError(
            f"the Subscriptions {where} are not a list of selections with an EventType; "
            "nothing was changed",
            hint="replace them all with --event",
        )
    return list(value)


def _trust_hint(reason: str) -> str | None:
    """What to do when the handshake failed on the endpoint's TLS (None for another reason)."""
    lowered = reason.lower()
    if any(
        words in lowered
        for words in (
            "certificate_verify_failed",
            "certificate verify failed",
            "tls certificate is not trusted",
        )
    ):
        return (
            "the dispatcher does not trust the endpoint's certificate: give it the CA that"
            " signed it with 'prefctl dispatcher tls set --ca CA.pem' (for a development"
            " certificate from 'prefctl certs', its ca.pem)"
        )
    install = (
        "give the dispatcher one with 'prefctl dispatcher tls set --cert CERT.pem --key KEY.pem'"
    )
    if "certificate required" in lowered or "handshake failure" in lowered:
        return f"the endpoint asks for a client certificate (mTLS): {install}"
    if "https://" in lowered and "closed the connection without answering" in lowered:
        return f"the endpoint may ask for a client certificate (mTLS): {install}"
    return None


def failure_reason(record: Mapping[str, Any]) -> str | None:
    """The last handshake failure the service reports (``ProvisioningError``), if any."""
    value = record.get("ProvisioningError")
    return value.strip() if isinstance(value, str) and value.strip() else None


class SubscriptionsApi:
    """The account's webhook subscriptions."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def create(self, body: Mapping[str, Any]) -> Resource:
        """POST a subscription; the service starts the validation handshake."""
        return self.client.resource("POST", "/subscriptions", body=dict(body))

    def list(self) -> list[Resource]:
        body = self.client.get("/subscriptions")
        items = body.get("Subscriptions") if isinstance(body, dict) else body
        if not isinstance(items, list):
            raise PrefctlError("the REST API answered GET /subscriptions without a list")
        return [item for item in items if isinstance(item, dict)]

    def get(self, subscription_id: int) -> Resource:
        return self.client.resource("GET", f"/subscriptions/{subscription_id}")

    def replace(self, subscription_id: int, body: Mapping[str, Any]) -> Resource:
        """PUT the whole record; a new Url runs the handshake again."""
        return self.client.resource("PUT", f"/subscriptions/{subscription_id}", body=dict(body))

    def delete(self, subscription_id: int) -> None:
        self.client.call("DELETE", f"/subscriptions/{subscription_id}")

    def resolve(self, ref: str) -> Resource:
        """The subscription named by ``ref``: its Id, or else its Name (which must be unique)."""
        ref = ref.strip()
        if ref.isdigit():
            return self.get(int(ref))
        matches = [item for item in self.list() if item.get("Name") == ref]
        if not matches:
            raise NotFoundError(
                f"no subscription named {ref!r}", hint="'prefctl subscriptions list' shows them"
            )
        if len(matches) > 1:
            ids = ", ".join(str(item.get("Id")) for item in matches)
            raise UsageError(
                f"{len(matches)} subscriptions are named {ref!r}", hint=f"use an Id: {ids}"
            )
        return matches[0]

    def wait_until_provisioned(
        self,
        subscription_id: int,
        *,
        timeout: float,
        clock: Clock,
        on_state: Callable[[Resource], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        poll: float = POLL_SECONDS,
    ) -> Resource:
        """Poll GET until ProvisioningState is Succeeded or Failed, or ``timeout`` seconds
        passed, and return the last record (``provisioning_error`` judges it). ``on_state`` sees
        each record whose state differs from the one before."""
        deadline = clock.monotonic() + timeout
        last_state: object = None
        while True:
            record = self.get(subscription_id)
            state = text(record.get("ProvisioningState"))
            if state != last_state and on_state is not None:
                on_state(record)
            last_state = state
            left = deadline - clock.monotonic()
            if state in FINAL_STATES or left <= 0:
                return record
            sleep(min(poll, left))


def provisioning_error(record: Mapping[str, Any], waited: float) -> PrefctlError | None:
    """None when the subscription is Succeeded; else the error to exit with (exit 1): Failed
    with the service's reason, or still in another state after ``waited`` seconds."""
    state = text(record.get("ProvisioningState"))
    subscription_id = text(record.get("Id"))
    if state == "Succeeded":
        return None
    if state == "Failed":
        reason = failure_reason(record)
        left = (
            f"subscription {subscription_id} is left Failed: 'prefctl subscriptions update"
            f" {subscription_id} --url URL' provisions it again, 'prefctl subscriptions delete"
            f" {subscription_id}' removes it"
        )
        trust = _trust_hint(reason or "")
        if trust is not None:
            return PrefctlError(
                f"subscription {subscription_id} failed provisioning: {reason}",
                hint=f"{trust}; {left}",
            )
        return PrefctlError(
            f"subscription {subscription_id} failed provisioning"
            + (f": {reason}" if reason else ""),
            hint="make the endpoint answer the handshake with HTTP 200 and "
            '{"validationResponse": "<validationCode>"}, then provision it again: '
            f"'prefctl subscriptions update {subscription_id} --url URL' with a new Url, or "
            f"'prefctl subscriptions delete {subscription_id}' and create it again (replacing "
            "it with the same Url leaves it Failed)",
        )
    return PrefctlError(
        f"subscription {subscription_id} is still {state or 'not provisioned'} after {waited:g} s",
        hint=f"'prefctl subscriptions get {subscription_id}' shows it later",
    )
