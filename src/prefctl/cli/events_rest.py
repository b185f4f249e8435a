"""``prefctl events list`` and ``prefctl events trigger``: the ``events`` commands that use the REST
API (registered by ``prefctl.cli.events``).

    prefctl events list --profile-id 1001 --since 2h
    prefctl events trigger contacts.email.added                → the EventIds, one per line
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from prefctl.api.shapes import scalar
from prefctl.cli._api import (
    AllPagesOption,
    CursorOption,
    WithCursorOption,
    YesOption,
    api_client,
)
from prefctl.cli._complete import event_types, subscription_refs
from prefctl.cli._context import get_state
from prefctl.cli._tables import columns

__all__ = ["list_events", "trigger_event"]


# Narrow terminals keep the time, type and ProfileId; the EventId goes first.
LIST_COLUMNS = columns(
    ("OriginalEventTime", "ORIGINAL TIME"),
    ("EventType", "TYPE"),
    ("ProfileId", "PROFILE"),
    ("EventId", "EVENT ID"),
    drop_first=["EventId"],
)
# With --subscription: the time it was queued for that subscription, too.
SUBSCRIPTION_LIST_COLUMNS = columns(
    ("OriginalEventTime", "ORIGINAL TIME"),
    ("EventTime", "EVENT TIME"),
    ("EventType", "TYPE"),
    ("ProfileId", "PROFILE"),
    ("EventId", "EVENT ID"),
    drop_first=["EventId", "EventTime"],
)


def list_events(
    profile_id: Annotated[
        int | None,
        typer.Option("--profile-id", min=1, help="Only this profile's events.", show_default=False),
    ] = None,
    subscription: Annotated[
        str | None,
        typer.Option(
            "--subscription",
            metavar="ID|NAME",
            help="Only the events this subscription received (with their EventTime).",
            autocompletion=subscription_refs,
            show_default=False,
        ),
    ] = None,
    event_type: Annotated[
        str | None,
        typer.Option(
            "--type",
            "-t",
            help="Only this event type.",
            show_default=False,
            autocompletion=event_types,
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="From this time: RFC 3339, or an age such as 15m, 2h, 3d.",
            show_default=False,
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until", help="Up to this time (same forms as --since).", show_default=False
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=1,
            max=500,
            help="Events per page (the service's default: 100).",
            show_default=False,
        ),
    ] = None,
    cursor: CursorOption = None,
    all_pages: AllPagesOption = False,
    with_cursor: WithCursorOption = False,
) -> None:
    """List stored events (the last 15 days), oldest first, by OriginalEventTime.

    One page is listed unless --all is given; the next page's cursor is shown on stderr.
    With -o json each event is printed as the API returns it.
    """
    from prefctl.api.events import EventQuery, EventsApi
    from prefctl.api.subscriptions import SubscriptionsApi
    from prefctl.api.subscriptions import subscription_id as id_of
    from prefctl.clock import SystemClock, parse_moment

    state = get_state()
    now = SystemClock().now()
    next_cursor = None
    with api_client(state) as client:
        subscription_id = None
        if subscription is not None:
            subscription_id = id_of(SubscriptionsApi(client).resolve(subscription))
        query = EventQuery(
            profile_id=profile_id,
            subscription_id=subscription_id,
            event_type=event_type,
            start_at=None if since is None else parse_moment(since, now=now, flag="--since"),
            end_at=None if until is None else parse_moment(until, now=now, flag="--until"),
        )
        table = LIST_COLUMNS if subscription_id is None else SUBSCRIPTION_LIST_COLUMNS
        api = EventsApi(client)
        keys = [key for key, _ in table.columns]

        def row(event: dict[str, Any]) -> dict[str, Any]:
            # A field the service sent in another shape is an empty cell (api/shapes).
            return {key: scalar(event.get(key)) for key in keys}

        if all_pages:
            events = api.list_all(query, page_size=limit or 500)
            state.out.listing(events, table, noun="events", summary=row, empty="no events")
            return
        page = api.list(query, limit=limit, cursor=cursor)
        items, next_cursor = page.items, page.next_cursor
    state.out.page(
        [row(e) for e in items],
        table,
        json_rows=items,
        next_cursor=next_cursor,
        with_cursor=with_cursor,
        more="more events: --cursor {cursor}, or --all",
        empty="no events",
    )


def trigger_event(
    event_type: Annotated[
        str,
        typer.Argument(
            metavar="TYPE",
            help="The event type to produce, e.g. tag.added.",
            autocompletion=event_types,
        ),
    ],
    profile_id: Annotated[
        int | None,
        typer.Option(
            "--profile-id",
            min=1,
            help="Change this profile (default: a new throwaway profile).",
            show_default=False,
        ),
    ] = None,
    filter_value: Annotated[
        str | None,
        typer.Option(
            "--filter",
            help="The value subscription filters match: a preference's Filter, the ConsentType, "
            "a contact's Type, a custom field's or group's Name.",
            show_default=False,
        ),
    ] = None,
    yes: YesOption = False,
) -> None:
    """Make the service perform a real profile change that yields TYPE, and print its EventIds.

    Works for every type of 'prefctl events types'; setup changes come first when the change needs them (an email to delete is added first).
    Without --profile-id a throwaway profile is created; the changes stay on the profile.
    Subscribers of TYPE are sent the event, like for any other change.
    """
    import random

    from prefctl.api.trigger import trigger

    state = get_state()
    if event_type == "profile.deleted" and profile_id is not None:
        state.out.confirm(f"Delete profile {profile_id} for good?", assume_yes=yes)
    with api_client(state) as client:
        result = trigger(
            client,
            event_type.strip(),
            profile_id=profile_id,
            rng=random.Random(),
            filter_value=filter_value,
        )
    if state.json:
        state.out.json(
            {
                "event_type": result.event_type,
                "profile_id": result.profile_id,
                "created_profile": result.created_profile,
                "event_ids": result.event_ids,
            }
        )
    else:
        for event_id in result.event_ids:
            state.out.line(event_id)
    made = "a new profile" if result.created_profile else "profile"
    state.out.success(
        f"{result.event_type} on {made} {result.profile_id}: "
        f"{len(result.event_ids)} event{'' if len(result.event_ids) == 1 else 's'}"
    )
