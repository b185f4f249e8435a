"""Signing credentials: flags > environment > profile, and a Hashkey never taken from a flag value."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefctl import logs
from prefctl.config import ConfigFile
from prefctl.errors import ConfigError
from prefctl.webhooks.credentials import load_signing_credentials


def _config(tmp_path: Path, webhooks: dict[str, str] | None = None) -> ConfigFile:
    table: dict[str, object] = {"service_client_id": "FILE_CORP"}
    table["webhooks"] = {"signature_user_id": "file-signer", **(webhooks or {})}
    return ConfigFile(path=tmp_path / "profiles.toml", profiles={"local": table}, exists=True)


def test_profile_supplies_every_value(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("file-hashkey-1\n")
    creds = load_signing_credentials(_config(tmp_path, {"hashkey_file": "key"}), env={})
    assert (creds.client_id, creds.signature_user_id, creds.hashkey) == (
        "FILE_CORP",
        "file-signer",
        "file-hashkey-1",
    )


def test_environment_beats_the_file_and_flags_beat_both(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("file-hashkey-1\n")
    (tmp_path / "flag-key").write_text("flag-hashkey-1\n")
    cfg = _config(tmp_path, {"hashkey_file": "key"})
    env = {
        "PREFCTL_HASHKEY": "env-hashkey-1",
        "PREFCTL_SERVICE_CLIENT_ID": "ENV_CORP",
        "PREFCTL_SIGNATURE_USER_ID": "env-signer",
    }
    from_env = load_signing_credentials(cfg, env=env)
    assert (from_env.client_id, from_env.signature_user_id, from_env.hashkey) == (
        "ENV_CORP",
        "env-signer",
        "env-hashkey-1",
    )
    from_flags = load_signing_credentials(
        cfg,
        client_id="FLAG_CORP",
        signature_user_id="flag-signer",
        hashkey_file=str(tmp_path / "flag-key"),
        env=env,
    )
    assert (from_flags.client_id, from_flags.signature_user_id, from_flags.hashkey) == (
        "FLAG_CORP",
        "flag-signer",
        "flag-hashkey-1",
    )


def test_hashkey_env_flag_names_the_variable(tmp_path: Path) -> None:
    env = {"PREFCTL_HASHKEY": "env-hashkey-1", "CI_HOOK_KEY": "ci-hashkey-1"}
    creds = load_signing_credentials(_config(tmp_path), hashkey_env="CI_HOOK_KEY", env=env)
    assert creds.hashkey == "ci-hashkey-1"
    with pytest.raises(ConfigError) as info:
        load_signing_credentials(_config(tmp_path), hashkey_env="MISSING_KEY", env=env)
    assert "MISSING_KEY" in (info.value.hint or "")


def test_without_profiles_flags_and_environment_are_enough(tmp_path: Path) -> None:
    empty = ConfigFile(path=tmp_path / "profiles.toml")
    creds = load_signing_credentials(
        empty, client_id="C", signature_user_id="S", env={"PREFCTL_HASHKEY": "env-hashkey-1"}
    )
    assert (creds.client_id, creds.signature_user_id, creds.hashkey) == ("C", "S", "env-hashkey-1")


def test_an_explicitly_chosen_profile_must_exist(tmp_path: Path) -> None:
    empty = ConfigFile(path=tmp_path / "profiles.toml")
    env = {"PREFCTL_HASHKEY": "env-hashkey-1", "PREFCTL_PROFILE": "prod"}
    with pytest.raises(ConfigError, match="unknown profile 'prod'"):
        load_signing_credentials(empty, client_id="C", signature_user_id="S", env=env)


def test_resolved_hashkey_is_masked_in_logs(tmp_path: Path) -> None:
    env = {"PREFCTL_HASHKEY": "a-hashkey-to-mask-42"}
    load_signing_credentials(_config(tmp_path), env=env)
    assert logs.redact("key is a-hashkey-to-mask-42") == "key is ***"


def test_missing_ids_say_which_flag_sets_them(tmp_path: Path) -> None:
    empty = ConfigFile(path=tmp_path / "profiles.toml")
    env = {"PREFCTL_HASHKEY": "env-hashkey-1"}
    with pytest.raises(ConfigError) as no_client:
        load_signing_credentials(empty, signature_user_id="S", env=env)
    assert "--client-id" in (no_client.value.hint or "")
    with pytest.raises(ConfigError) as no_user:
        load_signing_credentials(empty, client_id="C", env=env)
    assert "--signature-user-id" in (no_user.value.hint or "")
