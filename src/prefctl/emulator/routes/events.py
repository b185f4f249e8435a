"""``GET /events``: the account's event history (the last 15 days), oldest first, paged.

Filters combine: ``profileId``, ``subscriptionId`` (only events that subscription received; each
then carries its ``SubscriptionId`` and ``EventTime``), ``eventType`` (a name of the catalog, else
400), ``startAt`` / ``endAt`` (RFC 3339 with a time zone, both inclusive, on OriginalEventTime).
Events older than the retention are never listed, whether or not they were purged yet.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Query, Request
from pydantic import AwareDatetime, Field
from starlette.responses import Response

from prefctl.emulator.routes._common import (
    EventsRead,
    ProblemError,
    account_router,
    connection,
    get_ctx,
    json_response,
)
from prefctl.models._base import WireModel
from prefctl.store.events import RETENTION_DAYS, EventQuery, list_events
from prefctl.store.timestamps import epoch
from prefctl.webhooks.catalog import EVENT_TYPES

__all__ = ["EventHistoryPage", "EventRecord", "router"]

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
MAX_ID = 2**63 - 1

router = account_router("events")


class EventRecord(WireModel):
    """A stored event in the notification's shape (docs/webhooks.md)."""

    event_id: str
    event_type: str
    entity: str
    subscription_id: int | None = Field(default=None, description="With subscriptionId only")
    client_id: str
    profile_id: int | None
    event_time: str | None = Field(default=None, description="With subscriptionId only")
    original_event_time: str
    data: dict[str, Any]
    previous_data: dict[str, Any] | None = None


class EventHistoryPage(WireModel):
    """One page of ``GET /events``; pass ``NextCursor`` as ``cursor`` for the next."""

    events: list[EventRecord]
    next_cursor: str | None


@router.get(
    "/events",
    response_model=EventHistoryPage,
    summary="List the events of the last 15 days",
    description="Oldest first. Pass the page's `NextCursor` as `cursor` for the next page "
    "(`NextCursor` is null on the last page).",
)
def get_events(
    request: Request,
    principal: EventsRead,
    profile_id: Annotated[int | None, Query(alias="profileId", ge=1, le=MAX_ID)] = None,
    subscription_id: Annotated[int | None, Query(alias="subscriptionId", ge=1, le=MAX_ID)] = None,
    event_type: Annotated[
        str | None, Query(alias="eventType", max_length=100, description="e.g. profile.updated")
    ] = None,
    start_at: Annotated[AwareDatetime | None, Query(alias="startAt")] = None,
    end_at: Annotated[AwareDatetime | None, Query(alias="endAt")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    if event_type is not None and event_type not in EVENT_TYPES:
        raise ProblemError(
            400,
            "Invalid request",
            f"unknown event type {event_type!r}",
            [{"field": "eventType", "message": "not an event type (prefctl events types)"}],
        )
    if start_at is not None and end_at is not None and start_at > end_at:
        raise ProblemError(
            400,
            "Invalid request",
            "startAt is after endAt",
            [{"field": "startAt", "message": "must not be after endAt"}],
        )
    query = EventQuery(
        profile_id=profile_id,
        subscription_id=subscription_id,
        event_type=event_type,
        start_at=_retained_since(request, start_at),
        end_at=_seconds(end_at),
    )
    page = list_events(
        connection(request), principal.service_client_id, query, limit=limit, cursor=cursor
    )
    return json_response(
        {"Events": [event.to_wire() for event in page.events], "NextCursor": page.next_cursor}
    )


def _retained_since(request: Request, start_at: datetime | None) -> float:
    oldest = epoch(get_ctx(request).clock.now()) - RETENTION_DAYS * 86_400
    asked = _seconds(start_at)
    return oldest if asked is None else max(oldest, asked)


def _seconds(moment: datetime | None) -> float | None:
    # Far-off years overflow a timestamp on some platforms; they bound nothing in practice.
    if moment is None:
        return None
    try:
        return epoch(moment)
    except (OverflowError, OSError, ValueError):
        return float("inf") if moment.year > 2000 else float("-inf")
