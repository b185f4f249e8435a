"""``prefctl emulator alerts``: turn failure-alert emails on or off for a subscription.

On the real service, alerts are enabled by the support team on request (spec "Rules" 12); the REST
API refuses to change them. Like ``emulator clients``, this acts on the emulator's store directly
(``--store``, as ``admin_store`` finds it), so it works whether or not the emulator is running, and
on one account's subscriptions (``--account``; another account's is not found, like a missing one).

    prefctl emulator alerts enable --subscription crm --recipient ops@example.com
    prefctl emulator alerts disable --subscription crm --account TEAM_A
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._complete import subscription_refs
from prefctl.cli._context import get_state
from prefctl.cli._delivery_options import (
    AccountOption,
    AdminStoreOption,
    DataDirOption,
    admin_store,
)
from prefctl.cli.app import new_group

if TYPE_CHECKING:
    from pathlib import Path

    from prefctl.store.subscriptions import SubscriptionRecord

SubscriptionOption = Annotated[
    str,
    typer.Option(
        "--subscription",
        "-s",
        metavar="NAME|ID",
        help="The subscription's Name (or Id).",
        autocompletion=subscription_refs,
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
    account: AccountOption = None,
    data_dir: DataDirOption = None,
    store: AdminStoreOption = None,
) -> None:
    """Send failure alerts for a subscription of an account to these recipients (replacing
    earlier ones). Exit code 4 when the account has no such subscription.

    Alerts follow the account's AlertFrequency and AlertThreshold settings; they land in alerts.mbox in the data dir, or go out by SMTP when configured.
    """
    _show(_set_alerts(data_dir, store, account, subscription, enabled=True, recipients=recipient))


def disable(
    subscription: SubscriptionOption,
    account: AccountOption = None,
    data_dir: DataDirOption = None,
    store: AdminStoreOption = None,
) -> None:
    """Stop failure alerts for a subscription of an account (exit code 4 when the account has no
    such subscription)."""
    _show(_set_alerts(data_dir, store, account, subscription, enabled=False, recipients=[]))


def _set_alerts(
    data_dir: Path | None,
    store: str | None,
    account: str | None,
    ref: str,
    *,
    enabled: bool,
    recipients: list[str],
) -> SubscriptionRecord:
    from prefctl.clock import SystemClock
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin

    with admin_store(resolve_data_dir(data_dir), store) as conn:
        return admin.set_subscription_alerts(
            conn,
            SystemClock(),
            ref,
            enabled=enabled,
            recipients=recipients,
            service_client_id=account,
        )


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
