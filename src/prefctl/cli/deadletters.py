"""``prefctl deadletters``: inspect, redrive, export and purge the dead-letter queue.

prefctl deadletters list [--reason R] [--status CODE] [--subscription ID] [--since T] [--until T]
prefctl deadletters show EVENT_ID|DELIVERY_ID
prefctl deadletters redrive (filters | --all)
prefctl deadletters export (filters) [--file F] [--format ndjson|json]
prefctl deadletters purge (filters | --all) [--yes]
"""

from __future__ import annotations

import contextlib
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prefctl.cli._api import YesOption
from prefctl.cli._complete import dead_letter_ids
from prefctl.cli._context import get_state
from prefctl.cli._delivery_options import (
    EventOption,
    ReasonOption,
    SinceOption,
    StatusOption,
    StoreOption,
    SubscriptionRefOption,
    UntilOption,
    dead_letter_filter,
    store_location,
    subscription_id,
)
from prefctl.cli._output import writing_stdout
from prefctl.cli._tables import columns
from prefctl.cli.app import examples, new_group
from prefctl.cli.deliveries import last_answer, timeline_rows
from prefctl.dispatcher.policy import DeadLetterReason
from prefctl.errors import UsageError

if TYPE_CHECKING:
    from prefctl.dispatcher.deadletters import DeadLetterDetail, DeadLetterFilter, ExportFormat
    from prefctl.store import Store

SubscriptionOption = SubscriptionRefOption
AllOption = Annotated[
    bool, typer.Option("--all", help="Select every dead letter (when no filter is given).")
]

# Narrow terminals keep the type, subscription and reason; the 36-character EventId goes first.
LIST_COLUMNS = columns(
    ("event_id", "EVENT ID"),
    ("event_type", "TYPE"),
    ("subscription_id", "SUB"),
    ("reason", "REASON"),
    ("attempts", "ATTEMPTS"),
    ("last", "LAST"),
    ("last_attempt_at", "LAST ATTEMPT"),
    drop_first=["event_id", "last_attempt_at", "last", "attempts"],
)


class ExportFormatChoice(StrEnum):
    ndjson = "ndjson"
    json = "json"


def register(root: typer.Typer) -> None:
    group = new_group(
        "deadletters",
        "The dead-letter queue: list, show, redrive, export and purge, filtered by reason, "
        "status, subscription and time.",
        epilog=examples(
            ("prefctl deadletters list --reason PayloadTooLarge", "what was refused as too large"),
            (
                "prefctl deadletters redrive --subscription crm --since 1h",
                "send the last hour's dead letters of 'crm' again",
            ),
        ),
    )
    group.command("list")(list_dead_letters)
    group.command("show")(show_dead_letter)
    group.command("redrive")(redrive)
    group.command("export")(export)
    group.command("purge")(purge)
    root.add_typer(group)


def list_dead_letters(
    reason: ReasonOption = None,
    status: StatusOption = None,
    subscription: SubscriptionOption = None,
    events: EventOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", min=1, help="At most this many ('deadletters export' writes them all)."
        ),
    ] = 100,
    store: StoreOption = None,
) -> None:
    """List dead letters, oldest first: event, subscription, reason, attempts and last answer.

    At most --limit (100); when more match, stderr says so.
    """
    from prefctl.dispatcher import deadletters, operations

    location = store_location(store)
    selection = dead_letter_filter(
        reason=reason,
        status=status,
        subscription=subscription_id(location, subscription),
        events=events,
        since=since,
        until=until,
    )
    with operations.open_existing_store(location) as conn:
        records = deadletters.list_dead_letters(conn, selection, limit=limit + 1)
    more = len(records) > limit
    rows = [deadletters.dead_letter_dict(record) for record in records[:limit]]
    state = get_state()
    state.out.table(
        [{**row, "last": last_answer(row["last_status"], row["last_error"])} for row in rows],
        LIST_COLUMNS,
        json_rows=rows,
        empty="no dead letters",
    )
    if more:
        state.out.info(
            f"showing the first {limit} dead letters; more match: --limit N shows more,"
            " 'prefctl deadletters export' writes them all"
        )


def show_dead_letter(
    name: Annotated[
        str,
        typer.Argument(
            metavar="ID",
            help="EventId of the dead letter, or its delivery id (digits).",
            autocompletion=dead_letter_ids,
        ),
    ],
    store: StoreOption = None,
) -> None:
    """Show a dead letter: why it was dead-lettered, its attempt timeline and the event it carries.

    An EventId dead-lettered for several subscriptions shows each of them.
    """
    from prefctl.dispatcher import deadletters, operations

    state = get_state()
    location = store_location(store)
    with operations.open_existing_store(location) as conn:
        details = deadletters.show_dead_letter(conn, name)
    if state.json:
        data = [detail.to_dict() for detail in details]
        state.out.json(data[0] if len(data) == 1 else data)
        return
    for index, detail in enumerate(details):
        if index:
            state.out.line("")
        _render_detail(detail)


def _render_detail(detail: DeadLetterDetail) -> None:
    from prefctl.cli._output import to_json
    from prefctl.dispatcher.operations import DeliveryTimeline

    out = get_state().out
    data = detail.to_dict()
    out.record({k: v for k, v in data.items() if k not in ("timeline", "event")})
    out.line("")
    out.table(
        timeline_rows(DeliveryTimeline(detail.record, detail.attempts)),
        [
            ("attempt", "#"),
            ("started_at", "TIME"),
            ("outcome", "OUTCOME"),
            ("answer", "STATUS / ERROR"),
            ("latency", "LATENCY"),
        ],
        title="attempts",
        empty="no attempts recorded",
    )
    if detail.event is not None:
        out.line("")
        out.line(to_json(detail.event))


def redrive(
    reason: ReasonOption = None,
    status: StatusOption = None,
    subscription: SubscriptionOption = None,
    events: EventOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    select_all: AllOption = False,
    store: StoreOption = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Accepted as by purge; redrive loses nothing, so never asks."
        ),
    ] = False,
) -> None:
    """Queue the selected dead letters again, to the same subscription, as fresh deliveries.

    The EventId stays; attempts start from 0 and the EventTime is now, so the time-to-live runs again.
    The emulator's dispatcher (or 'prefctl dispatcher run') delivers them; 'prefctl replay --dead-lettered' also waits for the outcome.
    """
    from prefctl.clock import SystemClock
    from prefctl.dispatcher import deadletters, operations
    from prefctl.emulator import daemon
    from prefctl.store.timestamps import epoch

    state = get_state()
    location = store_location(store)
    selection = _selection(
        reason, status, subscription_id(location, subscription), events, since, until, select_all
    )
    with operations.open_existing_store(location) as conn:
        done = deadletters.redrive_dead_letters(conn, selection, now=epoch(SystemClock().now()))
    records, left = done.requeued, done.of_deleted_subscriptions
    if state.json:
        state.out.json(
            {
                "requeued": len(records),
                "event_ids": [record.event_id for record in records],
                "of_deleted_subscriptions": len(left),
            }
        )
    noun = "dead letter" if len(records) == 1 else "dead letters"
    state.out.success(f"requeued {len(records)} {noun}")
    if left:
        ids = ", ".join(str(i) for i in sorted({record.subscription_id for record in left}))
        state.out.warn(
            f"left {len(left)} of deleted subscription(s) {ids}: they have nowhere to go;"
            " 'prefctl replay --dead-lettered --to URL' re-delivers them"
        )
    if records and not daemon.serves(location):
        where = operations.describe_store(location)
        if isinstance(location, str):  # a PostgreSQL store: its dispatchers may run anywhere
            state.out.info(
                "no emulator on this machine serves this store: its dispatchers deliver them, "
                f"or 'prefctl dispatcher run --store {where}'"
            )
        else:
            state.out.info(
                f"no emulator serves this store: 'prefctl dispatcher run' delivers them (--store {where})"
            )


def export(
    reason: ReasonOption = None,
    status: StatusOption = None,
    subscription: SubscriptionOption = None,
    events: EventOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            metavar="FILE",
            help="Write to FILE (mode 0600) instead of stdout.",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    fmt: Annotated[
        ExportFormatChoice,
        typer.Option("--format", help="ndjson: one dead letter per line; json: one array."),
    ] = ExportFormatChoice.ndjson,
    store: StoreOption = None,
) -> None:
    """Export dead letters with the events they carry, for 'prefctl replay --file' or a bug report.

    Each record is the dead letter plus "event": the notification as it was sent.
    """
    from prefctl.dispatcher import deadletters, operations

    state = get_state()
    location = store_location(store)
    selection = dead_letter_filter(
        reason=reason,
        status=status,
        subscription=subscription_id(location, subscription),
        events=events,
        since=since,
        until=until,
    )
    # A spinner on stderr while a large export runs, unless the export itself goes to the terminal.
    spinner = (
        state.out.status("exporting dead letters…")
        if file is not None or not state.out.stdout_is_terminal
        else contextlib.nullcontext()
    )
    with spinner, operations.open_existing_store(location) as conn:
        if file is None:
            count = deadletters.export_dead_letters(conn, selection, _stdout_write, fmt=fmt.value)
            with writing_stdout() as stdout:
                stdout.flush()
        else:
            count = _export_to_file(
                conn, selection, file, "json" if fmt.value == "json" else "ndjson"
            )
    if file is not None and state.json:
        state.out.json({"exported": count, "file": str(file)})
    noun = "dead letter" if count == 1 else "dead letters"
    state.out.success(f"exported {count} {noun}" + (f" to {file}" if file else ""))


def _stdout_write(data: bytes) -> None:
    with writing_stdout() as stdout:
        stdout.write(data.decode("utf-8"))


def _export_to_file(conn: Store, selection: DeadLetterFilter, file: Path, fmt: ExportFormat) -> int:
    from prefctl.dispatcher.deadletters import export_dead_letters
    from prefctl.private_files import replacing_private

    # Written beside FILE and renamed over it once complete: two exports to one file at once
    # each leave a whole file (the last wins), and a failed one leaves FILE as it was. 0600:
    # events carry personal data. A FILE that exists and is no regular file (/dev/stdout, a
    # pipe) is written as it is.
    try:
        if file.exists() and not file.is_file():
            with file.open("wb") as fh:
                return export_dead_letters(conn, selection, fh.write, fmt=fmt)
        with replacing_private(file.resolve()) as fh:
            return export_dead_letters(conn, selection, fh.write, fmt=fmt)
    except OSError as exc:
        from prefctl.private_files import os_reason

        raise UsageError(f"cannot write {file}: {os_reason(exc)}") from None


def purge(
    reason: ReasonOption = None,
    status: StatusOption = None,
    subscription: SubscriptionOption = None,
    events: EventOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    select_all: AllOption = False,
    yes: YesOption = False,
    store: StoreOption = None,
) -> None:
    """Delete the selected dead letters and their attempt logs (the events stay for replay).

    Asks for confirmation on a terminal; elsewhere --yes is required.
    """
    from prefctl.dispatcher import deadletters, operations

    state = get_state()
    location = store_location(store)
    selection = _selection(
        reason, status, subscription_id(location, subscription), events, since, until, select_all
    )
    with operations.open_existing_store(location) as conn:
        listed = deadletters.list_dead_letters(conn, selection)
        count = 0
        if listed:
            noun = "dead letter" if len(listed) == 1 else "dead letters"
            state.out.confirm(f"delete {len(listed)} {noun}?", assume_yes=yes)
            counted = {record.delivery_id for record in listed}
            count = deadletters.purge_dead_letters(conn, selection, counted=counted)
    if state.json:
        state.out.json({"purged": count})
    state.out.success(f"purged {count} {'dead letter' if count == 1 else 'dead letters'}")


def _selection(
    reason: DeadLetterReason | None,
    status: int | None,
    subscription: int | None,
    events: list[str] | None,
    since: str | None,
    until: str | None,
    select_all: bool,
) -> DeadLetterFilter:
    """The filter of a bulk action; with no filter at all, ``--all`` must say so."""
    filtered = any(v is not None for v in (reason, status, subscription, since, until)) or events
    if not filtered and not select_all:
        raise UsageError(
            "select dead letters with --reason, --status, --subscription, --event, --since "
            "or --until, or pass --all"
        )
    return dead_letter_filter(
        reason=reason,
        status=status,
        subscription=subscription,
        events=events,
        since=since,
        until=until,
    )
