"""``/subscriptions``: create, list, read, replace and delete webhook subscriptions (docs/api.md).

- ``POST`` stores the subscription in ProvisioningState ``Creating`` and answers 201 with
  ``Location`` at once; the handshake (``dispatcher/handshake.py``) runs in the background and GET
  shows where it stands.
- ``PUT`` replaces the whole record. A new Url runs the handshake again (``Updating``); ``State``
  pauses (``Paused``) or resumes (``Active``) delivery, keeping events for the resume when
  ``CatchUpOnResume`` is true and dropping them otherwise. There is no separate pause route.
- ``DELETE`` answers 204; pending deliveries go with the subscription and notifications stop.
- The same Url subscribed twice to one EventType is a 409 naming the subscription in the way;
  so is a Name another subscription of the account has (names are unique, case-sensitively, as
  the CLI and the support team find subscriptions by name). A Name of digits only is a 400: it
  would read as an Id.
- A plain-http Url to a host other than loopback is a 400 naming the rule (HTTPS is mandatory;
  ``webhooks/https_rule.py``) unless the account's ``AllowHttpWebhooks`` is true. A PUT that
  keeps a stored Url (one stored before the rule) is not refused for it.
- ``Alerts`` are the support team's (``prefctl emulator alerts``): a body may repeat the stored
  value (GET → edit → PUT) but not change it.

Besides the fields of the Subscription model, a record shows ``ProvisioningError`` (the last
handshake failure: while retrying and once Failed) and, while AwaitingManualAction,
``ValidationExpiresAt``. Both are read-only and, like ``Id``, ``ProvisioningState`` and ``Edited``,
must be left out of a PUT body.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Request
from starlette.responses import Response

from prefctl.emulator.provisioning import handshake_runner
from prefctl.emulator.routes._common import (
    ACCOUNT_PREFIX,
    JSON_MEDIA_TYPE,
    Principal,
    ProblemError,
    SubscriptionsRead,
    SubscriptionsWrite,
    account_url,
    connection,
    created,
    get_ctx,
    json_response,
    no_content,
    problems,
    require_media_type,
)
from prefctl.models._base import Timestamp, WireModel, dump_wire
from prefctl.models.problem import Problem
from prefctl.models.subscription import Alerts, StrictSubscriptionInput, Subscription
from prefctl.store import Store
from prefctl.store import subscriptions as store
from prefctl.store.db import transaction
from prefctl.store.settings import get_switch
from prefctl.store.subscriptions import DuplicateSubscriptionError, SubscriptionRecord
from prefctl.store.timestamps import epoch, wire_time
from prefctl.webhooks.https_rule import ALLOW_HTTP_SETTING, https_problem

__all__ = ["SubscriptionList", "SubscriptionView", "router", "subscription_wire"]

router = APIRouter(prefix=ACCOUNT_PREFIX, tags=["subscriptions"])

SubscriptionId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The subscription's Id.")]
SubscriptionBody = Annotated[StrictSubscriptionInput, Body()]
_ALERTS_HINT = "alerts are set by the support team (prefctl emulator alerts enable/disable)"


class SubscriptionView(Subscription):
    """A subscription as the emulator returns it (documents the read-only extras)."""

    provisioning_error: str | None = None
    validation_expires_at: Timestamp | None = None


class SubscriptionList(WireModel):
    """The answer of ``GET /subscriptions``."""

    subscriptions: list[SubscriptionView]


def subscription_wire(record: SubscriptionRecord) -> dict[str, Any]:
    """The record as the API shows it: the Subscription plus ProvisioningError and
    ValidationExpiresAt where they apply."""
    wire = record.to_wire()
    if record.handshake.last_error is not None and record.provisioning_state != "Succeeded":
        wire["ProvisioningError"] = record.handshake.last_error
    expires_at = record.handshake.validation_expires_at
    if record.provisioning_state == "AwaitingManualAction" and expires_at is not None:
        wire["ValidationExpiresAt"] = wire_time(expires_at)
    return wire


def _json_writer(request: Request, principal: SubscriptionsWrite) -> Principal:
    # After authorization, so an anonymous request learns nothing about media types.
    require_media_type(request, JSON_MEDIA_TYPE)
    return principal


JsonWriter = Annotated[Principal, Depends(_json_writer)]


@router.post(
    "/subscriptions",
    status_code=201,
    summary="Create a subscription (the handshake follows in the background)",
    response_model=None,
    responses={
        201: {
            "model": SubscriptionView,
            "description": "Created, in ProvisioningState Creating",
            "headers": {"Location": {"schema": {"type": "string"}}},
        },
        **problems(409),
    },
)
def create_subscription(
    request: Request, body: SubscriptionBody, principal: JsonWriter
) -> Response:
    ctx = get_ctx(request)
    account = principal.service_client_id
    wire = _stored_body(body, current=None)
    conn = connection(request)
    with _conflicts(), transaction(conn):
        _check_https(conn, account, wire["Url"])
        _check_name_free(conn, account, wire["Name"], current=None)
        record = store.create_subscription(
            conn, account, wire, actor=principal.user_id, now=epoch(ctx.clock.now())
        )
    handshake_runner(ctx).notify(account, record.id)
    return created(subscription_wire(record), account_url(request, "subscriptions", record.id))


@router.get(
    "/subscriptions",
    summary="List the account's subscriptions",
    response_model=None,
    responses={200: {"model": SubscriptionList, "description": "OK"}},
)
def list_subscriptions(request: Request, principal: SubscriptionsRead) -> Response:
    records = store.list_subscriptions(connection(request), principal.service_client_id)
    return json_response({"Subscriptions": [subscription_wire(record) for record in records]})


@router.get(
    "/subscriptions/{subscription_id}",
    summary="Read a subscription and its provisioning state",
    response_model=None,
    responses={200: {"model": SubscriptionView, "description": "OK"}, **problems(404)},
)
def get_subscription(
    request: Request, subscription_id: SubscriptionId, principal: SubscriptionsRead
) -> Response:
    conn = connection(request)
    return json_response(subscription_wire(_existing(conn, principal, subscription_id)))


@router.put(
    "/subscriptions/{subscription_id}",
    summary="Replace a subscription (a new Url runs the handshake again; State pauses/resumes)",
    response_model=None,
    responses={200: {"model": SubscriptionView, "description": "OK"}, **problems(404, 409)},
)
def replace_subscription(
    request: Request, subscription_id: SubscriptionId, body: SubscriptionBody, principal: JsonWriter
) -> Response:
    ctx = get_ctx(request)
    account = principal.service_client_id
    conn = connection(request)
    with _conflicts(), transaction(conn):
        current = _existing(conn, principal, subscription_id)
        wire = _stored_body(body, current=current)
        if wire["Url"] != current.url:
            _check_https(conn, account, wire["Url"])
        _check_name_free(conn, account, wire["Name"], current=current)
        replaced = store.replace_subscription(
            conn,
            account,
            subscription_id,
            wire,
            actor=principal.user_id,
            now=epoch(ctx.clock.now()),
        )
    if replaced is None:
        raise _not_found(subscription_id)
    record, url_changed = replaced
    if url_changed:
        handshake_runner(ctx).notify(account, subscription_id)
    return json_response(subscription_wire(record))


@router.delete(
    "/subscriptions/{subscription_id}",
    status_code=204,
    summary="Delete a subscription; its notifications stop",
    response_model=None,
    responses={204: {"description": "Deleted"}, **problems(404)},
)
def delete_subscription(
    request: Request, subscription_id: SubscriptionId, principal: SubscriptionsWrite
) -> Response:
    account = principal.service_client_id
    conn = connection(request)
    now = epoch(get_ctx(request).clock.now())
    with transaction(conn):
        deleted = store.delete_subscription(conn, account, subscription_id, now=now)
    if not deleted:
        raise _not_found(subscription_id)
    handshake_runner(get_ctx(request)).notify(account, subscription_id)
    return no_content()


# -- helpers ---------------------------------------------------------------------------------------
def _stored_body(
    body: StrictSubscriptionInput, *, current: SubscriptionRecord | None
) -> dict[str, Any]:
    """The wire body to store: Alerts kept as they are (off for a new subscription); a body that
    tries to change them is refused."""
    kept = (
        Alerts()
        if current is None
        else Alerts(enabled=current.alerts_enabled, recipients=current.alert_recipients)
    )
    if "alerts" in body.model_fields_set and dump_wire(body.alerts) != dump_wire(kept):
        raise ProblemError(
            400,
            "Invalid request body",
            "1 field is invalid",
            [{"field": "Alerts", "message": f"cannot be changed through the API: {_ALERTS_HINT}"}],
        )
    wire = dump_wire(body)
    wire["Alerts"] = dump_wire(kept, exclude_none=False)
    return wire


def _check_https(conn: Store, account: str, url: str) -> None:
    """A 400 naming the rule for a plain-http Url off loopback, unless the account allows it."""
    problem = https_problem(url, allow_http=get_switch(conn, account, ALLOW_HTTP_SETTING))
    if problem is not None:
        raise ProblemError(
            400,
            "Invalid request body",
            "1 field is invalid",
            [{"field": "Url", "message": problem}],
        )


def _existing(conn: Store, principal: Principal, subscription_id: int) -> SubscriptionRecord:
    record = store.get_subscription(conn, principal.service_client_id, subscription_id)
    if record is None:
        raise _not_found(subscription_id)
    return record


def _not_found(subscription_id: int) -> ProblemError:
    return ProblemError(404, "Not Found", f"subscription {subscription_id} not found")


@contextmanager
def _conflicts() -> Iterator[None]:
    """Turn the store's DuplicateSubscriptionError into the 409 problem."""
    try:
        yield
    except DuplicateSubscriptionError as exc:
        conflict = exc.conflict
        raise _conflict(
            exc.message,
            subscriptionId=conflict.subscription_id,
            subscriptionName=conflict.name,
            eventType=conflict.event_type,
            url=conflict.url,
        ) from None


def _check_name_free(
    conn: Store, account: str, name: str, *, current: SubscriptionRecord | None
) -> None:
    """A Name belongs to one subscription of the account (compared case-sensitively, as the CLI
    and the support team resolve names): a create or a rename onto a taken name is a 409. A
    replace that keeps the current name passes, even in a store that already holds duplicates."""
    if current is not None and name == current.name:
        return
    holder = store.find_by_name(conn, account, name)
    if holder is not None:
        raise _conflict(
            f"subscription {holder.id} is already named {name!r}; names are unique in the account",
            subscriptionId=holder.id,
            subscriptionName=holder.name,
        )


def _conflict(message: str, **members: object) -> ProblemError:
    error = ProblemError(409, "Conflict", message)
    # RFC 9457 extension members name what is in the way, for clients to act on.
    error.problem = Problem.model_validate(
        {**error.problem.model_dump(exclude_none=True), **members}
    )
    return error
