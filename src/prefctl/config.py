"""Configuration profiles: ``profiles.toml``, environment overrides and secret resolution.

One resolver decides every value, in this order (first wins)::

    flags  >  PREFCTL_<KEY> environment variables  >  profiles.toml  >  built-in defaults

The file lives in ``platformdirs.user_config_dir("prefctl")``; ``--config PATH`` or
``PREFCTL_CONFIG`` selects another. The profile is ``--profile``, then ``PREFCTL_PROFILE``, then the
file's ``default``. prefctl writes its files with mode 0600. A secret written inline in the file is
honoured only with a warning when the file is readable by others.

This module is imported on the fast path of ``prefctl token get``: it must not import pydantic,
httpx or anything heavy.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from prefctl.errors import ConfigError

ENV_CONFIG = "PREFCTL_CONFIG"
ENV_PROFILE = "PREFCTL_PROFILE"
ENV_OUTPUT = "PREFCTL_OUTPUT"
ENV_CACHE_DIR = "PREFCTL_CACHE_DIR"
ENV_DATA_DIR = "PREFCTL_DATA_DIR"
ENV_PREFIX = "PREFCTL_"

AUTH_METHODS = ("client_secret_basic", "client_secret_post", "certificate")
ENVIRONMENTS = ("Sandbox", "Production")
DEFAULT_PROFILE = "local"


@dataclass(frozen=True)
class KeyInfo:
    """Documentation and rules of one configuration key."""

    description: str
    secret: bool = False
    choices: tuple[str, ...] = ()
    default: str = ""


PROFILE_KEYS: dict[str, KeyInfo] = {
    "auth_url": KeyInfo(
        "Token service base URL; tokens come from POST {auth_url}/oauth2/v1/token.",
        default="http://127.0.0.1:8750",
    ),
    "api_url": KeyInfo(
        "REST API base URL; resources live under {api_url}/{service_client_id}/.",
        default="http://127.0.0.1:8750/api/v1",
    ),
    "service_client_id": KeyInfo(
        "The account's service client id (a path parameter, not client_id)."
    ),
    "user_id": KeyInfo("API user named in the token scope <service_client_id>/<user_id>."),
    "client_id": KeyInfo("OAuth client id (48 characters)."),
    "auth_method": KeyInfo(
        "How the client authenticates at the token endpoint.",
        choices=AUTH_METHODS,
        default="client_secret_basic",
    ),
    "client_secret_env": KeyInfo(
        "Name of the environment variable holding the client secret.",
        default="PREFCTL_CLIENT_SECRET",
    ),
    "client_secret_file": KeyInfo("File whose first line is the client secret."),
    "client_secret": KeyInfo(
        "The client secret inline (only in a 0600 file; prefer the two keys above).", secret=True
    ),
    "certificate": KeyInfo(
        "PEM certificate registered for the client (auth_method = certificate)."
    ),
    "private_key": KeyInfo("PEM private key of that certificate."),
    "environment": KeyInfo("Sandbox or Production.", choices=ENVIRONMENTS, default="Sandbox"),
    "ca_bundle": KeyInfo("Extra CA bundle (PEM) trusted for TLS to the service."),
}

WEBHOOK_KEYS: dict[str, KeyInfo] = {
    "signature_user_id": KeyInfo("EventsClientSignatureUserId supplied by the support team."),
    "hashkey_env": KeyInfo(
        "Name of the environment variable holding the webhook Hashkey.", default="PREFCTL_HASHKEY"
    ),
    "hashkey_file": KeyInfo("File whose first line is the webhook Hashkey."),
    "hashkey": KeyInfo("The webhook Hashkey inline (only in a 0600 file).", secret=True),
}

SECRET_KEYS = frozenset(
    [k for k, v in PROFILE_KEYS.items() if v.secret]
    + [k for k, v in WEBHOOK_KEYS.items() if v.secret]
)


def env_var_for(key: str) -> str:
    """The environment variable that overrides ``key``: ``api_url`` → ``PREFCTL_API_URL``."""
    return ENV_PREFIX + key.upper()


@dataclass(frozen=True)
class WebhookConfig:
    """The ``[profiles.NAME.webhooks]`` table: what a receiver needs to verify signatures."""

    signature_user_id: str = ""
    hashkey_env: str = "PREFCTL_HASHKEY"
    hashkey_file: str = ""
    hashkey: str = ""


@dataclass(frozen=True)
class Profile:
    """One fully resolved profile. Secrets are resolved on demand, never stored in reprs."""

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
    webhooks: WebhookConfig = field(default_factory=WebhookConfig)
    base_dir: Path | None = field(default=None, compare=False)

    @property
    def scope(self) -> str:
        """The token scope ``<service_client_id>/<user_id>``."""
        self.require("service_client_id", "user_id")
        return f"{self.service_client_id}/{self.user_id}"

    @property
    def token_url(self) -> str:
        return self.auth_url.rstrip("/") + "/oauth2/v1/token"

    def require(self, *keys: str) -> None:
        """Raise a ConfigError naming the first of ``keys`` that has no value."""
        for key in keys:
            if not getattr(self, key):
                raise ConfigError(
                    f"profile '{self.name}' has no {key}",
                    hint=f"set it with 'prefctl config set {self.name} {key} VALUE' "
                    f"or {env_var_for(key)}",
                )

    def path(self, value: str) -> Path:
        """A path from the profile, relative to the config file's folder."""
        p = Path(value).expanduser()
        if not p.is_absolute() and self.base_dir is not None:
            p = self.base_dir / p
        return p

    def resolve_client_secret(self, env: Mapping[str, str] | None = None) -> str:
        """The client secret, from (first found) PREFCTL_CLIENT_SECRET, the variable named by
        ``client_secret_env``, ``client_secret_file``, or the inline ``client_secret``."""
        return self._secret(
            "client secret",
            self.client_secret,
            self.client_secret_env,
            self.client_secret_file,
            "client_secret",
            env,
        )

    def resolve_hashkey(self, env: Mapping[str, str] | None = None) -> str:
        """The webhook Hashkey, resolved like the client secret (PREFCTL_HASHKEY first)."""
        w = self.webhooks
        return self._secret(
            "webhook Hashkey", w.hashkey, w.hashkey_env, w.hashkey_file, "hashkey", env
        )

    def _secret(
        self,
        what: str,
        inline: str,
        env_name: str,
        file_name: str,
        key: str,
        env: Mapping[str, str] | None,
    ) -> str:
        env = os.environ if env is None else env
        if env_name and env.get(env_name):
            return env[env_name].strip()
        if file_name:
            path = self.path(file_name)
            try:
                value = path.read_text(encoding="utf-8").splitlines()[0].strip()
            except (OSError, IndexError, UnicodeDecodeError) as exc:
                reason = "it is empty" if isinstance(exc, IndexError) else _os_reason(exc)
                raise ConfigError(
                    f"cannot read the {what} of profile '{self.name}' from {path}: {reason}",
                    hint=f"check {key}_file in the profile",
                ) from None
            if value:
                return value
        if inline:
            return inline
        raise ConfigError(
            f"no {what} for profile '{self.name}'",
            hint=f"export {env_name or env_var_for(key)}, or set {key}_file in the profile",
        )


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)


@dataclass
class ConfigFile:
    """The parsed ``profiles.toml``: a default profile name and raw profile tables."""

    path: Path
    default: str | None = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    exists: bool = False

    def warnings(self) -> list[str]:
        """Problems worth telling the user that do not stop the command."""
        out: list[str] = []
        if self.exists and _readable_by_others(self.path):
            for name, table in self.profiles.items():
                inline = [
                    k for k in SECRET_KEYS if table.get(k) or table.get("webhooks", {}).get(k)
                ]
                if inline:
                    out.append(
                        f"{self.path} holds a secret inline (profile '{name}') and is readable by "
                        f"others; run: chmod 600 {self.path}"
                    )
                    break
        return out

    def to_toml(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.default:
            data["default"] = self.default
        data["profiles"] = self.profiles
        return data


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
        raise ConfigError(f"cannot read {path}: {_os_reason(exc)}") from None
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
        if key == "webhooks":
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: profiles.{name}.webhooks must be a table")
            for wkey, wvalue in value.items():
                check_key(
                    wkey, wvalue, section="webhooks", where=f"{path}: profiles.{name}.webhooks"
                )
        else:
            check_key(key, value, where=f"{path}: profiles.{name}")


def check_key(key: str, value: Any, *, section: str = "", where: str = "") -> None:
    """Raise ConfigError unless ``key`` is a known key and ``value`` fits it."""
    keys = WEBHOOK_KEYS if section == "webhooks" else PROFILE_KEYS
    prefix = f"{where}: " if where else ""
    if key not in keys:
        known = ", ".join(sorted(keys))
        raise ConfigError(f"{prefix}unknown key '{key}'", hint=f"known keys: {known}")
    if not isinstance(value, str):
        raise ConfigError(f"{prefix}{key} must be a string")
    choices = keys[key].choices
    if choices and value not in choices:
        raise ConfigError(f"{prefix}{key} must be one of {', '.join(choices)}, not '{value}'")


def save_config(cfg: ConfigFile) -> None:
    """Write the file atomically with mode 0600 (its folder 0700 when prefctl creates it)."""
    import tomli_w

    cfg.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_private(cfg.path, tomli_w.dumps(cfg.to_toml()).encode("utf-8"))
    cfg.exists = True


def write_private(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data``, readable by the owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
    """Resolve one profile: flags (``overrides``) > environment > file > defaults."""
    env = os.environ if env is None else env
    chosen = selected_profile_name(cfg, name, env)
    table = cfg.profiles.get(chosen)
    if table is None:
        known = ", ".join(sorted(cfg.profiles)) or "none"
        hint = (
            "run 'prefctl emulator start' to create profile 'local', or 'prefctl config init NAME'"
            if not cfg.profiles
            else f"known profiles: {known}"
        )
        raise ConfigError(f"unknown profile '{chosen}' in {cfg.path}", hint=hint)
    values: dict[str, Any] = {"name": chosen, "base_dir": cfg.path.parent}
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key in PROFILE_KEYS:
        value = flags.get(key) or env.get(env_var_for(key)) or table.get(key)
        if value:
            check_key(key, value, where=f"profile '{chosen}'")
            values[key] = value
    hooks_table = table.get("webhooks", {})
    hooks: dict[str, str] = {}
    for key in WEBHOOK_KEYS:
        value = flags.get(key) or env.get(env_var_for(key)) or hooks_table.get(key)
        if value:
            hooks[key] = value
    values["webhooks"] = WebhookConfig(**hooks)
    return Profile(**values)


def profile_as_dict(profile: Profile, *, mask: bool = True) -> dict[str, Any]:
    """A profile as plain data for display; secrets are replaced by ``***`` when ``mask``."""
    out: dict[str, Any] = {"name": profile.name}
    for f in fields(Profile):
        if f.name in ("name", "webhooks", "base_dir"):
            continue
        out[f.name] = _masked(f.name, getattr(profile, f.name), mask)
    out["webhooks"] = {
        f.name: _masked(f.name, getattr(profile.webhooks, f.name), mask)
        for f in fields(WebhookConfig)
    }
    return out


def _masked(key: str, value: str, mask: bool) -> str:
    if mask and key in SECRET_KEYS and value:
        return "***"
    return value


__all__ = [
    "AUTH_METHODS",
    "DEFAULT_PROFILE",
    "ENVIRONMENTS",
    "PROFILE_KEYS",
    "WEBHOOK_KEYS",
    "ConfigFile",
    "KeyInfo",
    "Profile",
    "WebhookConfig",
    "check_key",
    "config_path",
    "load_config",
    "profile_as_dict",
    "resolve_profile",
    "save_config",
    "write_private",
]
