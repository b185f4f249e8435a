"""``prefctl deliveries``: the delivery queue of a store and each delivery's attempt timeline.

prefctl deliveries list [--subscription ID] [--state S]… [--event ID]… [--limit N] [--after ID]
prefctl deliveries show ID
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._api import WithCursorOption
from prefctl.cli._complete import delivery_ids
from prefctl.cli._context import get_state
from prefctl.cli._delivery_options import (
    EventOption,
    StoreOption,
    SubscriptionRefOption,
    store_location,
    subscription_id,
)
from prefctl.cli._tables import columns
from prefctl.cli.app import new_group

if TYPE_CHECKING:
    from prefctl.dispatcher.operations import DeliveryTimeline
    from prefctl.store.delivery_history import DeliveryRecord


class StateChoice(StrEnum):
    held = "held"
    queued = "queued"
    in_flight = "in_flight"
    delivered = "delivered"
    dead_lettered = "dead_lettered"


def register(root: typer.Typer) -> None:
    group = new_group(
        "deliveries", "Delivery state of each event and subscription, and the attempt timeline."
    )
    group.command("list")(list_deliveries)
    group.command("show")(show_delivery)
    root.add_typer(group)


# Narrow terminals keep the id, type, subscription and state; the EventId goes first.
LIST_COLUMNS = columns(
    ("delivery_id", "ID"),
    ("event_id", "EVENT ID"),
    ("event_type", "TYPE"),
    ("subscription_id", "SUB"),
    ("state", "STATE"),
    ("attempts", "ATTEMPTS"),
    ("last", "LAST"),
    ("when", "NEXT DUE / FINISHED"),
    drop_first=["event_id", "when", "last", "attempts"],
)


def list_deliveries(
    subscription: SubscriptionRefOption = None,
    states: Annotated[
        list[StateChoice] | None,
        typer.Option(
            "--state", help="Only deliveries in this state (repeatable).", show_default=False
        ),
    ] = None,
    events: EventOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    after: Annotated[
        int,
        typer.Option(
            "--cursor",
            "--after",
            min=0,
            metavar="ID",
            help="Start after this delivery id (the next_cursor of an earlier page).",
        ),
    ] = 0,
    store: StoreOption = None,
    with_cursor: WithCursorOption = False,
) -> None:
    """List deliveries, oldest first: state, attempts, last answer and when the next attempt is due."""
    from prefctl.dispatcher import operations

    state = get_state()
    location = store_location(store)
    with operations.open_existing_store(location) as conn:
        records = operations.list_deliveries(
            conn,
            subscription_id=subscription_id(location, subscription),
            states=[choice.value for choice in states or ()],
            event_ids=events or (),
            limit=limit + 1,
            after_id=after,
        )
    more = len(records) > limit
    records = records[:limit]
    state.out.page(
        [_row(record) for record in records],
        LIST_COLUMNS,
        json_rows=[record.to_dict() for record in records],
        next_cursor=str(records[-1].delivery_id) if more else None,
        with_cursor=with_cursor,
        more=f"showing the first {limit} deliveries; more match: --limit N shows more,"
        " --cursor {cursor} the next ones",
        empty="no deliveries",
    )


def show_delivery(
    delivery_id: Annotated[
        int, typer.Argument(metavar="ID", help="The delivery id.", autocompletion=delivery_ids)
    ],
    store: StoreOption = None,
) -> None:
    """Show a delivery and its attempt timeline: attempt, time, outcome, answer, latency, next due."""
    from prefctl.dispatcher import operations

    state = get_state()
    location = store_location(store)
    with operations.open_existing_store(location) as conn:
        timeline = operations.show_delivery(conn, delivery_id)
    if state.json:
        state.out.json(timeline.to_dict())
        return
    record = timeline.delivery.to_dict()
    state.out.record({k: v for k, v in record.items() if v is not None})
    state.out.line("")
    state.out.table(
        timeline_rows(timeline),
        [
            ("attempt", "#"),
            ("started_at", "TIME"),
            ("outcome", "OUTCOME"),
            ("answer", "STATUS / ERROR"),
            ("latency", "LATENCY"),
            ("next", "NEXT DUE"),
        ],
        title="attempts",
        empty="no attempts yet",
    )


def last_answer(status: int | None, error: str | None) -> str:
    """``503``, ``503 (reason)`` or the error text of an attempt."""
    if status is not None:
        return f"{status} ({error})" if error else str(status)
    return error or ""


def timeline_rows(timeline: DeliveryTimeline) -> list[dict[str, Any]]:
    """One row per attempt; ``next`` is when the following attempt went out, or for the last
    attempt when the next is due (or how the delivery ended).

    Two rows can share an attempt number: a timed-out request answered within the late window
    (``timed_out`` then ``late_delivered``: "answered late", possibly after its retry's row), and a
    delivery put off (``skipped``: probation, or no free connection; then the attempt made
    later). Any other number that is not higher than the last starts a new run of the delivery
    (a redrive or a replay), including a 1 after a run of one attempt."""
    attempts = [attempt.to_dict() for attempt in timeline.attempts]
    rows = []
    for index, attempt in enumerate(attempts):
        following = attempts[index + 1] if index + 1 < len(attempts) else None
        if following is None:
            upcoming = _ending(timeline)
        elif following["outcome"] == "late_delivered":
            number = following["attempt"]
            same = number == attempt["attempt"]
            upcoming = "answered late" if same else f"attempt {number} answered late"
        elif following["attempt"] < attempt["attempt"] or (
            following["attempt"] == attempt["attempt"] and attempt["outcome"] != "skipped"
        ):
            upcoming = "run again (redrive or replay)"
        else:
            upcoming = following["started_at"]
        latency = attempt["latency_ms"]
        rows.append(
            {
                **attempt,
                "answer": last_answer(attempt["status"], attempt["error"]),
                "latency": "" if latency is None else f"{latency:.0f} ms",
                "next": upcoming,
            }
        )
    return rows


def _ending(timeline: DeliveryTimeline) -> str:
    record = timeline.delivery
    if record.state == "dead_lettered":
        return f"dead-lettered: {record.dead_letter_reason}"
    if record.state == "delivered":
        return "delivered"
    return timeline.next_due or record.state


def _row(record: DeliveryRecord) -> dict[str, Any]:
    data = record.to_dict()
    when = data["next_attempt_at"] if record.state == "queued" else data["finished_at"]
    return {**data, "last": last_answer(record.last_status, record.last_error), "when": when}
