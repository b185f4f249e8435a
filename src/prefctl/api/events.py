"""The event history over the REST API (DESIGN §7.2): ``GET /events``, 15 days, paged.

``parse_moment`` reads the CLI's ``--since``/``--until``: an RFC 3339 time
(``2026-11-21T19:20:30Z``) or an age such as ``90s``, ``15m``, ``2h``, ``3d`` (that long before
``now``). Times go to the service as RFC 3339 UTC with milliseconds.

    >>> page = EventsApi(client).list(EventQuery(profile_id=1001, event_type="tag.added"))
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from prefctl.api.client import ApiClient, Page, Resource, all_items, as_page
from prefctl.errors import UsageError

__all__ = ["EventQuery", "EventsApi", "parse_moment"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class EventQuery:
    """Filters of ``GET /events`` (all optional); both time bounds are inclusive."""

    profile_id: int | None = None
    subscription_id: int | None = None
    event_type: str | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None

    def params(self) -> dict[str, str | int | None]:
        from prefctl.models._base import format_timestamp

        return {
            "profileId": self.profile_id,
            "subscriptionId": self.subscription_id,
            "eventType": self.event_type,
            "startAt": None if self.start_at is None else format_timestamp(self.start_at),
            "endAt": None if self.end_at is None else format_timestamp(self.end_at),
        }


def parse_moment(text: str, *, now: datetime, flag: str) -> datetime:
    """An RFC 3339 time with a zone, or an age (``15m``) before ``now``; UsageError otherwise."""
    age = _AGE.match(text)
    if age:
        return now - timedelta(seconds=float(age.group(1)) * _UNITS[age.group(2)])
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise UsageError(
            f"{flag} '{text}' is neither an RFC 3339 time with a zone nor an age",
            hint="e.g. 2026-11-21T19:20:30Z, or 90s, 15m, 2h, 3d",
        )
    return moment


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
