"""The configuration keys of ``profiles.toml``: their documentation, rules and checks.

``prefctl.config`` re-exports every name here; this module holds the key catalogue so that the
resolver stays readable. Like ``config``, it is on the start-up fast path: no heavy imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefctl.errors import ConfigError

ENV_PREFIX = "PREFCTL_"

AUTH_METHODS = ("client_secret_basic", "client_secret_post", "certificate")
SIGNATURE_ENCODINGS = ("raw", "hex")
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off", "")
ENVIRONMENTS = ("Sandbox", "Production")
DEFAULT_PROFILE = "local"
WEBHOOKS = "webhooks"


@dataclass(frozen=True)
class KeyInfo:
    """Documentation and rules of one configuration key."""

    description: str
    secret: bool = False
    choices: tuple[str, ...] = ()
    default: str = ""
    is_path: bool = False
    boolean: bool = False


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
    "client_secret_file": KeyInfo("File whose first line is the client secret.", is_path=True),
    "client_secret": KeyInfo(
        "The client secret inline (only in a 0600 file; prefer the two keys above).", secret=True
    ),
    "certificate": KeyInfo(
        "PEM certificate registered for the client (auth_method = certificate).", is_path=True
    ),
    "private_key": KeyInfo("PEM private key of that certificate.", is_path=True),
    "environment": KeyInfo("Sandbox or Production.", choices=ENVIRONMENTS, default="Sandbox"),
    "ca_bundle": KeyInfo("Extra CA bundle (PEM) trusted for TLS to the service.", is_path=True),
    "allow_insecure_http": KeyInfo(
        "true lets auth_url and api_url use plain http:// to a host that is not this machine "
        "(warned on every use); the service's authentication documentation makes HTTPS "
        "mandatory.",
        default="false",
        boolean=True,
    ),
}

WEBHOOK_KEYS: dict[str, KeyInfo] = {
    "signature_user_id": KeyInfo("EventsClientSignatureUserId supplied by the support team."),
    "hashkey_env": KeyInfo(
        "Name of the environment variable holding the webhook Hashkey.", default="PREFCTL_HASHKEY"
    ),
    "hashkey_file": KeyInfo("File whose first line is the webhook Hashkey.", is_path=True),
    "hashkey": KeyInfo("The webhook Hashkey inline (only in a 0600 file).", secret=True),
    "signature_encoding": KeyInfo(
        "What the Signature is Base64 of: raw (the HMAC-SHA512 digest's bytes) or hex (its hex "
        "text).",
        choices=SIGNATURE_ENCODINGS,
        default="raw",
    ),
}

# Every key by its dotted name, as `config set` and the docs spell it: "auth_url", "webhooks.hashkey".
ALL_KEYS: dict[str, KeyInfo] = {
    **PROFILE_KEYS,
    **{f"{WEBHOOKS}.{k}": v for k, v in WEBHOOK_KEYS.items()},
}

SECRET_KEYS = frozenset(
    [k for k, v in PROFILE_KEYS.items() if v.secret]
    + [k for k, v in WEBHOOK_KEYS.items() if v.secret]
)


def required_keys(auth_method: str) -> tuple[str, ...]:
    """The keys a profile needs to get a token with ``auth_method`` (secrets aside)."""
    base = ("service_client_id", "user_id", "client_id")
    return (*base, "certificate", "private_key") if auth_method == "certificate" else base


def env_var_for(key: str) -> str:
    """The environment variable that overrides ``key``: ``api_url`` → ``PREFCTL_API_URL``."""
    return ENV_PREFIX + key.rsplit(".", 1)[-1].upper()


def split_key(key: str) -> tuple[str, str]:
    """``"webhooks.hashkey"`` (or just ``"hashkey"``) → ``("webhooks", "hashkey")``."""
    section, _, name = key.rpartition(".")
    if not section and name in WEBHOOK_KEYS:
        section = WEBHOOKS
    return section, name


def key_info(key: str) -> tuple[str, KeyInfo]:
    """The dotted name and rules of ``key`` (``auth_url``, ``webhooks.hashkey`` or ``hashkey``)."""
    section, bare = split_key(key)
    dotted = f"{section}.{bare}" if section else bare
    return dotted, _lookup(dotted)


def _lookup(dotted: str, where: str = "") -> KeyInfo:
    if dotted not in ALL_KEYS:
        prefix = f"{where}: " if where else ""
        raise ConfigError(
            f"{prefix}unknown key '{dotted}'", hint=f"known keys: {', '.join(ALL_KEYS)}"
        )
    return ALL_KEYS[dotted]


def check_key(key: str, value: Any, *, section: str = "", where: str = "") -> None:
    """Raise ConfigError unless ``key`` is a known key and ``value`` fits it."""
    prefix = f"{where}: " if where else ""
    info = _lookup(f"{section}.{key}" if section else key, where)
    if info.boolean:
        if not isinstance(value, bool) and (
            not isinstance(value, str) or value.strip().lower() not in _TRUE + _FALSE
        ):
            raise ConfigError(f"{prefix}{key} must be true or false, not {value!r}")
        return
    if not isinstance(value, str):
        raise ConfigError(f"{prefix}{key} must be a string")
    if info.choices and value not in info.choices:
        raise ConfigError(f"{prefix}{key} must be one of {', '.join(info.choices)}, not '{value}'")


def parse_bool(value: Any) -> bool:
    """A boolean key's value (a TOML boolean, or ``true``/``false`` text) as a bool."""
    return value if isinstance(value, bool) else str(value).strip().lower() in _TRUE


def insecure_url_warnings(urls: dict[str, str], *, allowed: bool, profile: str) -> list[str]:
    """Refuse a plain ``http://`` URL to a host that is not this machine (spec, Authentication:
    "HTTPS is mandatory"), unless ``allowed``; then return one warning per such URL.

    ``urls`` maps key names (``auth_url``, ``api_url``) to values. Loopback hosts (``localhost``,
    ``127.0.0.0/8``, ``::1``) are always allowed: nothing leaves the machine.
    """
    from prefctl.hosts import is_loopback

    warnings = []
    for key, url in urls.items():
        if not url.lower().startswith("http://") or is_loopback(url):
            continue
        if not allowed:
            raise ConfigError(
                f"{key} {url} of profile '{profile}' is plain http:// to another host: tokens and secrets "
                "would travel in clear (HTTPS is mandatory)",
                hint="use https://, or set allow_insecure_http = true in the profile "
                f"({env_var_for('allow_insecure_http')}=true) to accept the risk",
            )
        warnings.append(
            f"{key} {url} is plain http:// to another host (allow_insecure_http = true): "
            "tokens and secrets travel in clear"
        )
    return warnings
