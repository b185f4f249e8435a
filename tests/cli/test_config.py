"""``prefctl config``: init, list, show, use, set, unset, remove and path, as a user runs them."""

from __future__ import annotations

import os
import stat
import sys
import tomllib
from pathlib import Path

import pytest

from prefctl.emulator.serve import RunningEmulator
from tests.helpers import CliResult, run_cli, run_in_terminal

REQUIRED = ("--service-client-id", "DEMO_CORP", "--user-id", "admin", "--client-id", "c" * 48)
SECRET = "s3cr3t-never-shown-0123456789"


def read_toml(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def init(name: str = "dev", *extra: str) -> CliResult:
    result = run_cli("config", "init", name, *REQUIRED, *extra)
    assert result.exit_code == 0, result.stderr
    return result


def one_line_error(result: CliResult, code: int = 2) -> str:
    """The single stderr line of a failed command (asserting there is exactly one)."""
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def run_tty(
    args: list[str], answers: list[tuple[str, str]], *, hidden: bool = False, timeout: float = 30.0
) -> tuple[int, str]:
    """Run ``prefctl ARGS`` on a pseudo-terminal, typing each answer (a line) when its prompt
    appears; ``hidden``: to password prompts (see ``run_in_terminal``)."""
    lines = [(prompt, answer + "\n") for prompt, answer in answers]
    result = run_in_terminal(*args, answers=lines, hidden=hidden, timeout=timeout)
    return result.exit_code, result.output


# -- init ------------------------------------------------------------------------------------------


def test_init_flags_write_private_file_with_first_profile_default(
    config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = init(
        "dev",
        "--api-url",
        "https://api.example/v1",
        "--signature-user-id",
        "signer",
        "--hashkey-env",
        "MY_HASHKEY",
        "--client-secret-file",
        "secret.txt",
    )

    assert result.stdout == ""
    assert "profile 'dev' written" in result.stderr
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(config_path.parent.stat().st_mode) == 0o700
    data = read_toml(config_path)
    assert data["default"] == "dev"
    assert data["profiles"]["dev"] == {
        "api_url": "https://api.example/v1",
        "service_client_id": "DEMO_CORP",
        "user_id": "admin",
        "client_id": "c" * 48,
        "client_secret_file": str(Path.cwd() / "secret.txt"),  # a flag path: from the cwd
        "webhooks": {"signature_user_id": "signer", "hashkey_env": "MY_HASHKEY"},
    }


def test_init_never_writes_a_secret_and_says_where_it_is_read(config_path: Path) -> None:
    result = init("dev")
    assert "secret" not in config_path.read_text()
    assert "PREFCTL_CLIENT_SECRET" in result.stderr


def test_init_second_profile_not_default_unless_asked(config_path: Path) -> None:
    init("dev")
    init("prod")
    assert read_toml(config_path)["default"] == "dev"
    init("stage", "--default")
    assert read_toml(config_path)["default"] == "stage"


def test_init_existing_profile_exit_2_unless_force(config_path: Path) -> None:
    init("dev")
    line = one_line_error(run_cli("config", "init", "dev", *REQUIRED))
    assert "already exists" in line
    assert "--force" in line
    init("dev", "--force", "--environment", "Production")
    assert read_toml(config_path)["profiles"]["dev"]["environment"] == "Production"


def test_init_no_name_without_tty_exit_2(config_path: Path) -> None:
    line = one_line_error(run_cli("config", "init", *REQUIRED))
    assert "missing profile NAME" in line
    assert not config_path.exists()


def test_init_missing_required_without_tty_names_the_flags(config_path: Path) -> None:
    line = one_line_error(run_cli("config", "init", "dev", "--user-id", "admin"))
    assert "--service-client-id" in line
    assert "--client-id" in line
    assert "--user-id" not in line
    assert not config_path.exists()


def test_init_certificate_method_requires_certificate_and_key() -> None:
    result = run_cli("config", "init", "dev", *REQUIRED, "--auth-method", "certificate")
    line = one_line_error(result)
    assert "--certificate" in line
    assert "--private-key" in line


def test_init_bad_choice_exit_2_lists_choices() -> None:
    line = one_line_error(run_cli("config", "init", "dev", *REQUIRED, "--environment", "Test"))
    assert "Sandbox, Production" in line


def test_init_invalid_name_exit_2() -> None:
    assert "invalid profile name" in one_line_error(run_cli("config", "init", "a b", *REQUIRED))


def test_init_json_prints_the_result(config_path: Path) -> None:
    result = run_cli("-o", "json", "config", "init", "dev", *REQUIRED)
    assert result.json == {"name": "dev", "path": str(config_path), "default": True}


def test_init_on_tty_prompts_for_missing_values_never_for_secret(config_path: Path) -> None:
    code, transcript = run_tty(
        ["config", "init", "--user-id", "admin"],
        [
            ("Profile name", "tty"),
            ("auth_url", ""),
            ("api_url", "https://api.example/v1"),
            ("service_client_id: ", ""),
            ("service_client_id: ", "TTY_CORP"),
            ("client_id: ", "c" * 48),
        ],
    )
    assert code == 0, transcript
    assert "service_client_id is required" in transcript
    assert "secret" not in transcript.split("written to")[0].lower()
    profile = read_toml(config_path)["profiles"]["tty"]
    assert profile == {
        "auth_url": "http://127.0.0.1:8750",
        "api_url": "https://api.example/v1",
        "service_client_id": "TTY_CORP",
        "user_id": "admin",
        "client_id": "c" * 48,
    }


# -- list, show ------------------------------------------------------------------------------------


def test_list_table_marks_default_and_json_is_an_array() -> None:
    init("dev", "--api-url", "https://dev/api")
    init("prod")

    table = run_cli("config", "list")
    rows = run_cli("-o", "json", "config", "list").json

    assert table.exit_code == 0
    dev_line = next(line for line in table.stdout.splitlines() if line.startswith("dev\t"))
    assert "*" in dev_line
    assert "https://dev/api" in dev_line
    assert rows == [
        {
            "name": "dev",
            "default": True,
            "api_url": "https://dev/api",
            "service_client_id": "DEMO_CORP",
        },
        {
            "name": "prod",
            "default": False,
            "api_url": "http://127.0.0.1:8750/api/v1",
            "service_client_id": "DEMO_CORP",
        },
    ]


def test_list_no_profiles_says_how_to_create_one() -> None:
    result = run_cli("config", "list")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "config init" in result.stderr
    assert run_cli("-o", "json", "config", "list").json == []


def test_show_reports_value_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    init("dev")
    monkeypatch.setenv("PREFCTL_API_URL", "https://env/api")

    data = run_cli("-o", "json", "config", "show").json
    table = run_cli("config", "show").stdout

    assert data["api_url"] == "https://env/api"
    assert data["sources"]["api_url"] == "env"
    assert data["sources"]["user_id"] == "file"
    assert data["sources"]["auth_url"] == "default"
    assert data["default"] is True
    api_line = next(line for line in table.splitlines() if line.strip().startswith("api_url"))
    assert "https://env/api" in api_line
    assert api_line.rstrip().endswith("env")


def test_show_selects_name_then_flag_then_env_then_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    init("dev")
    init("prod")
    init("stage")
    monkeypatch.setenv("PREFCTL_PROFILE", "prod")

    def shown(*args: str) -> str:
        return run_cli(*args, "-o", "json", "config", "show").json["name"]

    assert shown() == "prod"
    assert shown("--profile", "stage") == "stage"
    assert run_cli("-p", "stage", "-o", "json", "config", "show", "dev").json["name"] == "dev"
    monkeypatch.delenv("PREFCTL_PROFILE")
    assert shown() == "dev"


def test_show_unknown_profile_exit_2_lists_known() -> None:
    init("dev")
    line = one_line_error(run_cli("config", "show", "nope"))
    assert "unknown profile 'nope'" in line
    assert "known profiles: dev" in line


@pytest.mark.parametrize("verbosity", [[], ["-vvv"]])
def test_show_masks_secrets_everywhere(
    verbosity: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    init("dev")
    assert run_cli("config", "set", "dev", "client_secret", "-", stdin=SECRET).exit_code == 0
    assert (
        run_cli("config", "set", "dev", "webhooks.hashkey", "-", stdin=SECRET + "hk").exit_code == 0
    )
    monkeypatch.setenv("PREFCTL_CLIENT_SECRET", SECRET + "env")

    results = [
        run_cli(*verbosity, "config", "show"),
        run_cli(*verbosity, "-o", "json", "config", "show"),
        run_cli(*verbosity, "config", "list"),
    ]

    for result in results:
        assert result.exit_code == 0, result.stderr
        assert SECRET not in result.output
    data = results[1].json
    assert data["client_secret"] == "***"
    assert data["webhooks"]["hashkey"] == "***"
    assert data["secrets"]["client_secret"] == {
        "found": True,
        "source": "$PREFCTL_CLIENT_SECRET",
        "error": None,
    }
    assert data["secrets"]["hashkey"]["source"] == "inline in the config file"


def test_show_missing_secret_reported_not_fatal() -> None:
    init("dev", "--client-secret-file", "missing.txt")
    result = run_cli("-o", "json", "config", "show")
    assert result.exit_code == 0
    status = result.json["secrets"]["client_secret"]
    assert status["found"] is False
    assert "missing.txt" in status["error"]
    assert "no such file" in status["error"]


# -- use, set, unset, remove -----------------------------------------------------------------------


def test_use_switches_default(config_path: Path) -> None:
    init("dev")
    init("prod")
    result = run_cli("config", "use", "prod")
    assert result.exit_code == 0
    assert read_toml(config_path)["default"] == "prod"
    assert "unknown profile 'nope'" in one_line_error(run_cli("config", "use", "nope"))


def test_set_writes_value_and_webhook_key(
    config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    init("dev")
    assert run_cli("config", "set", "dev", "api_url", "https://x/api").exit_code == 0
    assert run_cli("config", "set", "dev", "webhooks.hashkey_file", "hk.txt").exit_code == 0
    assert run_cli("config", "set", "dev", "signature_user_id", "signer").exit_code == 0
    profile = read_toml(config_path)["profiles"]["dev"]
    assert profile["api_url"] == "https://x/api"
    assert profile["webhooks"] == {
        "hashkey_file": str(Path.cwd() / "hk.txt"),
        "signature_user_id": "signer",
    }
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "key", ["client_secret_file", "certificate", "private_key", "ca_bundle", "hashkey_file"]
)
def test_set_relative_path_is_stored_absolute_from_the_current_folder(
    key: str, config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    init("dev")
    result = run_cli("-o", "json", "config", "set", "dev", key, "keys/file.pem")
    assert result.exit_code == 0, result.output
    expected = str(Path.cwd() / "keys" / "file.pem")
    assert result.json["value"] == expected
    shown = run_cli("-o", "json", "config", "show", "dev").json
    assert (shown["webhooks"] if key == "hashkey_file" else shown)[key] == expected


def test_set_home_and_absolute_paths_are_stored_as_given(config_path: Path) -> None:
    init("dev")
    assert run_cli("config", "set", "dev", "ca_bundle", "~/ca.pem").exit_code == 0
    assert run_cli("config", "set", "dev", "certificate", "/etc/c.pem").exit_code == 0
    profile = read_toml(config_path)["profiles"]["dev"]
    assert (profile["ca_bundle"], profile["certificate"]) == ("~/ca.pem", "/etc/c.pem")


def test_init_relative_secret_file_is_read_from_where_init_ran(
    emulator: RunningEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where_init_ran, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    where_init_ran.mkdir()
    elsewhere.mkdir()
    (where_init_ran / "secret.txt").write_text(emulator.account.client_secret + "\n")
    config = str(tmp_path / "configs" / "profiles.toml")
    account = emulator.account
    monkeypatch.chdir(where_init_ran)
    created = run_cli(
        "--config", config, "config", "init", "ci",
        "--auth-url", emulator.auth_url, "--api-url", emulator.api_url,
        "--service-client-id", account.service_client_id, "--user-id", account.user_id,
        "--client-id", account.client_id, "--client-secret-file", "./secret.txt",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    secret_file = str(Path.cwd() / "secret.txt")
    assert f"the client_secret will be read from {secret_file}" in created.stderr

    monkeypatch.chdir(elsewhere)
    token = run_cli("--config", config, "token", "get")
    assert token.exit_code == 0, token.output
    assert token.stdout.count(".") == 2  # a JWT, issued for the secret in project/secret.txt
    shown = run_cli("--config", config, "-o", "json", "config", "show").json
    assert shown["client_secret_file"] == secret_file
    assert shown["secrets"]["client_secret"]["source"] == secret_file


def test_set_unknown_key_exit_2_lists_keys() -> None:
    init("dev")
    line = one_line_error(run_cli("config", "set", "dev", "colour", "red"))
    assert "unknown key 'colour'" in line
    assert "webhooks.hashkey_env" in line


def test_set_bad_choice_exit_2(config_path: Path) -> None:
    init("dev")
    before = config_path.read_text()
    assert "must be one of" in one_line_error(run_cli("config", "set", "dev", "auth_method", "x"))
    assert config_path.read_text() == before


def test_set_unknown_profile_exit_2() -> None:
    assert "unknown profile" in one_line_error(run_cli("config", "set", "nope", "user_id", "x"))


@pytest.mark.parametrize("verbosity", [[], ["-vvv"]])
def test_set_secret_from_stdin_stored_masked_and_warned(
    verbosity: list[str], config_path: Path
) -> None:
    init("dev")
    result = run_cli(*verbosity, "config", "set", "dev", "client_secret", "-", stdin=SECRET + "\n")
    assert result.exit_code == 0
    assert SECRET not in result.output
    assert "warning:" in result.stderr
    assert "client_secret_env" in result.stderr
    assert read_toml(config_path)["profiles"]["dev"]["client_secret"] == SECRET
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600


def test_set_stdin_empty_exit_2() -> None:
    init("dev")
    assert "no value on stdin" in one_line_error(
        run_cli("config", "set", "dev", "client_secret", "-", stdin="")
    )


def test_set_value_missing_without_tty_exit_2() -> None:
    init("dev")
    assert "missing VALUE" in one_line_error(run_cli("config", "set", "dev", "user_id"))


def test_set_secret_on_tty_is_asked_without_echo(config_path: Path) -> None:
    init("dev")
    code, transcript = run_tty(
        ["config", "set", "dev", "hashkey"], [("webhooks.hashkey", SECRET)], hidden=True
    )
    assert code == 0, transcript
    assert SECRET not in transcript
    assert read_toml(config_path)["profiles"]["dev"]["webhooks"]["hashkey"] == SECRET


def test_set_secret_dash_typed_on_a_terminal_is_asked_without_echo(config_path: Path) -> None:
    # '-' keeps a piped secret out of the shell history; typed at a terminal, stdin would echo it.
    init("dev")
    code, transcript = run_tty(
        ["config", "set", "dev", "client_secret", "-"], [("client_secret", SECRET)], hidden=True
    )
    assert code == 0, transcript
    assert SECRET not in transcript
    assert read_toml(config_path)["profiles"]["dev"]["client_secret"] == SECRET


def test_unset_removes_key_so_default_applies(config_path: Path) -> None:
    init("dev", "--environment", "Production")
    assert run_cli("config", "unset", "dev", "environment").exit_code == 0
    assert "environment" not in read_toml(config_path)["profiles"]["dev"]
    again = run_cli("config", "unset", "dev", "environment")
    assert again.exit_code == 0
    assert "nothing changed" in again.stderr
    assert run_cli("-o", "json", "config", "show").json["environment"] == "Sandbox"


def test_remove_without_tty_needs_yes(config_path: Path) -> None:
    init("dev")
    line = one_line_error(run_cli("config", "remove", "dev"))
    assert "--yes" in line
    assert "dev" in read_toml(config_path)["profiles"]


def test_remove_yes_deletes_and_clears_default(config_path: Path) -> None:
    init("dev")
    init("prod")
    result = run_cli("config", "remove", "dev", "--yes")
    assert result.exit_code == 0
    assert "it was the default" in result.stderr
    data = read_toml(config_path)
    assert list(data["profiles"]) == ["prod"]
    assert "default" not in data


def test_remove_on_tty_asks_and_no_keeps_profile(config_path: Path) -> None:
    init("dev")
    code, transcript = run_tty(["config", "remove", "dev"], [("Remove profile 'dev'", "n")])
    assert code == 2, transcript
    assert "cancelled" in transcript
    assert "dev" in read_toml(config_path)["profiles"]


def test_ctrl_c_at_a_question_ends_the_line_before_saying_interrupted(
    config_path: Path,
) -> None:
    init("dev")
    result = run_in_terminal("config", "remove", "dev", answers=[("Remove profile 'dev'", "\x03")])
    assert result.exit_code == 130, result.output
    assert "\nerror: interrupted" in result.output.replace("\r\n", "\n")
    assert "dev" in read_toml(config_path)["profiles"]


# -- path, bad files -------------------------------------------------------------------------------


def test_path_env_then_flag(config_path: Path, tmp_path: Path) -> None:
    assert run_cli("config", "path").stdout == f"{config_path}\n"
    other = tmp_path / "other.toml"
    assert run_cli("--config", str(other), "config", "path").stdout == f"{other}\n"
    assert run_cli("-o", "json", "config", "path").json == {
        "path": str(config_path),
        "exists": False,
    }


def test_config_flag_selects_the_file_written(tmp_path: Path, config_path: Path) -> None:
    other = tmp_path / "elsewhere" / "p.toml"
    result = run_cli("--config", str(other), "config", "init", "dev", *REQUIRED)
    assert result.exit_code == 0
    assert "dev" in read_toml(other)["profiles"]
    assert not config_path.exists()


def test_path_works_with_malformed_file(config_path: Path) -> None:
    config_path.parent.mkdir(parents=True)
    config_path.write_text("[profiles\n")
    assert run_cli("config", "path").exit_code == 0


@pytest.mark.parametrize("command", [["list"], ["show"], ["use", "dev"], ["set", "dev", "a", "b"]])
def test_malformed_toml_one_line_error_naming_file(command: list[str], config_path: Path) -> None:
    config_path.parent.mkdir(parents=True)
    config_path.write_text("[profiles.dev\nuser_id = 'x'\n")
    line = one_line_error(run_cli("config", *command))
    assert f"{config_path} is not valid TOML" in line


def test_readable_file_with_inline_secret_warns_but_works(config_path: Path) -> None:
    init("dev")
    run_cli("config", "set", "dev", "client_secret", "-", stdin=SECRET)
    config_path.chmod(0o644)

    result = run_cli("config", "list")

    assert result.exit_code == 0
    assert "dev\t" in result.stdout
    assert "warning:" in result.stderr
    assert "chmod 600" in result.stderr
    assert SECRET not in result.output


def test_config_flag_folders_prefctl_creates_are_0700_whatever_the_umask(tmp_path: Path) -> None:
    before = stat.S_IMODE(tmp_path.stat().st_mode)
    other = tmp_path / "a" / "b" / "p.toml"
    previous = os.umask(0)
    try:
        result = run_cli("--config", str(other), "config", "init", "dev", *REQUIRED)
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    assert stat.S_IMODE(tmp_path.stat().st_mode) == before  # an existing folder is left alone


def test_config_flag_under_a_file_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = run_cli("--config", str(tmp_path / "file" / "p.toml"), "config", "init", "dev",
                     *REQUIRED)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(tmp_path / "file") in result.stderr


def test_concurrent_config_writes_each_keep_their_change() -> None:
    # Parallel CI jobs writing profiles.toml at once: every command that says "✓" keeps its
    # change (the file is read, changed and written under a lock, not last-writer-wins).
    import subprocess

    prefctl = Path(sys.executable).parent / "prefctl"
    config = Path(os.environ["PREFCTL_CONFIG"])
    init("base")
    common = ["--service-client-id", "A", "--user-id", "u"]
    inits = [
        [str(prefctl), "config", "init", f"team{i}", *common, "--client-id", f"c{i}"]
        for i in range(8)
    ]
    sets = [
        [str(prefctl), "config", "set", "base", key, value]
        for key, value in (
            ("environment", "Production"),
            ("client_id", "changed"),
            ("webhooks.signature_user_id", "signer"),
            ("webhooks.hashkey_env", "MY_HASHKEY"),
        )
    ]
    running = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for command in inits + sets
    ]
    for process in running:
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err

    data = tomllib.loads(config.read_text())
    assert set(data["profiles"]) == {"base", *(f"team{i}" for i in range(8))}
    base = data["profiles"]["base"]
    assert (base["environment"], base["client_id"]) == ("Production", "changed")
    assert base["webhooks"] == {"signature_user_id": "signer", "hashkey_env": "MY_HASHKEY"}
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
