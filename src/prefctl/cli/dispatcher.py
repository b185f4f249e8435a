"""``prefctl dispatcher``: run the webhook dispatcher on a store, and set the TLS it delivers with."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._api import YesOption
from prefctl.cli._context import get_state
from prefctl.cli._delivery_options import StoreLocationOption, StoreOption, store_location
from prefctl.cli.app import new_group

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from prefctl.cli._context import State
    from prefctl.dispatcher.engine import EngineTotals
    from prefctl.dispatcher.observer import CycleResults

AccountOption = Annotated[
    str | None,
    typer.Option(
        "--account",
        metavar="SERVICE_CLIENT_ID",
        help="The account (default: the store's only account).",
        show_default=False,
    ),
]


def register(root: typer.Typer) -> None:
    group = new_group("dispatcher", "The webhook dispatcher: deliver a store's queue, set its TLS.")
    group.command("run")(run)
    tls = new_group("tls", "The client certificate (mTLS) and extra CAs deliveries use.")
    tls.command("set")(tls_set)
    tls.command("show")(tls_show)
    tls.command("clear")(tls_clear)
    group.add_typer(tls)
    root.add_typer(group)


def run(
    store: StoreLocationOption = None,
    account: Annotated[
        str | None,
        typer.Option(
            "--account",
            metavar="SERVICE_CLIENT_ID",
            help="Deliver only this account's queue (default: every account).",
            show_default=False,
        ),
    ] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Deliver what is due now, wait for the answers, then exit.",
        ),
    ] = False,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale",
            help="Divide every delivery-rule duration by this (0.001 to 10000).",
        ),
    ] = 1.0,
    signature_encoding: Annotated[
        str,
        typer.Option(
            "--signature-encoding",
            metavar="raw|hex",
            help="Sign as the emulator started with the same option does: the Base64 of the "
            "digest's bytes (raw) or of its hex text (hex).",
        ),
    ] = "raw",
) -> None:
    """Deliver the store's queued webhooks without the API, by the delivery rules.

    Runs until Ctrl-C or SIGTERM, or with --once until nothing is due.
    Progress and the summary go to stderr; with -o json the summary is printed as JSON.
    """
    from prefctl.dispatcher.operations import describe_store
    from prefctl.dispatcher.run import DispatcherConfig
    from prefctl.dispatcher.run import run as run_dispatcher

    state = get_state()
    path = store_location(store)
    progress = _Progress()
    config = DispatcherConfig(
        store_path=path,
        account=account,
        once=once,
        time_scale=time_scale,
        signature_encoding=signature_encoding,
        observers=[progress],
    )
    config.validate()
    what = "delivering what is due" if once else "delivering (Ctrl-C to stop)"
    state.out.info(f"dispatcher on {describe_store(path)}: {what}")
    with state.out.status(what) as update:
        progress.update = update
        totals = run_dispatcher(config)
    _summary(state, totals)


class _Progress:
    """An observer that keeps the spinner's counts current."""

    def __init__(self) -> None:
        self.update: Callable[[str], None] = lambda _text: None
        self.delivered = self.retrying = self.dead_lettered = 0

    def on_results(self, now: datetime, results: CycleResults) -> None:
        for recorded in results.recorded:
            if recorded.state == "delivered":
                self.delivered += 1
            elif recorded.state == "queued":
                self.retrying += 1
        self.dead_lettered += len(results.dead_letters)
        self.update(
            f"delivered {self.delivered}, retrying {self.retrying}, "
            f"dead-lettered {self.dead_lettered}"
        )

    def on_cycle(self, now: datetime) -> None:
        return None


def _summary(state: State, totals: EngineTotals) -> None:
    record = totals.as_dict()
    if state.json:
        state.out.json(record)
        return
    reasons: dict[str, int] = dict(totals.dead_lettered)
    del record["dead_letter_reasons"]
    lines = [f"{key.replace('_', ' ')}: {value}" for key, value in record.items()]
    lines += [f"  {reason}: {count}" for reason, count in sorted(reasons.items())]
    for line in lines:
        state.out.info(line)


# -- TLS -------------------------------------------------------------------------------------------
def tls_set(
    cert: Annotated[
        Path | None,
        typer.Option(
            "--cert", help="PEM client certificate to present (mTLS).", show_default=False
        ),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option("--key", help="Unencrypted PEM private key of --cert.", show_default=False),
    ] = None,
    ca: Annotated[
        Path | None,
        typer.Option(
            "--ca",
            help="PEM CA certificates to trust for receivers, besides the system's.",
            show_default=False,
        ),
    ] = None,
    store: StoreOption = None,
    account: AccountOption = None,
) -> None:
    """Install the client certificate (mTLS) and/or extra CAs the account's deliveries use.

    A running dispatcher picks the change up at its next cycle.
    """
    import time

    from prefctl.dispatcher import tls
    from prefctl.dispatcher.operations import open_existing_store

    state = get_state()
    with open_existing_store(store_location(store)) as conn:
        name = tls.resolve_account(conn, account)
        row = tls.install(conn, name, cert=cert, key=key, ca=ca, now=time.time())
        record = tls.describe(name, row)
    _show_tls(record)
    state.out.success(f"deliveries of {name} now use these TLS settings")


def tls_show(store: StoreOption = None, account: AccountOption = None) -> None:
    """Show the account's delivery TLS settings (the private key is never shown)."""
    from prefctl.dispatcher import tls
    from prefctl.dispatcher.operations import open_existing_store

    with open_existing_store(store_location(store)) as conn:
        name = tls.resolve_account(conn, account)
        record = tls.show(conn, name)
    _show_tls(record)


def tls_clear(
    store: StoreOption = None,
    account: AccountOption = None,
    yes: YesOption = False,
) -> None:
    """Remove the account's client certificate and extra CAs (deliveries use plain TLS)."""
    from prefctl.dispatcher import tls
    from prefctl.dispatcher.operations import open_existing_store

    state = get_state()
    with open_existing_store(store_location(store)) as conn:
        name = tls.resolve_account(conn, account)
        state.out.confirm(f"remove the delivery TLS settings of {name}?", assume_yes=yes)
        removed = tls.clear(conn, name)
    if removed:
        state.out.success(f"removed the delivery TLS settings of {name}")
    else:
        state.out.info(f"{name} had no delivery TLS settings")


def _show_tls(record: dict[str, Any]) -> None:
    state = get_state()
    if state.json:
        state.out.json(record)
        return
    client = record["client_certificate"]
    rows: dict[str, Any] = {"account": record["account"]}
    if client:
        rows |= {
            "client certificate": client["subject"],
            "issuer": client["issuer"],
            "not after": client["not_after"],
            "sha256": client["sha256"],
        }
    else:
        rows["client certificate"] = "none"
    rows["extra CAs"] = record["extra_cas"] or "none"
    state.out.record(rows)
