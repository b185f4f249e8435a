"""The configuration resolver: precedence, profile selection, secrets, the file and its mode."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from prefctl import config, logs
from prefctl.config import ConfigFile, load_config, resolve_profile, save_config
from prefctl.errors import ConfigError

BASIC = """\
default = "dev"

[profiles.dev]
auth_url = "http://file-auth"
api_url = "http://file-api"
service_client_id = "FILE_CORP"
user_id = "file-user"
client_id = "file-client"
environment = "Sandbox"

[profiles.dev.webhooks]
signature_user_id = "file-signer"

[profiles.prod]
api_url = "https://prod-api"
service_client_id = "PROD_CORP"
"""


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def beside(config_path: Path, name: str, data: str | bytes) -> Path:
    """A file in the config folder (where relative paths in the file point)."""
    path = config_path.parent / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


@pytest.fixture
def cfg(config_path: Path) -> ConfigFile:
    return load_config(write(config_path, BASIC))


def with_secret_keys(config_path: Path, extra: str, webhooks: str = "") -> ConfigFile:
    text = BASIC.replace('environment = "Sandbox"\n', f'environment = "Sandbox"\n{extra}\n')
    if webhooks:
        text = text.replace('signature_user_id = "file-signer"\n', f"{webhooks}\n")
    return load_config(write(config_path, text))


# -- precedence ------------------------------------------------------------------------------------


def test_resolve_no_overrides_values_from_file_then_defaults(cfg: ConfigFile) -> None:
    profile = resolve_profile(cfg, env={})
    assert profile.name == "dev"
    assert profile.api_url == "http://file-api"
    assert profile.auth_method == "client_secret_basic"
    assert profile.webhooks.hashkey_env == "PREFCTL_HASHKEY"
    assert profile.sources["api_url"] == "file"
    assert profile.sources["auth_method"] == "default"
    assert profile.sources["webhooks.signature_user_id"] == "file"


@pytest.mark.parametrize(
    ("key", "env_value", "flag_value"),
    [
        ("auth_url", "http://env-auth", "http://flag-auth"),
        ("api_url", "http://env-api", "http://flag-api"),
        ("environment", "Production", "Sandbox"),
        ("auth_method", "client_secret_post", "certificate"),
    ],
)
def test_resolve_flag_env_file_flag_wins_then_env(
    cfg: ConfigFile, key: str, env_value: str, flag_value: str
) -> None:
    env = {config.env_var_for(key): env_value}

    from_env = resolve_profile(cfg, env=env)
    from_flag = resolve_profile(cfg, env=env, overrides={key: flag_value})

    assert (getattr(from_env, key), from_env.sources[key]) == (env_value, "env")
    assert (getattr(from_flag, key), from_flag.sources[key]) == (flag_value, "flag")


def test_resolve_webhook_key_env_overrides_file(cfg: ConfigFile) -> None:
    profile = resolve_profile(cfg, env={"PREFCTL_SIGNATURE_USER_ID": "env-signer"})
    assert profile.webhooks.signature_user_id == "env-signer"
    assert profile.sources["webhooks.signature_user_id"] == "env"


def test_resolve_blank_env_var_counts_as_unset(cfg: ConfigFile) -> None:
    profile = resolve_profile(cfg, env={"PREFCTL_API_URL": "  ", "PREFCTL_USER_ID": " env-user "})
    assert (profile.api_url, profile.sources["api_url"]) == ("http://file-api", "file")
    assert profile.user_id == "env-user"


def test_resolve_override_none_means_not_given(cfg: ConfigFile) -> None:
    profile = resolve_profile(cfg, env={}, overrides={"api_url": None})
    assert profile.api_url == "http://file-api"


def test_resolve_bad_choice_from_env_names_the_variable(cfg: ConfigFile) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_profile(cfg, env={"PREFCTL_AUTH_METHOD": "password"})
    assert "PREFCTL_AUTH_METHOD" in str(err.value)
    assert "client_secret_basic" in str(err.value)


def test_resolve_bad_choice_from_flag_names_the_flag(cfg: ConfigFile) -> None:
    with pytest.raises(ConfigError, match="--environment"):
        resolve_profile(cfg, env={}, overrides={"environment": "Staging"})


# -- profile selection ------------------------------------------------------------------------------


def test_select_flag_beats_env_beats_file_default(cfg: ConfigFile) -> None:
    assert resolve_profile(cfg, env={}).name == "dev"
    assert resolve_profile(cfg, env={"PREFCTL_PROFILE": "prod"}).name == "prod"
    assert resolve_profile(cfg, "dev", env={"PREFCTL_PROFILE": "prod"}).name == "dev"


def test_select_no_default_in_file_falls_back_to_local(config_path: Path) -> None:
    cfg = load_config(write(config_path, '[profiles.local]\nuser_id = "u"\n'))
    assert resolve_profile(cfg, env={}).name == "local"


def test_select_unknown_profile_lists_known_ones(cfg: ConfigFile) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_profile(cfg, "staging", env={})
    assert err.value.exit_code == 2
    assert "unknown profile 'staging'" in err.value.message
    assert err.value.hint == "known profiles: dev, prod"


def test_select_no_profiles_hint_says_how_to_create_one(config_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_profile(load_config(config_path), env={})
    assert "emulator start" in (err.value.hint or "")
    assert "config init" in (err.value.hint or "")


def test_resolve_no_file_env_only_builds_profile_for_ci(config_path: Path) -> None:
    env = {"PREFCTL_SERVICE_CLIENT_ID": "CI_CORP", "PREFCTL_USER_ID": "ci"}
    profile = resolve_profile(load_config(config_path), env=env)
    assert profile.scope == "CI_CORP/ci"
    assert not profile.in_file
    with pytest.raises(ConfigError) as err:
        profile.require("client_id")
    assert "export PREFCTL_CLIENT_ID" in (err.value.hint or "")


def test_resolve_no_file_only_a_secret_in_env_is_still_unknown_profile(config_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown profile"):
        resolve_profile(load_config(config_path), env={"PREFCTL_CLIENT_SECRET": "s3cr3t-x"})


def test_resolve_env_only_not_used_when_file_has_profiles(cfg: ConfigFile) -> None:
    with pytest.raises(ConfigError, match="unknown profile 'other'"):
        resolve_profile(cfg, env={"PREFCTL_PROFILE": "other", "PREFCTL_USER_ID": "x"})


def test_require_missing_key_names_key_and_how_to_set_it(cfg: ConfigFile) -> None:
    profile = resolve_profile(cfg, "prod", env={})
    with pytest.raises(ConfigError) as err:
        _ = profile.scope
    assert err.value.message == "profile 'prod' has no user_id"
    assert "prefctl config set prod user_id" in (err.value.hint or "")
    assert "PREFCTL_USER_ID" in (err.value.hint or "")


def test_required_keys_certificate_method_needs_certificate_and_key() -> None:
    assert "certificate" not in config.required_keys("client_secret_basic")
    assert {"certificate", "private_key"} <= set(config.required_keys("certificate"))


# -- paths -----------------------------------------------------------------------------------------


def test_path_relative_in_file_is_relative_to_config_folder(config_path: Path) -> None:
    cfg = with_secret_keys(config_path, 'ca_bundle = "certs/ca.pem"')
    profile = resolve_profile(cfg, env={})
    assert profile.path(profile.ca_bundle) == config_path.parent / "certs" / "ca.pem"


def test_path_relative_from_env_is_relative_to_current_folder(
    cfg: ConfigFile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    profile = resolve_profile(cfg, env={"PREFCTL_CA_BUNDLE": "ca.pem"})
    assert profile.path(profile.ca_bundle) == tmp_path / "ca.pem"


def test_config_path_flag_beats_env_beats_platform_dir(tmp_path: Path) -> None:
    env = {"PREFCTL_CONFIG": str(tmp_path / "env.toml")}
    assert config.config_path(tmp_path / "flag.toml", env=env) == tmp_path / "flag.toml"
    assert config.config_path(None, env=env) == tmp_path / "env.toml"
    default = config.config_path(None, env={})
    assert default.name == "profiles.toml"
    assert default.parent == config.default_config_dir()


# -- secrets ---------------------------------------------------------------------------------------


def test_secret_env_named_by_profile_beats_file_and_inline(config_path: Path) -> None:
    beside(config_path, "secret.txt", "from-file-123\n")
    cfg = with_secret_keys(
        config_path,
        'client_secret_env = "MY_SECRET"\nclient_secret_file = "secret.txt"\n'
        'client_secret = "inline-123"',
    )
    profile = resolve_profile(cfg, env={})

    assert profile.resolve_client_secret({"MY_SECRET": "from-env-123"}) == "from-env-123"
    assert profile.secret_source("client_secret", {"MY_SECRET": "x" * 8}) == "$MY_SECRET"
    assert profile.resolve_client_secret({}) == "from-file-123"
    assert profile.secret_source("client_secret", {}) == str(config_path.parent / "secret.txt")


def test_secret_prefctl_client_secret_overrides_a_custom_env_name(config_path: Path) -> None:
    cfg = with_secret_keys(config_path, 'client_secret_env = "MY_SECRET"')
    env = {"PREFCTL_CLIENT_SECRET": "override-123", "MY_SECRET": "named-123"}
    profile = resolve_profile(cfg, env=env)
    assert profile.resolve_client_secret(env) == "override-123"
    assert profile.secret_source("client_secret", env) == "$PREFCTL_CLIENT_SECRET"


def test_secret_inline_used_last(config_path: Path) -> None:
    cfg = with_secret_keys(config_path, 'client_secret = "inline-123"')
    profile = resolve_profile(cfg, env={})
    assert profile.resolve_client_secret({}) == "inline-123"
    assert profile.secret_source("client_secret", {}) == "inline in the config file"
    assert profile.resolve_client_secret({"PREFCTL_CLIENT_SECRET": "env-1234"}) == "env-1234"


def test_secret_file_first_line_stripped(config_path: Path) -> None:
    beside(config_path, "s", "\n  line-one-secret  \nline two\n")
    cfg = with_secret_keys(config_path, 'client_secret_file = "s"')
    assert resolve_profile(cfg, env={}).resolve_client_secret({}) == "line-one-secret"


def test_secret_missing_error_names_variable_and_file_key(cfg: ConfigFile) -> None:
    profile = resolve_profile(cfg, env={})
    with pytest.raises(ConfigError) as err:
        profile.resolve_client_secret({})
    assert err.value.exit_code == 2
    assert err.value.message == "no client secret for profile 'dev'"
    assert "PREFCTL_CLIENT_SECRET" in (err.value.hint or "")
    assert "client_secret_file" in (err.value.hint or "")


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"", "it is empty"), (b"  \n\n", "it is empty"), (b"\xff\xfe\x00", "not UTF-8")],
)
def test_secret_file_empty_or_binary_is_an_error(
    config_path: Path, content: bytes, reason: str
) -> None:
    beside(config_path, "s", content)
    cfg = with_secret_keys(config_path, 'client_secret_file = "s"\nclient_secret = "inline-99"')
    with pytest.raises(ConfigError) as err:
        resolve_profile(cfg, env={}).resolve_client_secret({})
    assert reason in err.value.message
    assert str(config_path.parent / "s") in err.value.message


def test_secret_file_missing_is_an_error_not_a_fallback(config_path: Path) -> None:
    cfg = with_secret_keys(config_path, 'client_secret_file = "nope"\nclient_secret = "inline-9"')
    with pytest.raises(ConfigError, match="no such file"):
        resolve_profile(cfg, env={}).resolve_client_secret({})


def test_secret_file_is_a_directory_is_an_error(config_path: Path) -> None:
    (config_path.parent / "dir").mkdir(parents=True)
    cfg = with_secret_keys(config_path, 'client_secret_file = "dir"')
    with pytest.raises(ConfigError, match="is a directory"):
        resolve_profile(cfg, env={}).resolve_client_secret({})


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_secret_file_unreadable_is_an_error(config_path: Path) -> None:
    write(config_path.parent / "s", "secret-123", mode=0o000)
    cfg = with_secret_keys(config_path, 'client_secret_file = "s"')
    with pytest.raises(ConfigError, match="permission denied"):
        resolve_profile(cfg, env={}).resolve_client_secret({})


def test_hashkey_resolves_like_client_secret(config_path: Path) -> None:
    beside(config_path, "hk", "hash-from-file\n")
    cfg = with_secret_keys(
        config_path, "", webhooks='hashkey_env = "HK"\nhashkey_file = "hk"\nhashkey = "inline-hk"'
    )
    profile = resolve_profile(cfg, env={})
    assert profile.resolve_hashkey({"HK": "hash-from-env"}) == "hash-from-env"
    assert profile.resolve_hashkey({}) == "hash-from-file"
    env_override = resolve_profile(cfg, env={"PREFCTL_HASHKEY": "hash-override"})
    assert env_override.resolve_hashkey({"HK": "named"}) == "hash-override"


def test_hashkey_missing_error_names_webhook_keys(cfg: ConfigFile) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_profile(cfg, env={}).resolve_hashkey({})
    assert "webhook Hashkey" in err.value.message
    assert "webhooks.hashkey_file" in (err.value.hint or "")


def test_secret_resolved_is_registered_for_redaction(config_path: Path) -> None:
    cfg = with_secret_keys(config_path, 'client_secret = "inline-redact-me"')
    resolve_profile(cfg, env={}).resolve_client_secret({})
    assert logs.redact("got inline-redact-me") == "got ***"


def test_profile_repr_and_dict_hide_secrets(config_path: Path) -> None:
    cfg = with_secret_keys(
        config_path, 'client_secret = "inline-repr-1"', webhooks='hashkey = "hk-1"'
    )
    profile = resolve_profile(cfg, env={})
    assert "inline-repr-1" not in repr(profile)
    data = config.profile_as_dict(profile)
    assert data["client_secret"] == "***"
    assert data["webhooks"]["hashkey"] == "***"
    assert config.profile_as_dict(profile, mask=False)["client_secret"] == "inline-repr-1"


# -- the file ---------------------------------------------------------------------------------------


def test_load_missing_file_is_empty_configuration(config_path: Path) -> None:
    cfg = load_config(config_path)
    assert (cfg.exists, cfg.profiles, cfg.default) == (False, {}, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[profiles.dev\n", "is not valid TOML"),
        ('colour = "red"\n', "unknown top-level key 'colour'"),
        ("default = 3\n", "'default' must be a profile name"),
        ('profiles = "x"\n', "[profiles] must be a table"),
        ('[profiles]\ndev = "x"\n', "profiles.dev must be a table"),
        ('[profiles.dev]\npassword = "x"\n', "unknown key 'password'"),
        ("[profiles.dev]\nuser_id = 7\n", "user_id must be a string"),
        ('[profiles.dev]\nenvironment = "Test"\n', "environment must be one of"),
        ('[profiles.dev]\nwebhooks = "x"\n', "webhooks must be a table"),
        ('[profiles.dev.webhooks]\nhashkey_path = "x"\n', "unknown key 'webhooks.hashkey_path'"),
        ('[profiles.dev]\nhashkey = "x"\n', "unknown key 'hashkey'"),
    ],
)
def test_load_invalid_file_one_line_error_naming_file(
    config_path: Path, text: str, message: str
) -> None:
    write(config_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(config_path)
    assert message in str(err.value)
    assert str(config_path) in str(err.value)
    assert "\n" not in str(err.value)


def test_load_config_is_a_directory_is_an_error(config_path: Path) -> None:
    config_path.mkdir(parents=True)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(config_path)


def test_save_writes_0600_file_in_0700_folder_and_round_trips(config_path: Path) -> None:
    cfg = load_config(config_path)
    cfg.add_profile("dev", {"user_id": "u", "webhooks.hashkey_env": "HK"})
    save_config(cfg)

    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(config_path.parent.stat().st_mode) == 0o700
    again = load_config(config_path)
    assert again.default == "dev"
    assert again.profiles == {"dev": {"user_id": "u", "webhooks": {"hashkey_env": "HK"}}}
    assert [p.name for p in config_path.parent.iterdir()] == ["profiles.toml"]


def test_save_makes_a_world_readable_file_private(cfg: ConfigFile, config_path: Path) -> None:
    config_path.chmod(0o644)
    save_config(cfg)
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600


def test_warnings_inline_secret_in_readable_file_says_chmod(config_path: Path) -> None:
    cfg = with_secret_keys(config_path, 'client_secret = "inline-123"')
    config_path.chmod(0o644)
    (warning,) = cfg.warnings()
    assert "mode 0644" in warning
    assert f"chmod 600 {config_path}" in warning
    assert "inline-123" not in warning


def test_warnings_inline_hashkey_in_group_readable_file(config_path: Path) -> None:
    cfg = with_secret_keys(config_path, "", webhooks='hashkey = "hk-123"')
    config_path.chmod(0o640)
    assert len(cfg.warnings()) == 1


def test_warnings_none_when_private_or_no_inline_secret(config_path: Path, cfg: ConfigFile) -> None:
    config_path.chmod(0o644)
    assert cfg.warnings() == []
    private = with_secret_keys(config_path, 'client_secret = "inline-123"')
    assert private.warnings() == []


# -- editing ---------------------------------------------------------------------------------------


def test_add_profile_first_becomes_default_later_only_when_asked(config_path: Path) -> None:
    cfg = load_config(config_path)
    cfg.add_profile("a", {})
    cfg.add_profile("b", {})
    assert cfg.default == "a"
    cfg.add_profile("c", {}, default=True)
    assert cfg.default == "c"


def test_add_profile_existing_needs_replace(cfg: ConfigFile) -> None:
    with pytest.raises(ConfigError, match="already exists"):
        cfg.add_profile("dev", {"user_id": "x"})
    cfg.add_profile("dev", {"user_id": "x"}, replace=True)
    assert cfg.profiles["dev"] == {"user_id": "x"}


@pytest.mark.parametrize("name", ["", "-x", "a b", "a/b", "ä"])
def test_add_profile_invalid_name_is_rejected(cfg: ConfigFile, name: str) -> None:
    with pytest.raises(ConfigError, match="invalid profile name"):
        cfg.add_profile(name, {})


def test_set_value_accepts_dotted_and_bare_webhook_keys(cfg: ConfigFile) -> None:
    assert cfg.set_value("prod", "webhooks.hashkey_env", "HK") == "webhooks.hashkey_env"
    assert cfg.set_value("prod", "signature_user_id", "s") == "webhooks.signature_user_id"
    assert cfg.profiles["prod"]["webhooks"] == {"hashkey_env": "HK", "signature_user_id": "s"}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("colour", "red", "unknown key 'colour'"),
        ("webhooks.api_url", "x", "unknown key 'webhooks.api_url'"),
        ("auth_method", "magic", "auth_method must be one of"),
    ],
)
def test_set_value_bad_key_or_choice_is_rejected(
    cfg: ConfigFile, key: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        cfg.set_value("dev", key, value)


def test_unset_value_removes_key_and_empty_webhooks_table(cfg: ConfigFile) -> None:
    assert cfg.unset_value("dev", "webhooks.signature_user_id") == (
        "webhooks.signature_user_id",
        True,
    )
    assert "webhooks" not in cfg.profiles["dev"]
    assert cfg.unset_value("dev", "ca_bundle") == ("ca_bundle", False)


def test_remove_default_profile_clears_default(cfg: ConfigFile) -> None:
    assert cfg.remove_profile("dev") is True
    assert cfg.default is None
    assert cfg.remove_profile("prod") is False
    with pytest.raises(ConfigError, match="unknown profile 'prod'"):
        cfg.use("prod")
