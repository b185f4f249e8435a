"""``prefctl emulator alerts``: turn failure-alert emails on or off for a subscription.

On the real service, alerts are enabled by the support team on request (spec "Rules" 12); the REST
API refuses to change them. Like ``emulator clients``, this acts on the emulator's store directly,
so it works whether or not the emulator is running.

    prefctl emulator alerts enable --subscription crm --recipient ops@example.com
    prefctl emulator alerts disable --subscription crm
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import get_state
from prefctl.cli.app import new_group
from prefctl.cli.emulator import DataDirOption
from prefctl.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from prefctl.store.subscriptions import SubscriptionRecord

SubscriptionOption = Annotated[
    str,
    typer.Option(
        "--subscription", "-s", metavar="NAME|ID", help="The subscription's Name (or Id)."
    ),
]


def alerts_group() -> typer.Typer:
    """The ``alerts`` sub-group of ``prefctl emulator``."""
    group = new_group("alerts", "Failure-alert emails of subscriptions (a support-team operation).")
    group.command("enable")(enable)
    group.command("disable")(disable)
    return group


def enable(
    subscription: SubscriptionOption,
    recipient: Annotated[
        list[str],
        typer.Option("--recipient", "-r", metavar="EMAIL", help="An address to alert (repeat)."),
    ],
    data_dir: DataDirOption = None,
) -> None:
    """Send failure alerts for a subscription to these recipients (replacing earlier ones).

    Alerts follow the account's AlertFrequency and AlertThreshold settings; they land in alerts.mbox in the data dir, or go out by SMTP when configured.
    """
    _show(_set_alerts(data_dir, subscription, enabled=True, recipients=recipient))


def disable(subscription: SubscriptionOption, data_dir: DataDirOption = None) -> None:
    """Stop failure alerts for a subscription."""
    _show(_set_alerts(data_dir, subscription, enabled=False, recipients=[]))


def _set_alerts(
    data_dir: Path | None, ref: str, *, enabled: bool, recipients: list[str]
) -> SubscriptionRecord:
    from prefctl.clock import SystemClock
    from prefctl.emulator import admin
    from prefctl.emulator.paths import resolve_data_dir
    from prefctl.store import subscriptions
    from prefctl.store.db import transaction
    from prefctl.store.timestamps import epoch

    checked = _checked_recipients(recipients) if enabled else []
    clock = SystemClock()
    with admin.open_admin_store(resolve_data_dir(data_dir)) as conn:
        account = admin.bootstrap(conn, clock).account.service_client_id
        with transaction(conn):
            record = _find(subscriptions.list_subscriptions(conn, account), ref)
            return subscriptions.set_alerts(
                conn,
                account,
                record.id,
                enabled=enabled,
                recipients=checked,
                actor="support-team",
                now=epoch(clock.now()),
            )


def _checked_recipients(recipients: list[str]) -> list[str]:
    from pydantic import ValidationError

    from prefctl.models.subscription import Alerts

    try:
        alerts = Alerts(enabled=True, recipients=[r.strip() for r in recipients])
    except ValidationError as exc:
        error = exc.errors()[0]
        index = next((part for part in error["loc"] if isinstance(part, int)), None)
        shown = recipients[index] if index is not None else ", ".join(recipients)
        raise UsageError(f"--recipient {shown!r} is not an email address") from None
    return list(dict.fromkeys(alerts.recipients))


def _find(records: list[SubscriptionRecord], ref: str) -> SubscriptionRecord:
    ref = ref.strip()
    matches = [r for r in records if r.name == ref or (ref.isdigit() and r.id == int(ref))]
    if not matches:
        raise NotFoundError(
            f"no subscription named {ref!r} in the emulator",
            hint="'prefctl subscriptions list' shows them",
        )
    if len(matches) > 1:
        ids = ", ".join(str(r.id) for r in matches)
        raise UsageError(f"{len(matches)} subscriptions match {ref!r}", hint=f"use an Id: {ids}")
    return matches[0]


def _show(record: SubscriptionRecord) -> None:
    state = get_state()
    data: dict[str, Any] = {
        "subscription_id": record.id,
        "name": record.name,
        "url": record.url,
        "alerts_enabled": record.alerts_enabled,
        "recipients": record.alert_recipients,
    }
    state.out.record(data)
    if record.alerts_enabled:
        state.out.success(
            f"alerts for subscription {record.id} go to {', '.join(record.alert_recipients)}"
        )
    else:
        state.out.success(f"alerts for subscription {record.id} are off")
