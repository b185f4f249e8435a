"""The root command: global options, lazy registration of command groups, the error boundary.

Each command module exposes ``register(root: typer.Typer)``. Only the module of the command being
run is imported (``prefctl token get`` imports ``prefctl.cli.token`` and nothing else), which keeps
start-up fast; ``--help`` and unknown commands import them all.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
from enum import StrEnum
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from prefctl import __version__
from prefctl.cli._context import State, get_state, set_state
from prefctl.cli._output import Output
from prefctl.config import ENV_CONFIG, ENV_OUTPUT, ENV_PROFILE
from prefctl.errors import EXIT_FAILED, EXIT_USAGE, PrefctlError

# Command name → module. The order is the order of `prefctl --help`.
COMMANDS: dict[str, str] = {
    "config": "prefctl.cli.config",
    "token": "prefctl.cli.token",
    "profiles": "prefctl.cli.profiles",
    "programs": "prefctl.cli.programs",
    "subscriptions": "prefctl.cli.subscriptions",
    "settings": "prefctl.cli.settings",
    "emulator": "prefctl.cli.emulator",
    "certs": "prefctl.cli.certs",
    "events": "prefctl.cli.events",
    "receive": "prefctl.cli.receive",
    "endpoint": "prefctl.cli.endpoint",
    "deliveries": "prefctl.cli.deliveries",
    "deadletters": "prefctl.cli.deadletters",
    "replay": "prefctl.cli.replay",
    "alerts": "prefctl.cli.alerts",
    "policy": "prefctl.cli.policy",
    "simulate": "prefctl.cli.simulate",
    "dispatcher": "prefctl.cli.dispatcher",
    "demo": "prefctl.cli.demo",
}

# Global options that take a value, so the command word can be found without parsing.
_VALUE_OPTIONS = {"--profile", "-p", "--config", "--output", "-o"}
_FLAG_OPTIONS = {"--verbose", "--quiet", "-q", "--no-color"}

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # 128 + SIGTERM


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


def _version(value: bool) -> None:
    if value:
        get_state().out.line(f"prefctl {__version__}")
        raise typer.Exit()


def root_callback(
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", "-p", help=f"Profile to use (env: {ENV_PROFILE}).", show_default=False
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config", help=f"Path of profiles.toml (env: {ENV_CONFIG}).", show_default=False
        ),
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option(
            "--output",
            "-o",
            envvar=ENV_OUTPUT,
            case_sensitive=False,  # PREFCTL_OUTPUT=JSON in a CI file is no reason to fail
            help="Output format: table or json.",
        ),
    ] = OutputFormat.table,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="More logs on stderr (repeat: -vvv).")
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only data and errors.")] = False,
    no_color: Annotated[
        bool, typer.Option("--no-color", help="No colours (also NO_COLOR).")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """prefctl: tokens, administration, a local webhook receiver and an embedded emulator of the
    preference & consent management service."""
    no_color = no_color or bool(os.environ.get("NO_COLOR"))
    json_mode = output is OutputFormat.json
    state = State(
        profile_name=profile,
        config_flag=config,
        output_format=output.value,
        verbosity=verbose,
        quiet=quiet,
        no_color=no_color,
        out=Output(json_mode=json_mode, quiet=quiet, no_color=no_color, verbosity=verbose),
    )
    set_state(state)
    if verbose:
        from prefctl import logs
        from prefctl.cli._output import CurrentStderr

        logs.configure(verbose, stream=CurrentStderr())


class _Group(TyperGroup):
    """A group called bare shows its help on stderr and exits 2 (a usage error), so that stdout
    stays data only, empty with ``-o json``. (click raises NoArgsIsHelpError after Typer's Rich
    help has already written itself to stdout.)"""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            with contextlib.redirect_stdout(sys.stderr):
                text = ctx.get_help()  # Rich help prints itself (to stderr, here)
            if text:
                typer.echo(text, err=True)
            ctx.exit(EXIT_USAGE)
        return super().parse_args(ctx, args)


def new_group(name: str, help: str) -> typer.Typer:
    """A command group with prefctl's conventions (``-h``, help when called bare)."""
    return typer.Typer(
        name=name,
        help=help,
        cls=_Group,
        no_args_is_help=True,
        context_settings=CONTEXT_SETTINGS,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
    )


def command_word(argv: list[str]) -> str | None:
    """The first word that is not a global option: the command to run."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in _VALUE_OPTIONS:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        return arg
    return None


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move global options written after the command to the front, so that
    ``prefctl profiles get 1001 -o json`` works like ``prefctl -o json profiles get 1001``.
    These option names are reserved: no command defines its own ``-o``, ``-p``, ``-v`` or ``-q``.
    """
    if command_word(argv) is None:
        return argv
    head: list[str] = []
    rest: list[str] = []
    seen_command = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        if not seen_command:
            if arg in _VALUE_OPTIONS:
                head.extend(argv[i : i + 2])
                i += 2
                continue
            head.append(arg)
            seen_command = not arg.startswith("-")
            if seen_command:
                head.pop()
                rest.append(arg)
            i += 1
            continue
        name = arg.split("=", 1)[0]
        if arg in _VALUE_OPTIONS and i + 1 < len(argv):
            head.extend(argv[i : i + 2])
            i += 2
            continue
        inline_value = name in _VALUE_OPTIONS and "=" in arg and name.startswith("--")
        verbosity = arg.startswith("-v") and set(arg[1:]) == {"v"}
        (head if inline_value or verbosity or arg in _FLAG_OPTIONS else rest).append(arg)
        i += 1
    return head + rest


def build_app(argv: list[str]) -> typer.Typer:
    root = typer.Typer(
        name="prefctl",
        cls=_Group,
        no_args_is_help=True,
        context_settings=CONTEXT_SETTINGS,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
        add_completion=False,
    )
    root.callback()(root_callback)
    word = command_word(argv)
    names = [word] if word in COMMANDS else list(COMMANDS)
    for name in names:
        importlib.import_module(COMMANDS[name]).register(root)
    return root


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program was, like Ctrl-C: ``finally`` blocks and context managers
    run (a replay's temporary store is removed, child processes are stopped)."""


_sigterm = threading.Event()  # set once SIGTERM arrived: layers above may re-wrap the exception


def _on_sigterm(signum: int, frame: object) -> None:
    _sigterm.set()
    raise _Terminated


def run(argv: list[str] | None = None) -> int:
    """Run prefctl with ``argv`` and return the exit code; never raises for expected errors.

    SIGTERM is handled like Ctrl-C (clean-up runs), exit 143; servers handle it themselves (a
    normal stop)."""
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if on_main_thread else None
    _sigterm.clear()
    try:
        code = _run(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if _sigterm.is_set() and code == EXIT_INTERRUPTED:
        return EXIT_TERMINATED
    return code


def _run(argv: list[str] | None) -> int:
    argv = hoist_global_options(list(sys.argv[1:] if argv is None else argv))
    set_state(State())
    try:
        command = typer.main.get_command(build_app(argv))
        result = command.main(args=argv, prog_name="prefctl", standalone_mode=False)
    except PrefctlError as exc:
        get_state().out.error(exc.message, exc.hint)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt) as exc:
        if _sigterm.is_set():
            get_state().out.error("terminated")
        else:
            get_state().out.error(
                "interrupted" if isinstance(exc, KeyboardInterrupt) else "aborted"
            )
        return EXIT_INTERRUPTED
    except Exception as exc:  # the click exception tree is vendored by typer: match by shape
        return _render_unexpected(exc, help_asked="--help" in argv or "-h" in argv)
    if result == EXIT_INTERRUPTED:  # typer turns Ctrl-C into a silent Exit(130)
        get_state().out.error("terminated" if _sigterm.is_set() else "interrupted")
    return result if isinstance(result, int) else 0


def _render_unexpected(exc: Exception, *, help_asked: bool = False) -> int:
    out = get_state().out
    if type(exc).__name__ == "NoArgsIsHelpError":
        out.err.print(exc.format_message(), markup=False, highlight=False)  # type: ignore[attr-defined]
        return EXIT_USAGE
    if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
        ctx = getattr(exc, "ctx", None)
        where = f"'{ctx.command_path} --help'" if ctx is not None else "'prefctl --help'"
        out.error(exc.format_message(), f"see {where}")
        return int(exc.exit_code)
    import sqlite3

    from prefctl.store.db import BUSY_TIMEOUT_MS, DAMAGED_HINT, is_busy, is_damaged, is_disk_full

    if is_damaged(exc):
        # A store damaged on disk (a failing disk, a copy taken mid-write): not a bug of prefctl.
        out.error(f"the store is damaged: {exc}", DAMAGED_HINT)
        return EXIT_USAGE
    if isinstance(exc, sqlite3.Error) and is_disk_full(exc):  # outside a store transaction
        out.error(f"the disk is full: {exc}", "free some space on it and try again")
        return EXIT_USAGE

    if is_busy(exc):  # another process held the store's write lock for the whole busy timeout
        out.error(
            f"the store is busy: another prefctl command kept it locked for over"
            f" {BUSY_TIMEOUT_MS / 1000:g} s",
            "try again when it has finished",
        )
        return EXIT_FAILED
    if isinstance(exc, OSError) and exc.errno == 32:  # broken pipe: the reader went away
        return EXIT_FAILED
    if isinstance(exc, OSError) and help_asked:  # only help was written: to a full disk, say
        out.error(f"cannot write the output: {exc}")
        return EXIT_FAILED
    from prefctl import logs

    out.error(
        logs.redact(f"internal error: {type(exc).__name__}: {exc}"),
        "this is a bug in prefctl; run again with -vv for the traceback",
    )
    if get_state().verbosity >= 2:
        import traceback

        out.err.print(logs.redact("".join(traceback.format_exception(exc))), markup=False)
    return EXIT_FAILED
