"""``prefctl config``: create, inspect and edit the connection profiles in profiles.toml.

Every command works on the file chosen by ``--config`` / ``PREFCTL_CONFIG``. Changes are written
atomically with mode 0600 (comments in a hand-written file are not kept). ``init`` never asks for
or stores a secret; ``set`` can store one inline, from stdin with ``-`` to keep it out of shell
history, and warns that an environment variable or a file is the better home for it.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from prefctl import config as cfg_mod
from prefctl.cli._api import YesOption
from prefctl.cli._complete import profile_names
from prefctl.cli._context import get_state
from prefctl.cli._tables import columns
from prefctl.cli.app import new_group
from prefctl.errors import ConfigError, PrefctlError, UsageError


def register(root: typer.Typer) -> None:
    group = new_group("config", "Create, show and edit connection profiles (profiles.toml).")
    group.command("init")(init)
    group.command("list")(list_profiles)
    group.command("show")(show)
    group.command("use")(use)
    group.command("set")(set_key)
    group.command("unset")(unset_key)
    group.command("remove")(remove)
    group.command("path")(path)
    root.add_typer(group)


def _key_option(key: str) -> Any:
    """A ``--kebab-name`` option whose help is the key's documentation."""
    info = cfg_mod.ALL_KEYS[key]
    text = info.description
    if info.choices:
        text += f" One of: {', '.join(info.choices)}."
    if info.default:
        text += f" Default: {info.default}."
    return typer.Option(_flag(key), help=f"{text} (key {key})", show_default=False)


def _flag(key: str) -> str:
    """The option of ``init`` that sets ``key``: ``webhooks.hashkey_env`` → ``--hashkey-env``."""
    return "--" + key.rsplit(".", 1)[-1].replace("_", "-")


_ProfileArg = Annotated[
    str,
    typer.Argument(
        metavar="NAME", help="Profile name.", show_default=False, autocompletion=profile_names
    ),
]
_KeyArg = Annotated[
    str,
    typer.Argument(
        metavar="KEY",
        help="Key to change, e.g. api_url or webhooks.hashkey_env (see 'prefctl config show').",
        show_default=False,
    ),
]


def init(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
            help="Name of the new profile (asked for on a TTY when omitted).",
            show_default=False,
        ),
    ] = None,
    auth_url: Annotated[str | None, _key_option("auth_url")] = None,
    api_url: Annotated[str | None, _key_option("api_url")] = None,
    service_client_id: Annotated[str | None, _key_option("service_client_id")] = None,
    user_id: Annotated[str | None, _key_option("user_id")] = None,
    client_id: Annotated[str | None, _key_option("client_id")] = None,
    auth_method: Annotated[str | None, _key_option("auth_method")] = None,
    client_secret_env: Annotated[str | None, _key_option("client_secret_env")] = None,
    client_secret_file: Annotated[str | None, _key_option("client_secret_file")] = None,
    certificate: Annotated[str | None, _key_option("certificate")] = None,
    private_key: Annotated[str | None, _key_option("private_key")] = None,
    environment: Annotated[str | None, _key_option("environment")] = None,
    ca_bundle: Annotated[str | None, _key_option("ca_bundle")] = None,
    signature_user_id: Annotated[str | None, _key_option("webhooks.signature_user_id")] = None,
    hashkey_env: Annotated[str | None, _key_option("webhooks.hashkey_env")] = None,
    hashkey_file: Annotated[str | None, _key_option("webhooks.hashkey_file")] = None,
    make_default: Annotated[
        bool, typer.Option("--default", help="Make it the default profile.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a profile of the same name.")
    ] = False,
) -> None:
    """Create a profile from flags; on a TTY, ask for the values that are missing.

    Required: --service-client-id, --user-id and --client-id
    (and --certificate and --private-key with --auth-method certificate).
    Without a TTY, a missing one is an error.
    The client secret is never asked for nor written: prefctl reads it when it needs it,
    from $PREFCTL_CLIENT_SECRET or the variable or file named by --client-secret-env / -file.
    The first profile of a file becomes its default.
    """
    state = get_state()
    out = state.out
    cfg = state.config()
    given = {
        "auth_url": auth_url,
        "api_url": api_url,
        "service_client_id": service_client_id,
        "user_id": user_id,
        "client_id": client_id,
        "auth_method": auth_method,
        "client_secret_env": client_secret_env,
        "client_secret_file": client_secret_file,
        "certificate": certificate,
        "private_key": private_key,
        "environment": environment,
        "ca_bundle": ca_bundle,
        "webhooks.signature_user_id": signature_user_id,
        "webhooks.hashkey_env": hashkey_env,
        "webhooks.hashkey_file": hashkey_file,
    }
    values = {key: value for key, value in given.items() if value is not None}
    for key, value in values.items():
        section, bare = cfg_mod.split_key(key)
        cfg_mod.check_key(bare, value, section=section, where=_flag(key))
    if name is None:
        if not out.interactive:
            raise UsageError("missing profile NAME", hint="run 'prefctl config init NAME --flags…'")
        name = out.prompt("Profile name", default="default")
    cfg.check_new_profile(name, replace=force)
    required = cfg_mod.required_keys(values.get("auth_method", "client_secret_basic"))
    missing = [key for key in required if not values.get(key)]
    if missing and not out.interactive:
        flags = ", ".join(_flag(key) for key in missing)
        raise UsageError(f"missing {flags}", hint="pass them as flags (there is no TTY to ask on)")
    if missing:  # a person at a TTY is filling the profile in: offer the URLs too
        for key in ("auth_url", "api_url"):
            if key not in values:
                values[key] = out.prompt(key, default=cfg_mod.ALL_KEYS[key].default)
        for key in missing:
            values[key] = _ask(key)
    values = {key: cfg_mod.command_line_value(key, value) for key, value in values.items()}
    profile_name = name

    def add(fresh: cfg_mod.ConfigFile) -> None:
        fresh.check_new_profile(profile_name, replace=force)  # again: it may have appeared since
        fresh.add_profile(profile_name, values, replace=force, default=make_default)

    cfg, _ = cfg_mod.update_config(cfg.path, add)
    is_default = cfg.default == name
    if state.json:
        out.json({"name": name, "path": str(cfg.path), "default": is_default})
    out.success(f"profile '{name}' written to {cfg.path}" + (" (default)" if is_default else ""))
    profile = cfg_mod.resolve_profile(cfg, name, env=os.environ)
    if profile.auth_method != "certificate":
        _tell_secret(profile, "client_secret")


def _ask(key: str) -> str:
    out = get_state().out
    while True:
        value = out.prompt(key).strip()
        if value:
            return value
        out.warn(f"{key} is required")


def _tell_secret(profile: cfg_mod.Profile, key: str) -> None:
    out = get_state().out
    try:
        out.info(f"the {key} will be read from {profile.secret_source(key)}")
    except ConfigError as exc:
        out.info(f"the {key} cannot be read yet: {exc.message} — {exc.hint}")


LIST_COLUMNS = columns(
    ("name", "NAME"),
    ("default", "DEFAULT"),
    ("api_url", "API URL"),
    ("service_client_id", "SERVICE CLIENT ID"),
    drop_first=["api_url"],
)


def list_profiles() -> None:
    """List the profiles of the file, marking the default."""
    state = get_state()
    cfg = state.config()
    rows = [
        {
            "name": name,
            "default": name == cfg.default,
            "api_url": table.get("api_url") or cfg_mod.PROFILE_KEYS["api_url"].default,
            "service_client_id": table.get("service_client_id", ""),
        }
        for name, table in cfg.profiles.items()
    ]
    state.out.table(
        [{**row, "default": "*" if row["default"] else ""} for row in rows],
        LIST_COLUMNS,
        json_rows=rows,
        empty=f"no profiles in {cfg.path}; create one with 'prefctl config init NAME'",
    )


SHOW_COLUMNS = columns(("key", "KEY"), ("value", "VALUE"), ("source", "FROM"))


def show(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
            help="Profile to show (default: --profile, $PREFCTL_PROFILE, then the file's default).",
            show_default=False,
            autocompletion=profile_names,
        ),
    ] = None,
) -> None:
    """Show a profile as prefctl resolves it, with where each value comes from.

    Sources: env (a PREFCTL_<KEY> variable), file (profiles.toml) or default.
    Secrets are shown as ***; the last rows tell where the client secret and the Hashkey are read.
    """
    state = get_state()
    cfg = state.config()
    profile = cfg_mod.resolve_profile(cfg, name or state.profile_name, env=os.environ)
    data = cfg_mod.profile_as_dict(profile)
    secrets = {key: _secret_status(profile, key) for key in ("client_secret", "hashkey")}
    if state.json:
        state.out.json(
            {
                **data,
                "default": profile.name == cfg.default,
                "config": str(cfg.path),
                "sources": dict(profile.sources),
                "secrets": secrets,
            }
        )
        return
    rows = []
    for key in cfg_mod.ALL_KEYS:
        section, bare = cfg_mod.split_key(key)
        value = data[section][bare] if section else data[bare]
        rows.append({"key": key, "value": value, "source": profile.sources.get(key, "")})
    for key, status in secrets.items():
        label = "client secret" if key == "client_secret" else "Hashkey"
        found = status["found"]
        rows.append(
            {
                "key": f"resolved {label}",
                "value": "***" if found else "",
                "source": status["source"] if found else "missing",
            }
        )
    default = " (default)" if profile.name == cfg.default else ""
    state.out.table(
        rows,
        SHOW_COLUMNS,
        title=f"profile '{profile.name}'{default} in {cfg.path}",
    )
    for key, status in secrets.items():
        if status["error"]:
            state.out.info(f"{key}: {status['error']}")


def _secret_status(profile: cfg_mod.Profile, key: str) -> dict[str, Any]:
    if key == "client_secret" and profile.auth_method == "certificate":
        return {"found": False, "source": None, "error": "not used with auth_method certificate"}
    try:
        return {"found": True, "source": profile.secret_source(key), "error": None}
    except PrefctlError as exc:
        error = f"{exc.message} — {exc.hint}" if exc.hint else exc.message
        return {"found": False, "source": None, "error": error}


def use(name: _ProfileArg) -> None:
    """Make NAME the default profile."""
    state = get_state()
    cfg, _ = cfg_mod.update_config(state.config().path, lambda fresh: fresh.use(name))
    if state.json:
        state.out.json({"default": name, "path": str(cfg.path)})
    state.out.success(f"default profile is now '{name}'")


def set_key(
    name: _ProfileArg,
    key: _KeyArg,
    value: Annotated[
        str | None,
        typer.Argument(
            metavar="VALUE",
            help="New value; '-' reads it from stdin; omitted, it is asked for on a TTY.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Set KEY of profile NAME to VALUE.

    Webhook keys are written webhooks.KEY (or just KEY).
    Secrets (client_secret, webhooks.hashkey) may be stored inline, as the file is 0600,
    but an environment variable or a file (the *_env and *_file keys) is a better home.
    Pass '-' as VALUE to read it from stdin, out of the shell history.
    """
    state = get_state()
    out = state.out
    cfg = state.config()
    cfg.table(name)
    dotted, info = cfg_mod.key_info(key)
    if value == "-" and not (sys.stdin.isatty() and out.interactive):
        value = _first_line(sys.stdin.read())
    elif value is None or value == "-":  # '-' typed at a terminal: ask, without echo for secrets
        if not out.interactive:
            raise UsageError(f"missing VALUE for {dotted}", hint="pass it, or '-' to read stdin")
        value = out.prompt(dotted, secret=info.secret)
    if info.secret:
        from prefctl.logs import register_secret

        register_secret(value)
    value = cfg_mod.command_line_value(dotted, value)
    cfg_mod.update_config(cfg.path, lambda fresh: fresh.set_value(name, dotted, value))
    shown = "***" if info.secret else value
    if state.json:
        out.json({"name": name, "key": dotted, "value": shown})
    out.success(f"profile '{name}': {dotted} = {shown}")
    if info.secret:
        out.warn(
            f"{dotted} is now stored in {cfg.path} (mode 0600); {dotted}_env or {dotted}_file "
            "keep it out of the file"
        )


def _first_line(text: str) -> str:
    text = text.strip()
    if not text:
        raise UsageError("no value on stdin")
    return text.splitlines()[0].strip()


def unset_key(name: _ProfileArg, key: _KeyArg) -> None:
    """Remove KEY from profile NAME, so that its default (or environment variable) applies."""
    state = get_state()
    _, (dotted, removed) = cfg_mod.update_config(
        state.config().path, lambda fresh: fresh.unset_value(name, key)
    )
    if state.json:
        state.out.json({"name": name, "key": dotted, "removed": removed})
    if removed:
        state.out.success(f"profile '{name}': {dotted} removed")
    else:
        state.out.info(f"profile '{name}' has no {dotted}; nothing changed")


def remove(
    name: _ProfileArg,
    yes: YesOption = False,
) -> None:
    """Delete profile NAME from the file (asks first on a TTY; --yes otherwise)."""
    state = get_state()
    cfg = state.config()
    cfg.table(name)
    state.out.confirm(f"Remove profile '{name}' from {cfg.path}?", assume_yes=yes)
    _, was_default = cfg_mod.update_config(cfg.path, lambda fresh: fresh.remove_profile(name))
    if state.json:
        state.out.json({"removed": name, "was_default": was_default})
    state.out.success(f"profile '{name}' removed")
    if was_default:
        state.out.info("it was the default; choose another with 'prefctl config use NAME'")


def path() -> None:
    """Print the path of profiles.toml (--config, then $PREFCTL_CONFIG, then the user config dir)."""
    state = get_state()
    where = cfg_mod.config_path(state.config_flag).absolute()
    if state.json:
        state.out.json({"path": str(where), "exists": where.exists()})
    else:
        state.out.line(str(where))
