"""``prefctl alerts``: the failure-alert emails the dispatcher sent (docs/alerts.md).

They are read from the store's record of every alert (SMTP-sent ones included: the data dir's
store, the PostgreSQL database its emulator serves, or ``--store``) and the data dir's mbox
``alerts.mbox``.

    prefctl alerts list --subscription orders --since 1h
    prefctl alerts show 3
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import get_state
from prefctl.cli._delivery_options import DataDirOption, StoreOption, chosen_store
from prefctl.cli._tables import columns
from prefctl.cli.app import new_group

if TYPE_CHECKING:
    from prefctl.dispatcher.alerts.log import AlertEntry


def register(root: typer.Typer) -> None:
    group = new_group("alerts", "Failure-alert emails sent for dead-lettered events.")
    group.command("list")(list_alerts)
    group.command("show")(show_alert)
    root.add_typer(group)


# Narrow terminals keep the subscription (what --subscription takes), kind and recipients.
LIST_COLUMNS = columns(
    ("id", "ID"),
    ("created_at", "WRITTEN"),
    ("subscription", "SUBSCRIPTION"),
    ("kind", "KIND"),
    ("dead_letters", "DEAD LETTERS"),
    ("sink", "SENT BY"),
    ("recipients", "TO"),
    drop_first=["created_at", "sink", "dead_letters"],
)


def list_alerts(
    subscription: Annotated[
        str | None,
        typer.Option(
            "--subscription",
            "-s",
            metavar="NAME|ID",
            help="Only alerts of this subscription (its Name or Id).",
            show_default=False,
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="TIME",
            help="Only alerts written at or after TIME: RFC 3339, or an age such as 15m, 2h, 3d.",
            show_default=False,
        ),
    ] = None,
    data_dir: DataDirOption = None,
    store: StoreOption = None,
) -> None:
    """List the alert emails, oldest first, whether they went by SMTP or into alerts.mbox."""
    from prefctl.cli._delivery_options import moment
    from prefctl.config.paths import resolve_data_dir
    from prefctl.dispatcher.alerts import log as alert_log

    state = get_state()
    start = moment(since, "--since")
    entries = alert_log.list_alerts(
        resolve_data_dir(data_dir),
        location=chosen_store(store, data_dir),
        subscription=subscription,
        since=start,
    )
    records = [entry.to_dict() for entry in entries]
    rows = [_row(record) for record in records]
    state.out.table(
        rows,
        LIST_COLUMNS,
        json_rows=records,
        empty="no alerts",
    )


def show_alert(
    alert: Annotated[
        str, typer.Argument(metavar="ID", help="The alert's ID (from 'alerts list') or Message-ID.")
    ],
    data_dir: DataDirOption = None,
    store: StoreOption = None,
) -> None:
    """Show one alert email as its recipients read it, with how it was sent."""
    from prefctl.config.paths import resolve_data_dir
    from prefctl.dispatcher.alerts import log as alert_log

    state = get_state()
    entry = alert_log.show_alert(
        resolve_data_dir(data_dir), alert, location=chosen_store(store, data_dir)
    )
    record = entry.to_dict()
    if state.json:
        state.out.json({**record, "body": entry.message.get_content(), "message": _text(entry)})
        return
    sending = {
        "id": record["id"],
        "sent by": record["sink"] if record["state"] == "sent" else "not sent yet",
        "sent at": record["sent_at"],
        "smtp error": record["smtp_error"],
    }
    state.out.record({key: value for key, value in sending.items() if value is not None})
    state.out.line("")
    for name in ("From", "To", "Subject", "Date", "Message-ID"):
        state.out.line(f"{name}: {entry.message[name]}")
    state.out.line("")
    state.out.line(entry.message.get_content().rstrip("\n"))


def _row(record: dict[str, Any]) -> dict[str, Any]:
    name, number = record["subscription_name"], record["subscription_id"]
    kind = record["kind"] if record["state"] == "sent" else f"{record['kind']} (pending)"
    return {**record, "subscription": f"{name} ({number})", "kind": kind}


def _text(entry: AlertEntry) -> str:
    if entry.record is not None:
        return entry.record.message
    return entry.message.as_string()
