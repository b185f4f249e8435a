"""``prefctl emulator``: run the local service, and the support team's operations on its store."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli import _server_options as limits_options
from prefctl.cli._context import State, get_state
from prefctl.cli._delivery_options import (
    AccountOption,
    AdminStoreOption,
    DataDirOption,
    admin_store,
)
from prefctl.cli._tables import columns
from prefctl.cli.app import examples, new_group
from prefctl.config import ENV_STORE
from prefctl.dispatcher.alerts import mail
from prefctl.errors import PrefctlError, UsageError

if TYPE_CHECKING:
    from prefctl.store.accounts import OAuthClient, User


def register(root: typer.Typer) -> None:
    group = new_group(
        "emulator",
        "Run the local emulator of the service and administer it.",
        epilog=examples(
            ("prefctl emulator start --detach", "in the background; writes profile 'local'"),
            ("prefctl emulator status", "is it running, and where"),
        ),
    )
    group.command("start")(start)
    group.command("status")(status)
    group.command("stop")(stop)
    clients = new_group(
        "clients",
        "OAuth clients of the emulator's token endpoint, per account.",
        epilog=examples(
            ("prefctl emulator clients add --name ci", "a client of the emulator's own account"),
            ("prefctl emulator clients list --account TEAM_A", "only TEAM_A's clients"),
        ),
    )
    clients.command("add")(clients_add)
    clients.command("list")(clients_list)
    clients.command("rotate")(clients_rotate)
    group.add_typer(clients)
    users = new_group("users", "API users of an account of the emulator and their permissions.")
    users.command("add")(users_add)
    users.command("list")(users_list)
    group.add_typer(users)
    group.command("revoke")(revoke)
    from prefctl.cli.emulator_alerts import alerts_group  # it imports this module

    group.add_typer(alerts_group())
    from prefctl.cli.emulator_accounts import accounts_group

    group.add_typer(accounts_group())
    group.command("reset")(reset)
    root.add_typer(group)


# -- running ---------------------------------------------------------------------------------------
def start(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="Port to listen on (0: any free port).")
    ] = 8750,
    data_dir: DataDirOption = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="URL",
            envvar=ENV_STORE,
            help="Serve a PostgreSQL database (postgresql://USER@HOST:PORT/DB) instead of the "
            f"SQLite store in the data dir: a sandbox a team shares (env: {ENV_STORE}).",
            show_default=False,
            show_envvar=False,
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option("--tls-cert", help="PEM server certificate: serve HTTPS.", show_default=False),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option("--tls-key", help="PEM private key of --tls-cert.", show_default=False),
    ] = None,
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
            help="Sign webhooks with a Signature that is the Base64 of the HMAC-SHA512 digest's "
            "bytes (raw) or of its hex text (hex), to play a deployment that signs that way.",
        ),
    ] = "raw",
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            metavar="N",
            help="API processes serving the port, each with its own connection limits; one "
            "dispatcher in all. Meant for a PostgreSQL store: on SQLite they take turns on the "
            "file's one write lock.",
        ),
    ] = 1,
    detach: Annotated[
        bool,
        typer.Option("--detach", help="Run in the background; its log goes to the data dir."),
    ] = False,
    smtp_host: Annotated[
        str | None,
        typer.Option(
            "--smtp-host",
            envvar=mail.ENV_SMTP_HOST,
            metavar="HOST",
            help="Send failure alerts through this SMTP server (default: into alerts.mbox "
            "in the data dir).",
            show_default=False,
        ),
    ] = None,
    smtp_port: Annotated[
        int,
        typer.Option(
            "--smtp-port", envvar=mail.ENV_SMTP_PORT, metavar="PORT", help="Port of --smtp-host."
        ),
    ] = mail.DEFAULT_SMTP_PORT,
    smtp_starttls: Annotated[
        bool,
        typer.Option(
            "--smtp-starttls",
            envvar=mail.ENV_SMTP_STARTTLS,
            help="Upgrade the SMTP connection with STARTTLS (the server certificate is verified).",
        ),
    ] = False,
    smtp_user: Annotated[
        str | None,
        typer.Option(
            "--smtp-user",
            envvar=mail.ENV_SMTP_USER,
            metavar="USER",
            help=f"Log in to the SMTP server as this user; the password is read from "
            f"{mail.ENV_SMTP_PASSWORD} only.",
            show_default=False,
        ),
    ] = None,
    smtp_from: Annotated[
        str,
        typer.Option(
            "--smtp-from",
            envvar=mail.ENV_SMTP_FROM,
            metavar="ADDRESS",
            help="From address of the alerts sent by SMTP.",
        ),
    ] = mail.DEFAULT_SENDER,
    header_timeout: limits_options.HeaderTimeoutOption = limits_options.DEFAULT_HEADER_TIMEOUT,
    body_timeout: limits_options.BodyTimeoutOption = limits_options.DEFAULT_BODY_TIMEOUT,
    max_header_bytes: limits_options.MaxHeaderBytesOption = limits_options.DEFAULT_MAX_HEADER_BYTES,
    max_connections: limits_options.MaxConnectionsOption = limits_options.DEFAULT_MAX_CONNECTIONS,
) -> None:
    """Serve the token endpoint, JWKS and REST API on a SQLite or PostgreSQL store; write profile 'local'.

    Prints one ready line on stdout; runs until Ctrl-C or SIGTERM (or detaches with --detach).
    Failure alerts go to alerts.mbox in the data dir, or by SMTP with --smtp-host.
    """
    from prefctl import logs
    from prefctl.cli._output import CurrentStderr
    from prefctl.config import config_path
    from prefctl.emulator.serve import EmulatorConfig

    state = get_state()
    logs.configure(state.verbosity, stream=CurrentStderr())
    smtp = _smtp_settings(smtp_host, smtp_port, smtp_starttls, smtp_user, smtp_from)
    config = EmulatorConfig(
        host=host,
        port=port,
        data_dir=data_dir,
        store=_postgres_store(store),
        tls_cert=tls_cert,
        tls_key=tls_key,
        time_scale=time_scale,
        signature_encoding=signature_encoding,
        config_path=config_path(state.config_flag),
        smtp=smtp,
        workers=workers,
        limits=limits_options.connection_limits(
            header_timeout, body_timeout, max_header_bytes, max_connections
        ),
    )
    if detach:
        from prefctl.emulator.daemon import start_detached

        with state.out.status("starting the emulator…"):
            record = start_detached(config, verbosity=state.verbosity)
        _print_ready(state, record.ready_record())
        limits_options.warn_if_exposed(state.out, host)
        state.out.info(f"stop it with: {_stop_command(Path(record.data_dir))}")
        return

    from prefctl.emulator.serve import RunningEmulator, serve

    def ready(running: RunningEmulator) -> None:
        if running.created:
            state.out.info(
                f"created account {running.account.service_client_id} with user "
                f"'{running.account.user_id}'; its credentials are in profile 'local'"
            )
        _print_ready(state, running.ready_record())
        limits_options.warn_if_exposed(state.out, host)
        state.out.info("press Ctrl-C to stop")

    serve(config, on_ready=ready)


def _smtp_settings(
    host: str | None, port: int, starttls: bool, user: str | None, sender: str
) -> mail.SmtpSettings | None:
    if host is None:
        if port != mail.DEFAULT_SMTP_PORT or starttls or user or sender != mail.DEFAULT_SENDER:
            raise UsageError(
                "--smtp-port, --smtp-starttls, --smtp-user and --smtp-from need --smtp-host"
            )
        return None
    return mail.SmtpSettings(host, port, starttls=starttls, user=user or None, sender=sender)


def _print_ready(state: State, record: dict[str, Any]) -> None:
    if state.json:
        state.out.json_line(record)
    else:
        workers = record.get("workers", 1)
        shown = f", {workers} API workers" if workers > 1 else ""
        state.out.line(
            f"emulator ready at {record['url']} (pid {record['pid']}{shown}, profile "
            f"{record['profile']}, data {record['data_dir']})"
        )


def status(data_dir: DataDirOption = None) -> None:
    """Whether an emulator runs from the data dir (exit 0 if it does, 1 if not)."""
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import daemon

    state = get_state()
    current = daemon.status(resolve_data_dir(data_dir))
    if state.json:
        state.out.json(current.as_dict())
    elif current.state == "running":
        workers = f", {current.workers} API workers" if (current.workers or 1) > 1 else ""
        state.out.line(f"running at {current.url} (pid {current.pid}{workers})")
    elif current.state == "unresponsive":
        state.out.line(f"not answering at {current.url} (pid {current.pid} is alive)")
    else:
        state.out.line(f"not running (data dir {current.data_dir})")
    raise typer.Exit(0 if current.running else 1)


def stop(data_dir: DataDirOption = None) -> None:
    """Stop the emulator running from the data dir (exit 1 if none runs)."""
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import daemon

    state = get_state()
    directory = resolve_data_dir(data_dir)
    stopped = daemon.stop(directory)
    if stopped.state == "stopped":
        raise PrefctlError(f"no emulator is running from {directory}")
    if state.json:
        state.out.json({"stopped": True, "pid": stopped.pid, "url": stopped.url})
    state.out.success(f"stopped the emulator at {stopped.url} (pid {stopped.pid})")


# -- support-team operations -----------------------------------------------------------------------
def clients_add(
    name: Annotated[str, typer.Option("--name", help="A label for the client.")] = "",
    certificate: Annotated[
        Path | None,
        typer.Option(
            "--certificate",
            metavar="PEM",
            help="Register this PEM certificate instead of issuing a secret.",
            show_default=False,
        ),
    ] = None,
    token_lifetime: Annotated[
        int,
        typer.Option("--token-lifetime", metavar="MIN", help="Access token lifetime in minutes."),
    ] = 60,
    account: AccountOption = None,
    data_dir: DataDirOption = None,
    store: AdminStoreOption = None,
) -> None:
    """Register an OAuth client of an account; its secret is printed once, on stdout, and never
    stored. Exit code 4 when there is no such account."""
    from prefctl.clock import SystemClock
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin

    state = get_state()
    with admin_store(resolve_data_dir(data_dir), store) as conn:
        new = admin.add_client(
            conn,
            SystemClock(),
            name=name,
            certificate=certificate,
            token_lifetime_minutes=token_lifetime,
            service_client_id=account,
        )
    record = _client_record(new.client)
    if new.secret is not None:
        record = {"client_id": record.pop("client_id"), "client_secret": new.secret, **record}
    _show_credentials(state, record)
    if new.secret is not None:
        state.out.info("the client secret is shown only now; keep it safe")


def _show_credentials(state: State, record: dict[str, Any]) -> None:
    if state.json:
        state.out.json(record)
        return
    # Plain lines, not a table: a 64-character secret must never be wrapped.
    width = max(len(key) for key in record)
    for key, value in record.items():
        state.out.line(f"{key:<{width}}  {'' if value is None else value}".rstrip())


def clients_rotate(
    client_id: Annotated[str, typer.Argument(help="The client whose secret to replace.")],
    overlap: Annotated[
        int,
        typer.Option(
            "--overlap",
            metavar="MIN",
            help="Minutes the old secret keeps working, so its users can switch (0: refused at "
            "once; at most 10080, 7 days).",
        ),
    ] = 60,
    account: AccountOption = None,
    data_dir: DataDirOption = None,
    store: AdminStoreOption = None,
) -> None:
    """Give a client of an account a new secret, printed once on stdout; the old one keeps
    working at the token endpoint for --overlap minutes. Profiles in profiles.toml that hold the
    old secret inline get the new one. Exit code 4 when the account has no such client."""
    from prefctl.clock import SystemClock
    from prefctl.config import config_path
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin
    from prefctl.emulator.local_profile import replace_client_secret
    from prefctl.logs import register_secret
    from prefctl.store.timestamps import wire_time

    state = get_state()
    with admin_store(resolve_data_dir(data_dir), store) as conn:
        rotated = admin.rotate_client_secret(
            conn, SystemClock(), client_id, overlap_minutes=overlap, service_client_id=account
        )
    register_secret(rotated.secret)  # masked in any log line, at every -v level
    try:
        profiles = replace_client_secret(
            config_path(state.config_flag), rotated.client.client_id, rotated.secret
        )
    except (PrefctlError, OSError) as exc:  # the store has the new secret: still show it
        profiles = []
        state.out.warn(f"profiles.toml not updated ({exc}): set client_secret yourself")
    record: dict[str, Any] = {
        "client_id": rotated.client.client_id,
        "client_secret": rotated.secret,
        "overlap_minutes": overlap,
        "previous_secret_valid_until": wire_time(rotated.previous_valid_until),
        "profiles_updated": profiles,
    }
    if not state.json:  # plain lines: the names, or no line when no profile held the secret
        record["profiles_updated"] = ", ".join(profiles)
        if not profiles:
            del record["profiles_updated"]
    _show_credentials(state, record)
    state.out.info("the new client secret is shown only now; keep it safe")
    if overlap:
        state.out.info(
            f"the old secret works until {wire_time(rotated.previous_valid_until)} "
            f"({overlap} min); switch its users to the new one before then"
        )
    else:
        state.out.info("the old secret is refused from now on")


# The client id is what the other client commands take: it stays.
CLIENTS_COLUMNS = columns(
    ("client_id", "CLIENT ID"),
    ("name", "NAME"),
    ("auth_method", "AUTH"),
    ("token_lifetime_minutes", "LIFETIME (MIN)"),
    ("created_at", "CREATED"),
    drop_first=["created_at", "token_lifetime_minutes"],
)


def clients_list(
    account: AccountOption = None, data_dir: DataDirOption = None, store: AdminStoreOption = None
) -> None:
    """List an account's OAuth clients (never their secrets)."""
    from prefctl.clock import SystemClock
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin

    with admin_store(resolve_data_dir(data_dir), store) as conn:
        clients = admin.list_clients(conn, SystemClock(), service_client_id=account)
    rows = [_client_record(client) for client in clients]
    get_state().out.table(
        rows,
        CLIENTS_COLUMNS,
        empty="no clients",
    )


def users_add(
    user_id: Annotated[str, typer.Argument(help="The user id named in token scopes.")],
    permission: Annotated[
        list[str] | None,
        typer.Option(
            "--permission",
            "-P",
            help="A permission to grant (repeat, or separate with commas), e.g. profiles:read.",
            show_default=False,
        ),
    ] = None,
    account: AccountOption = None,
    data_dir: DataDirOption = None,
    store: AdminStoreOption = None,
) -> None:
    """Add an API user to an account with the given permissions (exit code 4 when there is no
    such account)."""
    from prefctl.clock import SystemClock
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin

    permissions = [p.strip() for value in permission or [] for p in value.split(",") if p.strip()]
    with admin_store(resolve_data_dir(data_dir), store) as conn:
        user = admin.add_user(conn, SystemClock(), user_id, permissions, service_client_id=account)
    get_state().out.record(_user_record(user))


USERS_COLUMNS = columns(
    ("user_id", "USER"),
    ("is_active", "ACTIVE"),
    ("permissions", "PERMISSIONS"),
    ("created_at", "CREATED"),
    drop_first=["created_at"],
)


def users_list(
    account: AccountOption = None, data_dir: DataDirOption = None, store: AdminStoreOption = None
) -> None:
    """List an account's API users and their permissions."""
    from prefctl.clock import SystemClock
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin

    with admin_store(resolve_data_dir(data_dir), store) as conn:
        users = admin.list_users(conn, SystemClock(), service_client_id=account)
    get_state().out.table(
        [_user_record(user) for user in users],
        USERS_COLUMNS,
        empty="no users",
    )


def revoke(
    jti: Annotated[str, typer.Argument(help="The jti claim of the access token to revoke.")],
    data_dir: DataDirOption = None,
    store: AdminStoreOption = None,
) -> None:
    """Revoke an access token of any account by its jti: the REST API refuses it from now on.

    A jti is unique across accounts; the token's scope, shown, names its account. Exit code 4
    when the store issued no token with this jti.
    """
    from prefctl.clock import SystemClock
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin
    from prefctl.store.timestamps import wire_time

    with admin_store(resolve_data_dir(data_dir), store) as conn:
        revocation = admin.revoke(conn, SystemClock(), jti)
    token = revocation.token
    get_state().out.record(
        {
            "jti": token.jti,
            "client_id": token.client_id,
            "scope": token.scope,
            "expires_at": wire_time(token.expires_at),
            "revoked": True,
            "already_revoked": revocation.already_revoked,
        }
    )


def _postgres_store(store: str | None) -> str | None:
    """``--store``: a PostgreSQL URL (a SQLite store is the data dir's: ``--data-dir``)."""
    from prefctl.store.db import is_postgres_location

    if store is None or is_postgres_location(store):
        return store
    raise UsageError(
        f"--store takes a PostgreSQL URL (postgresql://USER@HOST:PORT/DB), not {store}",
        hint="a SQLite store is the data dir's: pass --data-dir DIR",
    )


def _stop_command(data_dir: Path) -> str:
    """The command that stops the emulator serving from ``data_dir``: with ``--data-dir`` unless
    it is the default one (a bare ``emulator stop`` would stop another emulator)."""
    import shlex

    from prefctl.config.paths import resolve_data_dir

    if data_dir == resolve_data_dir(env={}):
        return "prefctl emulator stop"
    return f"prefctl emulator stop --data-dir {shlex.quote(str(data_dir))}"


def reset(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    data_dir: DataDirOption = None,
) -> None:
    """Wipe the emulator's store; the next start creates a new account and credentials."""
    from prefctl.config.paths import resolve_data_dir
    from prefctl.emulator import admin, daemon

    state = get_state()
    directory = resolve_data_dir(data_dir)
    daemon.ensure_not_running(directory)
    state.out.confirm(f"Wipe the emulator store in {directory}?", assume_yes=yes)
    existed = admin.reset_store(directory)
    if state.json:
        state.out.json({"reset": True, "existed": existed, "data_dir": str(directory)})
    state.out.success(
        f"wiped the emulator store in {directory}" if existed else f"no store in {directory}"
    )


def _client_record(client: OAuthClient) -> dict[str, Any]:
    from prefctl.store.timestamps import wire_time

    return {
        "client_id": client.client_id,
        "name": client.name,
        "auth_method": client.auth_method,
        "token_lifetime_minutes": client.token_lifetime_minutes,
        "certificate_thumbprint": client.certificate_thumbprint,
        "service_client_id": client.service_client_id,
        "created_at": wire_time(client.created_at),
    }


def _user_record(user: User) -> dict[str, Any]:
    from prefctl.store.timestamps import wire_time

    return {
        "service_client_id": user.service_client_id,
        "user_id": user.user_id,
        "is_active": user.is_active,
        "permissions": list(user.permissions),
        "created_at": wire_time(user.created_at),
    }
