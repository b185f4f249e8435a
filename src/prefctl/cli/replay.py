"""``prefctl replay``: re-deliver stored, dead-lettered or captured events through the dispatcher.

prefctl replay --file capture.ndjson --subscription 12
prefctl replay --dead-lettered --reason PayloadTooLarge
prefctl replay --event 0d6f… --to http://127.0.0.1:3000/hook
prefctl replay --since 2h --store ./ci.db
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prefctl.cli._context import get_state
from prefctl.cli._delivery_options import (
    EventOption,
    ReasonOption,
    StatusOption,
    StoreOption,
    dead_letter_filter,
    moment,
    store_location,
    subscription_id,
)
from prefctl.cli._tables import columns
from prefctl.dispatcher.rule_time import MAX_TIME_SCALE, MIN_TIME_SCALE
from prefctl.errors import PrefctlError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from prefctl.cli._output import Advance
    from prefctl.dispatcher.replay.run import ReplayProgress, ReplaySummary
    from prefctl.webhooks.signature import SigningCredentials


def register(root: typer.Typer) -> None:
    root.command("replay")(replay)


def replay(
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            metavar="FILE",
            help="Replay the events in FILE: a 'prefctl receive --record' recording, a "
            "'deadletters export', or NDJSON events.",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    dead_lettered: Annotated[
        bool,
        typer.Option(
            "--dead-lettered",
            help="Replay dead letters (filtered by --reason, --status, --from-subscription, "
            "--event, --since, --until).",
        ),
    ] = False,
    events: EventOption = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="TIME",
            help="Stored events that happened at or after TIME (with --dead-lettered: "
            "dead-lettered at or after): RFC 3339, or an age such as 15m, 2h, 3d.",
            show_default=False,
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            metavar="TIME",
            help="Up to this time (same forms and meaning as --since).",
            show_default=False,
        ),
    ] = None,
    reason: ReasonOption = None,
    status: StatusOption = None,
    from_subscription: Annotated[
        str | None,
        typer.Option(
            "--from-subscription",
            metavar="NAME|ID",
            help="Only dead letters of, or stored events queued for, this subscription.",
            show_default=False,
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="URL",
            help="Deliver to this URL once, outside the subscriptions (signed, with retries).",
            show_default=False,
        ),
    ] = None,
    subscription: Annotated[
        str | None,
        typer.Option(
            "--subscription",
            metavar="NAME|ID",
            help="Queue the events for this subscription (default: the subscription each event "
            "was queued for).",
            show_default=False,
        ),
    ] = None,
    max_attempts: Annotated[
        int | None,
        typer.Option(
            "--max-attempts",
            min=1,
            max=30,
            help="With --to: attempts per event before it is dead-lettered "
            "(default: the account's MaxDeliveryAttempts).",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.001,
            metavar="SECONDS",
            help="Stop waiting after this long; events still pending make the exit code 1.",
        ),
    ] = 300.0,
    no_wait: Annotated[
        bool,
        typer.Option("--no-wait", help="Only queue the events; do not wait for the outcome."),
    ] = False,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale",
            min=MIN_TIME_SCALE,
            max=MAX_TIME_SCALE,
            help="Without an emulator: divide the delivery-rule durations (backoff, TTL) by this.",
        ),
    ] = 1.0,
    store: StoreOption = None,
) -> None:
    """Re-deliver stored, dead-lettered or captured events, with their original EventIds.

    Each replayed delivery starts over: attempts from 0 and a new EventTime.
    When an emulator serves the store, its dispatcher delivers and replay waits; otherwise the dispatcher runs in this process until the replayed events are delivered or dead-lettered.
    Exit 0 when every event was delivered, 1 when any was dead-lettered or still pending.
    """
    from prefctl.dispatcher.replay.queue import ReplaySource
    from prefctl.dispatcher.replay.run import ReplayConfig, ReplayTarget
    from prefctl.dispatcher.replay.run import replay as run_replay
    from prefctl.emulator import daemon

    default_store = store_location(store)
    from_id = subscription_id(default_store, from_subscription)
    target_id = subscription_id(default_store, subscription)
    if dead_lettered:
        source = ReplaySource(
            file=file,
            dead_lettered=dead_letter_filter(
                reason=reason,
                status=status,
                subscription=from_id,
                events=events,
                since=since,
                until=until,
            ),
        )
    else:
        if reason is not None or status is not None:
            raise UsageError("--reason and --status filter dead letters: add --dead-lettered")
        source = ReplaySource(
            file=file,
            event_ids=tuple(events or ()),
            since=moment(since, "--since"),
            until=moment(until, "--until"),
            from_subscription=from_id,
        )
    store_path: Path | str | None = default_store
    no_file = isinstance(default_store, Path) and not default_store.is_file()
    if store is None and file is not None and to is not None and no_file:
        store_path = None  # a capture sent to a URL needs no store (only its account, if any)
    with contextlib.ExitStack() as stack:
        config = ReplayConfig(
            store_path=store_path,
            source=source,
            target=ReplayTarget(url=to, subscription_id=target_id),
            wait=not no_wait,
            timeout=timeout,
            max_attempts=max_attempts,
            time_scale=time_scale,
            credentials=_profile_credentials,
            on_progress=_progress_bar(stack),
            served=daemon.serves,
        )
        summary = run_replay(config)
    _render(summary)
    if not summary.succeeded:
        raise PrefctlError(_failure(summary, timeout))


def _profile_credentials() -> SigningCredentials:
    from prefctl.webhooks.credentials import load_signing_credentials

    state = get_state()
    return load_signing_credentials(state.config(), state.profile_name)


def _progress_bar(stack: contextlib.ExitStack) -> Callable[[ReplayProgress], None]:
    """A progress bar on stderr, opened once the number of replayed deliveries is known."""
    out = get_state().out
    shown = {"finished": 0}
    advance: list[Advance] = []

    def on_progress(progress: ReplayProgress) -> None:
        if out.json_mode or out.quiet:
            return
        if not advance:
            advance.append(stack.enter_context(out.progress("replaying", progress.total)))
        advance[0](progress.finished - shown["finished"])
        shown["finished"] = progress.finished

    return on_progress


# As 'deadletters list': the EventId goes first, the reason stays.
FAILED_COLUMNS = columns(
    ("event_id", "EVENT ID"),
    ("event_type", "TYPE"),
    ("subscription_id", "SUB"),
    ("state", "STATE"),
    ("reason", "REASON"),
    ("attempts", "ATTEMPTS"),
    ("last", "LAST"),
    drop_first=["event_id", "last", "attempts"],
)


def _render(summary: ReplaySummary) -> None:
    out = get_state().out
    if out.json_mode:
        out.json(summary.to_dict())
        return
    if not summary.outcomes:
        out.info("nothing to replay: no event matched")
    data = summary.to_dict()
    counts = {key: data[key] for key in ("total", "delivered", "dead_lettered", "pending")}
    counts.update(
        {
            key: data[key]
            for key in ("skipped", "duplicates", "of_deleted_subscriptions")
            if data[key]
        }
    )
    counts["elapsed"] = f"{summary.elapsed_seconds:.1f} s"
    counts["dispatcher"] = summary.dispatcher
    out.record(counts, title="replay")
    if summary.of_deleted_subscriptions:
        out.warn(
            f"left {summary.of_deleted_subscriptions} of deleted subscriptions: they have nowhere"
            " to go; replay them with --to URL or --subscription ID"
        )
    failed = [o.to_dict() for o in summary.outcomes if o.state != "delivered"]
    if failed and summary.waited:
        from prefctl.cli.deliveries import last_answer

        out.line("")
        out.table(
            [{**row, "last": last_answer(row["last_status"], row["last_error"])} for row in failed],
            FAILED_COLUMNS,
            title="not delivered",
        )


def _failure(summary: ReplaySummary, timeout: float) -> str:
    parts = []
    if summary.dead_lettered:
        parts.append(f"{summary.dead_lettered} dead-lettered")
    if summary.pending:
        parts.append(f"{summary.pending} still pending after {timeout:g} s")
    return f"{len(summary.outcomes)} replayed: " + ", ".join(parts)
