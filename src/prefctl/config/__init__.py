"""Configuration profiles: ``profiles.toml``, environment overrides and secret resolution.

One resolver decides every value, in this order (first wins)::

    flags  >  PREFCTL_<KEY> environment variables  >  profiles.toml  >  built-in defaults

The file lives in ``platformdirs.user_config_dir("prefctl")``; ``--config PATH`` or
``PREFCTL_CONFIG`` selects another. The profile is ``--profile``, then ``PREFCTL_PROFILE``, then the
file's ``default``. prefctl writes its files with mode 0600. A secret written inline in the file is
honoured only with a warning when the file is readable by others.

    >>> profile = resolve_profile(load_config(config_path()), "local", overrides={"api_url": url})
    >>> profile.sources["api_url"], profile.secret_source("client_secret")
    ('flag', '$PREFCTL_CLIENT_SECRET')

This module is imported on the fast path of ``prefctl token get``: it must not import pydantic,
httpx or anything heavy.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from prefctl.config.keys import (
    ALL_KEYS,
    AUTH_METHODS,
    DEFAULT_PROFILE,
    ENV_PREFIX,
    ENVIRONMENTS,
    PROFILE_KEYS,
    SECRET_KEYS,
    WEBHOOK_KEYS,
    WEBHOOKS,
    KeyInfo,
    check_key,
    env_var_for,
    insecure_url_warnings,
    key_info,
    parse_bool,
    required_keys,
    split_key,
)
from prefctl.errors import ConfigError
from prefctl.private_files import locked, make_private_dir, os_reason, write_private

T = TypeVar("T")

ENV_CONFIG = "PREFCTL_CONFIG"
ENV_PROFILE = "PREFCTL_PROFILE"
ENV_OUTPUT = "PREFCTL_OUTPUT"
ENV_CACHE_DIR = "PREFCTL_CACHE_DIR"
ENV_DATA_DIR = "PREFCTL_DATA_DIR"
ENV_STORE = "PREFCTL_STORE"  # the store of `emulator start` and `dispatcher run`: path or URL


# Where a resolved value came from, as `config show` reports it.
FROM_FLAG, FROM_ENV, FROM_FILE, FROM_DEFAULT = "flag", "env", "file", "default"

_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class WebhookConfig:
    """The ``[profiles.NAME.webhooks]`` table: what a receiver needs to verify signatures."""

    signature_user_id: str = ""
    hashkey_env: str = "PREFCTL_HASHKEY"
    hashkey_file: str = ""
    hashkey: str = field(default="", repr=False)
    signature_encoding: str = "raw"


@dataclass(frozen=True)
class Profile:
    """One fully resolved profile. Secrets are resolved on demand, never stored in reprs.

    ``sources`` tells where each value came from (``flag``, ``env``, ``file`` or ``default``),
    keyed by dotted name; ``in_file`` is false for a profile built from environment variables only.
    """

    name: str
    auth_url: str = PROFILE_KEYS["auth_url"].default
    api_url: str = PROFILE_KEYS["api_url"].default
    service_client_id: str = ""
    user_id: str = ""
    client_id: str = ""
    auth_method: str = "client_secret_basic"
    client_secret_env: str = "PREFCTL_CLIENT_SECRET"
    client_secret_file: str = ""
    client_secret: str = field(default="", repr=False)
    certificate: str = ""
    private_key: str = ""
    environment: str = "Sandbox"
    ca_bundle: str = ""
    allow_insecure_http: bool = False
    webhooks: WebhookConfig = field(default_factory=WebhookConfig)
    base_dir: Path | None = field(default=None, compare=False)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    in_file: bool = field(default=True, compare=False)

    @property
    def scope(self) -> str:
        """The token scope ``<service_client_id>/<user_id>``."""
        self.require("service_client_id", "user_id")
        return f"{self.service_client_id}/{self.user_id}"

    @property
    def token_url(self) -> str:
        return self.auth_url.rstrip("/") + "/oauth2/v1/token"

    def check_service_urls(self) -> list[str]:
        """Raise ConfigError when auth_url or api_url is plain http:// to a host that is not this
        machine and the profile does not set ``allow_insecure_http``; else the warnings to show
        (one per such URL) on every use."""
        return insecure_url_warnings(
            {"auth_url": self.auth_url, "api_url": self.api_url},
            allowed=self.allow_insecure_http,
            profile=self.name,
        )

    def require(self, *keys: str) -> None:
        """Raise a ConfigError naming the first of ``keys`` that has no value."""
        for key in keys:
            if not getattr(self, key):
                hint = (
                    f"set it with 'prefctl config set {self.name} {key} VALUE' "
                    f"or {env_var_for(key)}"
                    if self.in_file
                    else f"export {env_var_for(key)}, or create a profile with 'prefctl config init'"
                )
                raise ConfigError(f"profile '{self.name}' has no {key}", hint=hint)

    def path(self, value: str) -> Path:
        """A path from the profile: relative ones from the file are relative to its folder (the
        resolver already made those from flags or the environment absolute, from the cwd)."""
        p = Path(value).expanduser()
        if not p.is_absolute() and self.base_dir is not None:
            p = self.base_dir / p
        return p

    def resolve_client_secret(self, env: Mapping[str, str] | None = None) -> str:
        """The client secret; see ``secret_source`` for the order of the places searched."""
        return self._find_secret("client_secret", env)[0]

    def resolve_hashkey(self, env: Mapping[str, str] | None = None) -> str:
        """The webhook Hashkey, resolved like the client secret."""
        return self._find_secret("hashkey", env)[0]

    def secret_source(self, key: str, env: Mapping[str, str] | None = None) -> str:
        """Where the secret ``key`` (``client_secret`` or ``hashkey``) would be read from.

        The first that has a value wins: a flag or ``PREFCTL_CLIENT_SECRET`` (``PREFCTL_HASHKEY``)
        overriding the key itself; the variable named by ``client_secret_env``; the first line of
        ``client_secret_file``; the inline ``client_secret`` in the file. Raises ConfigError when
        there is none, or the file named cannot be read or is empty. Never returns the secret.
        """
        return self._find_secret(key, env)[1]

    def _find_secret(self, key: str, env: Mapping[str, str] | None) -> tuple[str, str]:
        env = os.environ if env is None else env
        holder: Any = self.webhooks if key in WEBHOOK_KEYS else self
        section = f"{WEBHOOKS}." if holder is self.webhooks else ""
        what = "webhook Hashkey" if holder is self.webhooks else "client secret"
        inline, env_name, file_name = (getattr(holder, key + end) for end in ("", "_env", "_file"))
        source = self.sources.get(section + key)
        value, where = "", ""
        if inline and source in (FROM_FLAG, FROM_ENV):
            value, where = inline, (f"${env_var_for(key)}" if source == FROM_ENV else "flag")
        elif env_name and env.get(env_name, "").strip():
            value, where = env[env_name].strip(), f"${env_name}"
        elif file_name:
            path = self.path(file_name)
            value, where = (
                _read_first_line(path, what, self.name, f"{section}{key}_file"),
                str(path),
            )
        elif inline:
            value, where = inline, "inline in the config file"
        if not value:
            raise ConfigError(
                f"no {what} for profile '{self.name}'",
                hint=f"export {env_name or env_var_for(key)}, or set {section}{key}_file "
                "in the profile",
            )
        from prefctl.logs import register_secret

        register_secret(value)
        return value, where


def _read_first_line(path: Path, what: str, profile: str, key: str) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = "it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else os_reason(exc)
    else:
        if text:
            return text.splitlines()[0].strip()
        reason = "it is empty"
    raise ConfigError(
        f"cannot read the {what} of profile '{profile}' from {path}: {reason}",
        hint=f"check {key} in the profile",
    )


def check_profile_name(name: str) -> None:
    """Raise ConfigError unless ``name`` is a usable profile name (letters, digits, ``_.-``)."""
    if not _PROFILE_NAME.fullmatch(name):
        raise ConfigError(
            f"invalid profile name '{name}'",
            hint="use letters, digits, '_', '.' and '-', starting with a letter or digit",
        )


@dataclass
class ConfigFile:
    """The parsed ``profiles.toml``: a default profile name and raw profile tables.

    The editing methods change this object only; ``save_config`` writes it.
    """

    path: Path
    default: str | None = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    exists: bool = False

    def warnings(self) -> list[str]:
        """Problems worth telling the user that do not stop the command."""
        if not self.exists or not _readable_by_others(self.path):
            return []
        for name, table in self.profiles.items():
            hooks = table.get(WEBHOOKS, {})
            if any(table.get(k) or hooks.get(k) for k in SECRET_KEYS):
                mode = stat.S_IMODE(self.path.stat().st_mode)
                return [
                    f"{self.path} holds a secret inline (profile '{name}') but has mode "
                    f"{mode:04o}, not 0600; run: chmod 600 {self.path}"
                ]
        return []

    def table(self, name: str) -> dict[str, Any]:
        """The raw table of profile ``name``; a ConfigError listing the known ones if absent."""
        if name not in self.profiles:
            raise unknown_profile(self, name)
        return self.profiles[name]

    def check_new_profile(self, name: str, *, replace: bool = False) -> None:
        """Raise ConfigError if ``name`` is not a valid profile name, or exists and not ``replace``."""
        check_profile_name(name)
        if name in self.profiles and not replace:
            raise ConfigError(
                f"profile '{name}' already exists in {self.path}", hint="pass --force to replace it"
            )

    def add_profile(
        self, name: str, values: Mapping[str, str], *, replace: bool = False, default: bool = False
    ) -> None:
        """Create profile ``name`` from dotted keys; the first profile also becomes the default."""
        self.check_new_profile(name, replace=replace)
        self.profiles[name] = {}
        for key, value in values.items():
            self.set_value(name, key, value)
        if default or self.default is None:
            self.default = name

    def set_value(self, name: str, key: str, value: str) -> str:
        """Set one key of profile ``name``; returns the key's dotted name."""
        table = self.table(name)
        dotted, _ = key_info(key)
        section, bare = split_key(dotted)
        check_key(bare, value, section=section)
        (table.setdefault(WEBHOOKS, {}) if section else table)[bare] = value
        return dotted

    def unset_value(self, name: str, key: str) -> tuple[str, bool]:
        """Remove one key of profile ``name`` (back to its default); returns (dotted name, removed)."""
        table = self.table(name)
        dotted, _ = key_info(key)
        section, bare = split_key(dotted)
        holder = table.get(WEBHOOKS, {}) if section else table
        removed = holder.pop(bare, None) is not None
        if section and not holder:
            table.pop(WEBHOOKS, None)
        return dotted, removed

    def remove_profile(self, name: str) -> bool:
        """Delete profile ``name``; returns whether it was the default (which is then unset)."""
        self.table(name)
        del self.profiles[name]
        was_default = self.default == name
        if was_default:
            self.default = None
        return was_default

    def use(self, name: str) -> None:
        """Make ``name`` the default profile."""
        self.table(name)
        self.default = name

    def to_toml(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.default:
            data["default"] = self.default
        data["profiles"] = self.profiles
        return data


def unknown_profile(cfg: ConfigFile, name: str) -> ConfigError:
    """The error for a profile ``cfg`` does not define, with a hint listing the ones it does."""
    if not cfg.exists:
        return ConfigError(
            f"unknown profile '{name}': the configuration file {cfg.path} does not exist",
            hint="check --config and PREFCTL_CONFIG; 'prefctl emulator start' writes profile"
            " 'local' there, 'prefctl config init NAME' another",
        )
    hint = (
        f"known profiles: {', '.join(sorted(cfg.profiles))}"
        if cfg.profiles
        else "run 'prefctl emulator start' to create profile 'local', or 'prefctl config init NAME'"
    )
    return ConfigError(f"unknown profile '{name}' in {cfg.path}", hint=hint)


def _readable_by_others(path: Path) -> bool:
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRWXG | stat.S_IRWXO))


def default_config_dir() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("prefctl"))


def config_path(
    explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """Where ``profiles.toml`` is: ``--config``, then ``PREFCTL_CONFIG``, then the platform dir."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit).expanduser()
    if env.get(ENV_CONFIG):
        return Path(env[ENV_CONFIG]).expanduser()
    return default_config_dir() / "profiles.toml"


def load_config(path: Path) -> ConfigFile:
    """Read and check ``profiles.toml``; a missing file is an empty configuration."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return ConfigFile(path=path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {os_reason(exc)}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    unknown = set(data) - {"default", "profiles"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key '{sorted(unknown)[0]}'")
    default = data.get("default")
    if default is not None and not isinstance(default, str):
        raise ConfigError(f"{path}: 'default' must be a profile name")
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        raise ConfigError(f"{path}: [profiles] must be a table")
    for name, table in profiles.items():
        _check_table(path, name, table)
    return ConfigFile(path=path, default=default, profiles=profiles, exists=True)


def _check_table(path: Path, name: str, table: Any) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: profiles.{name} must be a table")
    for key, value in table.items():
        if key == WEBHOOKS:
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: profiles.{name}.webhooks must be a table")
            for wkey, wvalue in value.items():
                check_key(wkey, wvalue, section=WEBHOOKS, where=f"{path}: profiles.{name}.webhooks")
        else:
            check_key(key, value, where=f"{path}: profiles.{name}")


def update_config(path: Path, change: Callable[[ConfigFile], T]) -> tuple[ConfigFile, T]:
    """Read ``path`` afresh, apply ``change`` and write it back, holding the file's lock
    throughout, so that concurrent prefctl commands (``config set`` in parallel jobs, an
    ``emulator start`` writing profile ``local``) each add their change instead of the last
    writer silently undoing the others'. Returns the file as written and ``change``'s result.
    """
    make_private_dir(path.parent, "the folder of the configuration file")
    with locked(path):
        cfg = load_config(path)
        result = change(cfg)
        save_config(cfg)
    return cfg, result


def save_config(cfg: ConfigFile) -> None:
    """Write the file atomically with mode 0600 (its folders 0700 when prefctl creates them)."""
    import tomli_w

    make_private_dir(cfg.path.parent, "the folder of the configuration file")
    write_private(cfg.path, tomli_w.dumps(cfg.to_toml()).encode("utf-8"))
    cfg.exists = True


def selected_profile_name(
    cfg: ConfigFile, name: str | None, env: Mapping[str, str] | None = None
) -> str:
    """``--profile``, then ``PREFCTL_PROFILE``, then the file's default, then ``local``."""
    env = os.environ if env is None else env
    return name or env.get(ENV_PROFILE) or cfg.default or DEFAULT_PROFILE


def resolve_profile(
    cfg: ConfigFile,
    name: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str | None] | None = None,
) -> Profile:
    """Resolve one profile: flags (``overrides``) > environment > file > defaults.

    ``overrides`` are keyed by bare key name (``api_url``, ``hashkey``); ``None`` means "not given".
    When the file defines no profile at all and none is selected, a profile is built from
    ``PREFCTL_<KEY>`` variables alone if any is set (for CI jobs without a config file).
    """
    env = os.environ if env is None else env
    chosen = selected_profile_name(cfg, name, env)
    table = cfg.profiles.get(chosen)
    in_file = table is not None
    if table is None:
        explicit = name or env.get(ENV_PROFILE) or cfg.default
        if cfg.profiles or explicit or not _env_defines_profile(env):
            raise unknown_profile(cfg, chosen)
        table = {}
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    sources: dict[str, str] = {}
    values: dict[str, Any] = {}
    for dotted in ALL_KEYS:
        section, key = split_key(dotted)
        file_table = table.get(WEBHOOKS, {}) if section else table
        value, source = _pick(key, flags, env, file_table)
        if source in (FROM_FLAG, FROM_ENV):
            where = f"{env_var_for(key)}" if source == FROM_ENV else f"--{key.replace('_', '-')}"
            check_key(key, value, section=section, where=where)
            if ALL_KEYS[dotted].is_path:
                value = str(Path(value).expanduser().absolute())
        if ALL_KEYS[dotted].boolean:
            values[dotted] = parse_bool(value)
        elif value:
            values[dotted] = value
        sources[dotted] = source
    return Profile(
        name=chosen,
        base_dir=cfg.path.parent,
        sources=sources,
        in_file=in_file,
        webhooks=WebhookConfig(
            **{
                k: values.pop(f"{WEBHOOKS}.{k}")
                for k in WEBHOOK_KEYS
                if f"{WEBHOOKS}.{k}" in values
            }
        ),
        **values,
    )


def command_line_value(key: str, value: str) -> str:
    """``value`` of ``key`` as typed on a command line, ready to be written into the file.

    A relative path is made absolute from the current folder, as for any command-line path: once in
    the file it would otherwise be read relative to the file's folder. ``~`` paths are kept as typed.
    """
    _, info = key_info(key)
    if info.is_path and value and not value.startswith("~") and not Path(value).is_absolute():
        return str(Path(value).absolute())
    return value


def _pick(
    key: str, flags: Mapping[str, str], env: Mapping[str, str], table: Mapping[str, Any]
) -> tuple[str, str]:
    if flags.get(key):
        return flags[key], FROM_FLAG
    if env.get(env_var_for(key), "").strip():
        return env[env_var_for(key)].strip(), FROM_ENV
    if table.get(key):
        return str(table[key]), FROM_FILE
    return "", FROM_DEFAULT


def _env_defines_profile(env: Mapping[str, str]) -> bool:
    return any(
        env.get(env_var_for(key)) for key in ALL_KEYS if split_key(key)[1] not in SECRET_KEYS
    )


def profile_as_dict(profile: Profile, *, mask: bool = True) -> dict[str, Any]:
    """A profile as plain data for display; secrets are replaced by ``***`` when ``mask``."""
    out: dict[str, Any] = {"name": profile.name}
    for f in fields(Profile):
        if f.name in ("name", WEBHOOKS, "base_dir", "sources", "in_file"):
            continue
        out[f.name] = _masked(f.name, getattr(profile, f.name), mask)
    out[WEBHOOKS] = {
        f.name: _masked(f.name, getattr(profile.webhooks, f.name), mask)
        for f in fields(WebhookConfig)
    }
    return out


def _masked(key: str, value: str, mask: bool) -> str:
    if mask and key in SECRET_KEYS and value:
        return "***"
    return value


__all__ = [
    "ALL_KEYS",
    "AUTH_METHODS",
    "DEFAULT_PROFILE",
    "ENVIRONMENTS",
    "ENV_PREFIX",
    "PROFILE_KEYS",
    "SECRET_KEYS",
    "WEBHOOKS",
    "WEBHOOK_KEYS",
    "ConfigFile",
    "KeyInfo",
    "Profile",
    "WebhookConfig",
    "check_key",
    "check_profile_name",
    "command_line_value",
    "config_path",
    "env_var_for",
    "key_info",
    "load_config",
    "make_private_dir",
    "profile_as_dict",
    "required_keys",
    "resolve_profile",
    "save_config",
    "selected_profile_name",
    "split_key",
    "unknown_profile",
    "write_private",
]
