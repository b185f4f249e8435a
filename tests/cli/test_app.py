"""The root command: global options, exit codes and the error boundary (one line, no traceback)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prefctl import __version__
from prefctl.cli.app import COMMANDS
from tests.helpers import CliResult, run_cli, run_process

ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*3[0-9]")


def init_profile(name: str = "dev") -> None:
    result = run_cli(
        "config", "init", name, "--service-client-id", "S", "--user-id", "u", "--client-id", "c"
    )
    assert result.exit_code == 0, result.stderr


def assert_one_line_error(result: CliResult, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_version_prints_name_and_version() -> None:
    result = run_cli("--version")
    assert (result.exit_code, result.stdout, result.stderr) == (0, f"prefctl {__version__}\n", "")


def test_version_through_the_entry_point_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "prefctl", "--version"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"prefctl {__version__}\n", "")


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_short_and_long_flag_print_usage(flag: str) -> None:
    for args in (["config", flag], ["config", "init", flag]):
        result = run_cli(*args)
        assert result.exit_code == 0
        assert f"Usage: prefctl {' '.join(args[:-1])}" in result.stdout


def test_root_help_lists_every_command() -> None:
    result = run_cli("-h")
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.stdout


def test_group_without_command_shows_its_help_exit_2() -> None:
    result = run_cli("config")
    assert result.exit_code == 2
    assert "Usage: prefctl config" in result.output
    assert "init" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuch"], "No such command 'nosuch'"),
        (["config", "nosuch"], "No such command 'nosuch'"),
        (["config", "list", "--bogus"], "No such option: --bogus"),
        (["--bogus", "config", "list"], "No such option: --bogus"),
        (["config", "use"], "Missing argument 'NAME'"),
        (["-o", "xml", "config", "list"], "'xml' is not one of"),
        (["config", "use", "a", "b"], "unexpected extra argument"),
    ],
)
def test_usage_error_one_line_exit_2_with_help_pointer(args: list[str], message: str) -> None:
    line = assert_one_line_error(run_cli(*args))
    assert message in line
    assert "--help" in line


def test_config_error_one_line_exit_2() -> None:
    assert "unknown profile" in assert_one_line_error(run_cli("config", "show", "nope"))


def test_unexpected_error_one_line_exit_1_traceback_only_with_vv() -> None:
    # A path with a NUL byte makes the OS call raise ValueError: an error prefctl does not expect.
    args = ["--config", "bad\x00path", "config", "list"]
    line = assert_one_line_error(run_cli(*args), code=1)
    assert "internal error" in line
    assert "-vv" in line
    verbose = run_cli("-vv", *args)
    assert verbose.exit_code == 1
    assert "Traceback" in verbose.stderr


def test_output_json_flag_and_env_give_json_on_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    init_profile()
    assert run_cli("-o", "json", "config", "list").json[0]["name"] == "dev"
    assert run_cli("--output", "json", "config", "list").json[0]["name"] == "dev"
    monkeypatch.setenv("PREFCTL_OUTPUT", "json")
    assert run_cli("config", "list").json[0]["name"] == "dev"
    assert run_cli("-o", "table", "config", "list").stdout.startswith("NAME\tDEFAULT\t")


def test_colour_forced_unless_no_color_env_or_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR")
    assert ANSI_COLOUR.search(run_cli("config", "show", "nope").stderr)
    assert not ANSI_COLOUR.search(run_cli("--no-color", "config", "show", "nope").stderr)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not ANSI_COLOUR.search(run_cli("config", "show", "nope").stderr)


def test_quiet_keeps_data_drops_messages() -> None:
    init_profile("dev")
    init_profile("prod")
    result = run_cli("-q", "config", "use", "prod")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    assert run_cli("-q", "config", "path").stdout.strip().endswith("profiles.toml")


def test_verbose_keeps_stdout_data_only() -> None:
    init_profile()
    result = run_cli("-vvv", "-o", "json", "config", "list")
    assert result.exit_code == 0
    assert result.json[0]["name"] == "dev"


def test_global_options_after_the_command_work_like_before_it() -> None:
    before = run_cli("-o", "json", "config", "list")
    after = run_cli("config", "list", "-o", "json")
    assert after.exit_code == before.exit_code == 0
    assert after.json == before.json


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("full", "error: cannot write the output: no space left on device"),
        ("closed", "error: cannot write the output: stdout is closed"),
    ],
)
@pytest.mark.parametrize(
    "args", [["policy", "explain"], ["-o", "json", "policy", "explain"], ["--version"]]
)
def test_output_that_cannot_be_written_is_one_line_exit_1(
    args: list[str], stdout: str, message: str
) -> None:
    done = run_process(stdout, *args)
    assert (done.returncode, done.stderr) == (1, message + "\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["--help"], ["deadletters", "--help"]])
def test_help_that_cannot_be_written_is_one_line_exit_1(args: list[str]) -> None:
    done = run_process("full", *args)
    expected = "error: cannot write the output: no space left on device\n"
    assert (done.returncode, done.stderr) == (1, expected)


def test_output_to_a_pipe_closed_by_its_reader_ends_quietly_exit_1() -> None:
    done = run_process("broken-pipe", "policy", "explain")
    assert (done.returncode, done.stderr) == (1, "")


@pytest.mark.parametrize("args", [(), ("emulator",), ("-o", "json", "certs")])
def test_a_command_group_called_bare_shows_its_help_on_stderr_and_exits_2(
    args: tuple[str, ...],
) -> None:
    result = run_cli(*args)
    assert result.exit_code == 2
    assert result.stdout == ""  # stdout carries data only, even for a usage error
    assert "Usage: prefctl" in result.stderr


def test_output_format_is_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    init_profile()
    assert run_cli("-o", "JSON", "config", "list").json[0]["name"] == "dev"
    monkeypatch.setenv("PREFCTL_OUTPUT", "Json")
    assert run_cli("config", "list").json[0]["name"] == "dev"
    assert run_cli("-o", "yaml", "config", "list").exit_code == 2


@pytest.mark.parametrize(
    "args",
    [
        ["config", "list", "-ojson"],
        ["config", "list", "--output=json"],
        ["config", "list", "--output", "json"],
        ["-ojson", "config", "list"],
        ["config", "-o", "json", "list"],
        ["config", "list", "-pdev", "-ojson"],
        ["config", "list", "--profile=dev", "-q", "-ojson"],
    ],
)
def test_global_options_in_every_spelling_anywhere_give_json(args: list[str]) -> None:
    init_profile()
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    assert result.json[0]["name"] == "dev"


def test_help_shows_flags_without_value_placeholders_and_whole_sentences(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    help_text = run_cli("--help").stdout
    assert "<bool>" not in help_text
    assert "<int>" not in help_text
    assert "<str>" not in help_text
    assert re.search(r"--quiet\s+-q\s+Only data and errors", help_text)
    assert "an embedded emulator of the preference" in help_text  # not broken after "embedded"
    redrive = run_cli("deadletters", "redrive", "--help").stdout
    assert "<bool>" not in redrive
    assert "--yes" in redrive


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-o", "yaml", "config", "list"], "'yaml' is not one of table, json, wide"),
        (["deadletters", "list", "--reason", "badrequest"], "did you mean 'BadRequest'?"),
        (["deliveries", "show", "abc"], "'ID': expected a whole number"),
        (["deliveries", "list", "--limit", "0"], "'--limit': must be 1 or more"),
    ],
)
def test_usage_errors_say_what_is_accepted_in_the_users_words(args: list[str], words: str) -> None:
    line = assert_one_line_error(run_cli(*args))
    assert words in line
    assert "Value error" not in line
    assert "Input should" not in line
    assert "parse string" not in line


def test_no_color_removes_every_style_bold_included(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # stdout counts as a terminal, where styles show
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in run_cli("--help").stdout
    assert "\x1b[" not in run_cli("events", "types").stdout  # no bold header
    monkeypatch.delenv("NO_COLOR")
    assert "\x1b[1m" in run_cli("events", "types").stdout


def test_a_word_from_other_tools_points_at_prefctls_command() -> None:
    line = assert_one_line_error(run_cli("profiles", "list"))
    assert "did you mean 'prefctl profiles search'?" in line


def test_root_help_ends_with_two_examples_and_points_to_the_demo() -> None:
    text = run_cli("--help").stdout
    tail = text[text.index("Examples:") :]
    assert "prefctl emulator start --detach" in tail
    assert "prefctl -o json profiles get 1001" in tail
    assert "'prefctl demo'" in tail
    assert text.rstrip().endswith("to set up.")


def test_subscriptions_help_shows_an_example_of_create() -> None:
    text = run_cli("subscriptions", "--help").stdout
    assert "Examples:" in text
    assert "prefctl subscriptions create --name crm -e profile.created" in text


def test_subscriptions_ls_says_did_you_mean_once() -> None:
    line = assert_one_line_error(run_cli("subscriptions", "ls"))
    assert line == "error: No such command 'ls' — did you mean 'prefctl subscriptions list'?"
    assert line.lower().count("did you mean") == 1


def test_a_typo_of_a_command_says_did_you_mean_once() -> None:
    line = assert_one_line_error(run_cli("subscriptions", "lsit"))
    assert "Did you mean 'list'?" in line
    assert line.lower().count("did you mean") == 1


def test_a_config_file_that_does_not_exist_is_named_as_such(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    line = assert_one_line_error(run_cli("--config", str(missing), "settings", "get"))
    assert f"the configuration file {missing} does not exist" in line


def test_httpx_cli_stand_in_spares_each_command_httpx_s_own_cli_and_is_guarded() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from prefctl.__main__ import _without_httpx_cli\n"
        "_without_httpx_cli()\n"
        "import httpx\n"
        "print(sys.modules['httpx._main'].__doc__)\n"
        "print('pygments' in sys.modules)\n"
        "_without_httpx_cli()  # httpx already imported: nothing is done\n"
        "print(sys.modules['httpx._main'].__doc__)\n"
    )
    printed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert printed == [
        "stand-in for httpx's command-line client",
        "False",
        "stand-in for httpx's command-line client",
    ]
