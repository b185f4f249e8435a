"""``prefctl emulator accounts``: several accounts in one emulator, one per team or pipeline.

Like ``emulator clients``, these act on the emulator's store directly, so they work whether or not
the emulator is running; a running emulator serves a new account at once. The store is the one
``--store`` (``PREFCTL_STORE``) names, else the PostgreSQL database the emulator of the data dir
serves (``emulator start --store``), else the data dir's SQLite file.

    prefctl emulator accounts add TEAM_A           # writes profile TEAM_A, prints the secret once
    prefctl emulator accounts list
    prefctl emulator accounts remove TEAM_A --yes
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import get_state
from prefctl.cli._delivery_options import AdminStoreOption, DataDirOption, admin_store
from prefctl.cli._tables import columns
from prefctl.cli.app import examples, new_group

if TYPE_CHECKING:
    from prefctl.emulator.admin import AccountSummary

NameArgument = Annotated[
    str,
    typer.Argument(
        metavar="NAME",
        help="The account's service client id; also the name of its profile.",
    ),
]


class EnvironmentChoice(StrEnum):
    Sandbox = "Sandbox"
    Production = "Production"


def accounts_group() -> typer.Typer:
    """The ``accounts`` sub-group of ``prefctl emulator``."""
    group = new_group(
        "accounts",
        "Accounts of the emulator: each has its own clients, users, Hashkey, settings and data.",
        epilog=examples(
            ("prefctl emulator accounts add TEAM_A", "writes profile TEAM_A"),
            ("prefctl -p TEAM_A profiles search --email a@example.com", "act as that account"),
            ("prefctl emulator accounts remove TEAM_A --yes", "and everything it owns"),
        ),
    )
    group.command("add")(add)
    group.command("list")(list_accounts)
    group.command("remove")(remove)
    return group


def add(
    name: NameArgument,
    environment: Annotated[
        EnvironmentChoice,
        typer.Option("--environment", help="The account's environment."),
    ] = EnvironmentChoice.Sandbox,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing profile of that name.")
    ] = False,
    data_dir: DataDirOption = None,
    store: AdminStoreOption = None,
) -> None:
    """Add an account with an admin user holding every permission and an OAuth client; write
    profile NAME for it and print its credentials (the client secret is shown only now)."""
    from prefctl.clock import SystemClock
    from prefctl.config import config_path
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin
    from prefctl.emulator.local_profile import (
        DEFAULT_ADDRESS,
        LocalAccount,
        check_account_profile_free,
        emulator_address,
        write_account_profile,
    )
    from prefctl.logs import register_secret

    state = get_state()
    config_file = config_path(state.config_flag)
    admin.check_account_name(name)
    check_account_profile_free(config_file, name, replace=force)
    directory = resolve_data_dir(data_dir)
    clock = SystemClock()
    with admin_store(directory, store) as conn:
        new = admin.add_account(conn, clock, name, environment=environment.value)
        local_client_id = admin.bootstrap(conn, clock).credentials.client_id
    register_secret(new.secret)  # masked in any log line; stdout shows it once, below
    register_secret(new.account.hashkey)
    account = new.account
    address = emulator_address(directory, config_file, local_client_id)
    write_account_profile(
        config_file,
        name,
        address=address,
        account=LocalAccount(
            service_client_id=account.service_client_id,
            user_id=new.user_id,
            client_id=new.client.client_id,
            client_secret=new.secret,
            hashkey=account.hashkey,
            signature_user_id=account.signature_user_id,
            environment=account.environment,
        ),
    )
    record = {
        "account": account.service_client_id,
        "environment": account.environment,
        "profile": name,
        "user_id": new.user_id,
        "client_id": new.client.client_id,
        "client_secret": new.secret,
    }
    if state.json:
        state.out.json(record)
    else:
        # Plain lines, not a table: a 64-character secret must never be wrapped.
        width = max(len(key) for key in record)
        for key, value in record.items():
            state.out.line(f"{key:<{width}}  {value}")
    state.out.info(
        f"wrote profile '{name}' in {config_file}; the client secret is shown only now "
        "(the profile keeps it)"
    )
    if address == DEFAULT_ADDRESS:
        state.out.info(
            f"no emulator runs from {directory} and profile 'local' is not its: profile '{name}' "
            f"points at {address.auth_url}, where 'prefctl emulator start' serves by default"
        )


# The account name is what the other commands take: it stays.
ACCOUNTS_COLUMNS = columns(
    ("account", "ACCOUNT"),
    ("environment", "ENVIRONMENT"),
    ("default", "DEFAULT"),
    ("clients", "CLIENTS"),
    ("users", "USERS"),
    ("created_at", "CREATED"),
    drop_first=["created_at", "users", "clients"],
)


def list_accounts(data_dir: DataDirOption = None, store: AdminStoreOption = None) -> None:
    """List the accounts (never their secrets); the default one is profile 'local''s."""
    from prefctl.clock import SystemClock
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin

    with admin_store(resolve_data_dir(data_dir), store) as conn:
        summaries = admin.list_accounts(conn, SystemClock())
    get_state().out.table(
        [_account_record(summary) for summary in summaries], ACCOUNTS_COLUMNS, empty="no accounts"
    )


def remove(
    name: NameArgument,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    data_dir: DataDirOption = None,
    store: AdminStoreOption = None,
) -> None:
    """Delete an account and everything it owns (clients and their tokens, users, profiles,
    subscriptions, settings, events, deliveries, alerts), and its profile NAME.

    The default account (profile 'local') cannot be removed; 'emulator reset' wipes the store.
    Exit code 4 when there is no such account.
    """
    from prefctl.clock import SystemClock
    from prefctl.config import config_path
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin
    from prefctl.emulator.local_profile import remove_account_profile

    state = get_state()
    directory = resolve_data_dir(data_dir)
    clock = SystemClock()
    with admin_store(directory, store) as conn:
        admin.check_removable(conn, clock, name)
        where = f"the store {_store_name(store)}" if store else f"the emulator in {directory}"
        state.out.confirm(
            f"Delete account {name} and all its data from {where}?",
            assume_yes=yes,
        )
        admin.remove_account(conn, clock, name)
    config_file = config_path(state.config_flag)
    profile_removed = remove_account_profile(config_file, name, name)
    if state.json:
        state.out.json({"account": name, "removed": True, "profile_removed": profile_removed})
    state.out.success(
        f"removed account {name}" + (f" and profile '{name}'" if profile_removed else "")
    )


def _store_name(store: str) -> str:
    """``--store`` for a message: a URL without its password."""
    from prefctl.dispatcher.operations import describe_store, resolve_store_location

    return describe_store(resolve_store_location(store))


def _account_record(summary: AccountSummary) -> dict[str, Any]:
    from prefctl.store.timestamps import wire_time

    account = summary.account
    return {
        "account": account.service_client_id,
        "environment": account.environment,
        "default": summary.default,
        "clients": summary.clients,
        "users": summary.users,
        "signature_user_id": account.signature_user_id,
        "created_at": wire_time(account.created_at),
    }
