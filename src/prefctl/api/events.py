"""The event history over the REST API (docs/api.md): ``GET /events``, 15 days, paged.

Times go to the service as RFC 3339 UTC with milliseconds (the CLI's ``--since``/``--until`` are
read by ``clock.parse_moment``). A query the service would refuse with HTTP 400 is refused here
first, as a usage error (exit 2): an event type not in the catalog, or a start after the end.

    >>> page = EventsApi(client).list(EventQuery(profile_id=1001, event_type="tag.added"))
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from prefctl.api.client import ApiClient, Page, Resource, all_items, as_page
from prefctl.errors import UsageError

__all__ = ["EventQuery", "EventsApi"]


@dataclass(frozen=True)
class EventQuery:
    """Filters of ``GET /events`` (all optional); both time bounds are inclusive."""

    profile_id: int | None = None
    subscription_id: int | None = None
    event_type: str | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None

    def __post_init__(self) -> None:
        from prefctl.webhooks.catalog import is_event_type

        if self.event_type is not None and not is_event_type(self.event_type):
            raise UsageError(
                f"unknown event type {self.event_type!r}",
                hint="'prefctl events types' lists them",
            )
        if self.start_at is not None and self.end_at is not None and self.start_at > self.end_at:
            from prefctl.models._base import format_timestamp

            raise UsageError(
                f"--since ({format_timestamp(self.start_at)}) is after --until "
                f"({format_timestamp(self.end_at)})",
                hint="an age counts back from now: --since 2h --until 1m",
            )

    def params(self) -> dict[str, str | int | None]:
        from prefctl.models._base import format_timestamp

        return {
            "profileId": self.profile_id,
            "subscriptionId": self.subscription_id,
            "eventType": self.event_type,
            "startAt": None if self.start_at is None else format_timestamp(self.start_at),
            "endAt": None if self.end_at is None else format_timestamp(self.end_at),
        }


class EventsApi:
    """Events the account's profile changes produced (kept 15 days)."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def list(
        self, query: EventQuery, *, limit: int | None = None, cursor: str | None = None
    ) -> Page:
        """One page of events, oldest first."""
        params = {**query.params(), "limit": limit, "cursor": cursor}
        return as_page(self.client.get("/events", params), "Events", "GET /events")

    def list_all(self, query: EventQuery, *, page_size: int | None = None) -> Iterator[Resource]:
        """Every matching event, page after page."""
        return all_items(lambda cursor: self.list(query, limit=page_size, cursor=cursor))
