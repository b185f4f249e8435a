"""Signing credentials from a profile, the environment and flags, in one place.

Every command that signs or verifies ``Service-Webhook`` headers (``events sign/verify``,
``endpoint check``, ``receive``) needs the same three values:

    ClientId                     --client-id            PREFCTL_SERVICE_CLIENT_ID   service_client_id
    EventsClientSignatureUserId  --signature-user-id    PREFCTL_SIGNATURE_USER_ID   [webhooks] signature_user_id
    Hashkey                      --hashkey-file F       the variable named by hashkey_env (PREFCTL_HASHKEY),
                                 --hashkey-env NAME     then [webhooks] hashkey_file, then hashkey inline
    encoding (raw or hex)        --signature-encoding   PREFCTL_SIGNATURE_ENCODING  [webhooks] signature_encoding

Flags win over the environment, which wins over the file. The Hashkey is never taken as a plain
flag value (it would land in shell history and ``ps``): a flag names a file or a variable instead.
With no ``profiles.toml`` at all (a CI job), the values come from flags and environment alone.
The resolved Hashkey is registered with ``prefctl.logs`` so that it is masked everywhere.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from prefctl import logs
from prefctl.config import (
    ENV_PROFILE,
    ConfigFile,
    Profile,
    WebhookConfig,
    env_var_for,
    resolve_profile,
    selected_profile_name,
)
from prefctl.errors import ConfigError
from prefctl.webhooks.signature import SigningCredentials

__all__ = ["load_signing_credentials", "signing_credentials"]


def signing_credentials(
    profile: Profile,
    *,
    hashkey_file: str | None = None,
    hashkey_env: str | None = None,
    env: Mapping[str, str] | None = None,
) -> SigningCredentials:
    """The credentials of a resolved ``profile``; ``hashkey_file``/``hashkey_env`` are flags.

    A Hashkey flag replaces every other Hashkey source, so that it wins over ``PREFCTL_HASHKEY``.
    """
    if not profile.service_client_id:
        raise ConfigError(
            f"profile '{profile.name}' has no service_client_id (the ClientId that is signed)",
            hint=f"pass --client-id, set {env_var_for('service_client_id')}, "
            f"or 'prefctl config set {profile.name} service_client_id VALUE'",
        )
    hooks = profile.webhooks
    if not hooks.signature_user_id:
        raise ConfigError(
            f"profile '{profile.name}' has no webhooks signature_user_id "
            "(the EventsClientSignatureUserId)",
            hint=f"pass --signature-user-id, set {env_var_for('signature_user_id')}, "
            f"or signature_user_id in [profiles.{profile.name}.webhooks]",
        )
    if hashkey_file:
        # A path given on the command line is relative to the working directory, not the profile.
        path = str(Path(hashkey_file).expanduser().absolute())
        hooks = WebhookConfig(hooks.signature_user_id, hashkey_env="", hashkey_file=path)
    elif hashkey_env:
        hooks = WebhookConfig(hooks.signature_user_id, hashkey_env=hashkey_env)
    hashkey = dataclasses.replace(profile, webhooks=hooks).resolve_hashkey(env)
    logs.register_secret(hashkey)
    return SigningCredentials(
        profile.service_client_id,
        hooks.signature_user_id,
        hashkey,
        encoding=profile.webhooks.signature_encoding,
    )


def load_signing_credentials(
    cfg: ConfigFile,
    profile_name: str | None = None,
    *,
    client_id: str | None = None,
    signature_user_id: str | None = None,
    hashkey_file: str | None = None,
    hashkey_env: str | None = None,
    signature_encoding: str | None = None,
    env: Mapping[str, str] | None = None,
) -> SigningCredentials:
    """Resolve the selected profile with these flags and return its signing credentials.

    When the file defines no profile and none was asked for by name (``--profile`` or
    ``PREFCTL_PROFILE``), an empty profile is used: flags and environment must then supply
    everything.
    """
    env = os.environ if env is None else env
    name = selected_profile_name(cfg, profile_name, env)
    explicit = bool(profile_name or env.get(ENV_PROFILE))
    if not cfg.profiles and not explicit:
        cfg = dataclasses.replace(cfg, profiles={name: {}})
    overrides = {
        "service_client_id": client_id,
        "signature_user_id": signature_user_id,
        "signature_encoding": signature_encoding,
    }
    profile = resolve_profile(cfg, profile_name, env=env, overrides=overrides)
    return signing_credentials(profile, hashkey_file=hashkey_file, hashkey_env=hashkey_env, env=env)
