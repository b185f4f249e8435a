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
from prefctl.cli import _coercion, _complete
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
    "service": "prefctl.cli.service",
    "deliveries": "prefctl.cli.deliveries",
    "deadletters": "prefctl.cli.deadletters",
    "replay": "prefctl.cli.replay",
    "alerts": "prefctl.cli.alerts",
    "policy": "prefctl.cli.policy",
    "simulate": "prefctl.cli.simulate",
    "dispatcher": "prefctl.cli.dispatcher",
    "api": "prefctl.cli.api",
    "demo": "prefctl.cli.demo",
}

# What `prefctl --help` says of each command: the first paragraph of its own help (a test keeps
# them equal). The root's help lists these without importing any command module, which keeps
# `prefctl --help` quick: building every command costs more than all the rest of start-up.
SUMMARIES: dict[str, str] = {
    "config": "Create, show and edit connection profiles (profiles.toml).",
    "token": "Get, inspect and clear OAuth access tokens.",
    "profiles": "Create, read, search, change and import customer profiles.",
    "programs": "Programs of the account: what preferences can be set for.",
    "subscriptions": "Webhook subscriptions: which event types go to which URL.",
    "settings": "The account's webhook delivery and alert settings.",
    "emulator": "Run the local emulator of the service and administer it.",
    "certs": "Development CA, server and client certificates for TLS and mTLS.",
    "events": "The event catalog and history, real changes that trigger events, and tools to"
    " sign and verify Service-Webhook headers.",
    "receive": "Receive webhooks locally: answer handshakes, verify signatures, show every"
    " request.",
    "endpoint": "Check a webhook endpoint against the service's contract.",
    "service": "Check the deployment a profile points at against the spec and the emulator.",
    "deliveries": "Delivery state of each event and subscription, and the attempt timeline.",
    "deadletters": "The dead-letter queue: list, show, redrive, export and purge, filtered by"
    " reason, status, subscription and time.",
    "replay": "Re-deliver stored, dead-lettered or captured events, with their original EventIds.",
    "alerts": "Failure-alert emails sent for dead-lettered events.",
    "policy": "The delivery policy: retries, dead letters and what each answer causes.",
    "simulate": "Run a scenario on a virtual clock with the real dispatcher, and report what"
    " happened.",
    "dispatcher": "The webhook dispatcher: deliver a store's queue, set its TLS.",
    "api": "Send an authenticated request to the profile's deployment and print the JSON answer.",
    "demo": "Run the whole loop on a throwaway emulator and receiver, in seconds.",
}

# Global options that take a value, so the command word can be found without parsing.
_VALUE_OPTIONS = {"--profile", "-p", "--config", "--output", "-o"}
_FLAG_OPTIONS = {"--verbose", "--quiet", "-q", "--no-color", "--wide"}

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # 128 + SIGTERM


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    wide = "wide"  # a table with every column, whatever the terminal's width


def _version(value: bool) -> None:
    if value:
        get_state().out.line(f"prefctl {__version__}")
        raise typer.Exit()


def root_callback(
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            "-p",
            metavar="NAME",
            help=f"Profile to use (env: {ENV_PROFILE}).",
            autocompletion=_complete.profile_names,
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help=f"Path of profiles.toml (env: {ENV_CONFIG}).",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option(
            "--output",
            "-o",
            envvar=ENV_OUTPUT,
            case_sensitive=False,  # PREFCTL_OUTPUT=JSON in a CI file is no reason to fail
            help="Output format: table, json, or wide (a table with every column).",
        ),
    ] = OutputFormat.table,
    wide: Annotated[
        bool, typer.Option("--wide", help="Tables show every column, whatever the width.")
    ] = False,
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
        output_format="table" if output is OutputFormat.wide else output.value,
        verbosity=verbose,
        quiet=quiet,
        no_color=no_color,
        out=Output(
            json_mode=json_mode,
            quiet=quiet,
            no_color=no_color,
            verbosity=verbose,
            wide=wide or output is OutputFormat.wide,
        ),
    )
    set_state(state)
    if verbose:
        from prefctl import logs
        from prefctl.cli._output import CurrentStderr

        logs.configure(verbose, stream=CurrentStderr())
        from prefctl.cli._httpx_stand_in import log_decision

        log_decision()


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


def examples(*pairs: tuple[str, str], then: str = "") -> str:
    """The ``--help`` epilog "Examples:": each command line, with what it does under it (an
    indented line: commands stay whole at 80 columns); ``then``, a last paragraph."""
    lines = ["", "Examples:"]  # a first line of its own: typer dedents the lines after it
    for command, what in pairs:
        lines += [f"  {command}", f"      {what}"]
    return "\n".join(lines) + (f"\n\n{then}" if then else "")


ROOT_EPILOG = examples(
    ("prefctl emulator start --detach", "run the service locally; it writes profile 'local'"),
    ("prefctl -o json profiles get 1001", "read a customer profile, as JSON"),
    then="New here? 'prefctl demo' runs the whole webhook loop in seconds, with nothing to set up.",
)


def new_group(name: str, help: str, *, epilog: str | None = None) -> typer.Typer:
    """A command group with prefctl's conventions (``-h``, help when called bare); ``epilog``
    ends its ``--help`` (``examples``)."""
    return typer.Typer(
        name=name,
        help=help,
        epilog=epilog,
        cls=_Group,
        no_args_is_help=True,
        context_settings=CONTEXT_SETTINGS,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
    )


def _global_option(argv: list[str], i: int) -> int:
    """How many words of ``argv`` from ``i`` are a global option (0: none), in any spelling:
    ``-o json``, ``-ojson``, ``--output json``, ``--output=json``, ``-vv``, ``--wide``."""
    arg = argv[i]
    if arg in _VALUE_OPTIONS:
        return 2 if i + 1 < len(argv) else 1
    if arg in _FLAG_OPTIONS or (len(arg) > 1 and arg[0] == "-" and set(arg[1:]) == {"v"}):
        return 1
    if arg.startswith("--") and arg.split("=", 1)[0] in _VALUE_OPTIONS and "=" in arg:
        return 1
    if len(arg) > 2 and arg[:2] in _VALUE_OPTIONS:  # -ojson, -pNAME
        return 1
    return 0


def command_word(argv: list[str]) -> str | None:
    """The first word that is not a global option: the command to run."""
    i = 0
    while i < len(argv):
        taken = _global_option(argv, i)
        if taken:
            i += taken
            continue
        if not argv[i].startswith("-"):
            return argv[i]
        i += 1
    return None


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move global options written after the command to the front, so that
    ``prefctl profiles get 1001 -ojson`` works like ``prefctl -o json profiles get 1001``.
    These option names are reserved: no command defines its own ``-o``, ``-p``, ``-v`` or ``-q``.
    """
    if command_word(argv) is None:
        return argv
    head: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--":
            rest.extend(argv[i:])
            break
        taken = _global_option(argv, i)
        if taken:
            head.extend(argv[i : i + taken])
            i += taken
            continue
        rest.append(argv[i])
        i += 1
    return head + rest


def build_app(argv: list[str], *, full: bool = False) -> typer.Typer:
    """The app for ``argv``: the command it runs registered, nothing else. With no command (the
    root's help, an unknown word), each command is a stand-in with its summary, unless ``full``
    (the reference generator). A shell asking for completions gets the same: the command of the
    words typed so far, or stand-ins while the command's own word is being typed, so that a TAB
    costs one command group, never all of them (the emulator's brings FastAPI)."""
    root = typer.Typer(
        name="prefctl",
        epilog=ROOT_EPILOG,
        cls=_Group,
        no_args_is_help=True,
        context_settings=CONTEXT_SETTINGS,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
    )
    root.callback()(root_callback)
    completing = _complete.COMPLETE_VAR in os.environ
    word = command_word(_complete.typed_words() if completing else argv)
    if word in COMMANDS:
        importlib.import_module(COMMANDS[word]).register(root)
    elif full:
        for name in COMMANDS:
            importlib.import_module(COMMANDS[name]).register(root)
    else:
        for name in COMMANDS:
            root.command(name, help=SUMMARIES[name], add_help_option=False)(_stand_in)
    return root


def _stand_in() -> None:
    """Never runs: a command's stand-in in the root's help, replaced when the command is run."""


_METAVARS = {
    "<str>": "TEXT",
    "<int>": "N",
    "<float>": "NUMBER",
    "<path>": "PATH",
    "<dir>": "DIR",
    "<file>": "FILE",
}
_SENTENCE_END = (".", ":", "!", "?", ";")


def tidy_help(command: Any) -> Any:
    """Help as people read it, for ``command`` and every command below it: flags without a
    value placeholder (``--quiet`` rather than ``--quiet <bool>``), values named in words
    (``TEXT``, not ``<str>``), and a sentence wrapped in the source read as one line (Rich's
    help keeps each line break of a docstring: lines end only where a sentence or item does)."""
    from types import SimpleNamespace

    # The help option, made on first use and kept by the command: made now, to be tidied too.
    names = SimpleNamespace(help_option_names=CONTEXT_SETTINGS["help_option_names"])
    help_option = command.get_help_option(names)
    for param in [*command.params, *([help_option] if help_option else [])]:
        # typer's own copy of click: an option is known by its shape, not by its class
        if getattr(param, "param_type_name", "") != "option" or param.metavar is not None:
            continue
        if param.is_flag or param.count:
            param.metavar = ""
        elif hasattr(param, "display_type"):
            param.metavar = _METAVARS.get(param.display_type(None))
    if command.help:
        command.help = join_wrapped_lines(command.help)
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)
    return command


def join_wrapped_lines(text: str) -> str:
    """``text`` with each line that continues a sentence joined to the one before it; blank
    lines, list items and indented lines keep their breaks."""
    import inspect

    lines = inspect.cleandoc(text).split("\n")
    joined: list[str] = []
    for line in lines:
        stripped = line.strip()
        previous = joined[-1] if joined else ""
        continues = (
            previous.strip()
            and stripped
            and not previous.rstrip().endswith(_SENTENCE_END)
            and not line.startswith((" ", "-", "*", "\b"))
            and not previous.startswith(("\b", " "))
        )
        if continues:
            joined[-1] = f"{previous.rstrip()} {stripped}"
        else:
            joined.append(line)
    return "\n".join(joined)


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
    completing = _complete.COMPLETE_VAR in os.environ  # a TAB: no help is written
    if not completing and (not argv or "--help" in argv or "-h" in argv):
        from typer import rich_utils

        # Typer's switch: None is help without any styling, bold included. Guarded; without it,
        # Rich's public NO_COLOR leaves bold.
        plain = "--no-color" in argv or bool(os.environ.get("NO_COLOR"))
        if _coercion.color_switch_problem(rich_utils) is None:
            rich_utils.COLOR_SYSTEM = None if plain else "auto"
        elif plain:
            os.environ["NO_COLOR"] = "1"
    try:
        command = typer.main.get_command(build_app(argv))
        if _coercion.help_internals_problem() is None:
            command = tidy_help(command)
        _coercion.install(command, CONTEXT_SETTINGS["help_option_names"])
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


_VALIDATOR_WORDS = [  # how the parameter validator says it → how prefctl says it
    (r"Input should be a valid integer[^.;—]*", "expected a whole number"),
    (r"Input should be a valid number[^.;—]*", "expected a number"),
    (r"Input should be a valid boolean[^.;—]*", "expected true or false"),
    (r"Input should be greater than or equal to (\S+)", r"must be \1 or more"),
    (r"Input should be less than or equal to (\S+)", r"must be \1 or less"),
    (r"Input should be greater than (\S+)", r"must be more than \1"),
    (r"Input should be less than (\S+)", r"must be less than \1"),
    (r"Input should be ", "should be "),
    (r"Value error, ", ""),
]


# Words people try from other tools → prefctl's command for it.
_SYNONYMS: dict[str, dict[str, str]] = {
    "prefctl profiles": {"list": "search", "ls": "search", "find": "search"},
    "prefctl subscriptions": {"ls": "list", "add": "create", "remove": "delete", "rm": "delete"},
}


def _synonym_hint(message: str, group: str) -> str | None:
    """ "did you mean 'prefctl profiles search'?" for "No such command 'list'" in profiles."""
    import re

    unknown = re.match(r"No such command '([^']*)'", message)
    if unknown is None:
        return None
    command = _SYNONYMS.get(group, {}).get(unknown.group(1))
    return None if command is None else f"did you mean '{group} {command}'?"


def in_user_words(message: str) -> str:
    """A usage error of the option parser, without the validator's phrasing, and with "did you
    mean" when a choice was given in another case or with a typo."""
    import re

    choice = re.search(r"'([^']*)' is not one of ((?:'[^']*'(?:, )?)+)\.?", message)
    if choice:
        from prefctl.errors import did_you_mean

        given, choices = choice.group(1), re.findall(r"'([^']*)'", choice.group(2))
        text = f"{given!r} is not one of {', '.join(choices)}{did_you_mean(given, choices)}"
        message = message[: choice.start()] + text + message[choice.end() :]
    for pattern, words in _VALIDATOR_WORDS:
        message = re.sub(pattern, words, message)
    return message


def _render_unexpected(exc: Exception, *, help_asked: bool = False) -> int:
    out = get_state().out
    if type(exc).__name__ == "NoArgsIsHelpError":
        out.err.print(exc.format_message(), markup=False, highlight=False)  # type: ignore[attr-defined]
        return EXIT_USAGE
    if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
        ctx = getattr(exc, "ctx", None)
        where = f"'{ctx.command_path} --help'" if ctx is not None else "'prefctl --help'"
        message = exc.format_message()
        hint = _synonym_hint(message, ctx.command_path if ctx is not None else "")
        if hint is not None:  # the parser's own "Did you mean" would say it a second time
            import re

            message = re.sub(r"\.?\s*Did you mean [^?]*\?$", "", message)
        out.error(in_user_words(message), hint or f"see {where}")
        return int(exc.exit_code)
    from prefctl.store.db import store_error
    from prefctl.store.errors import StoreError

    # The store's failure that escaped a plain read (a transaction's is a PrefctlError already):
    # a damaged store file (a failing disk, a copy taken mid-write), a full disk, a store another
    # process held locked for the whole busy timeout. Not a bug of prefctl.
    failure = store_error(exc)
    if failure is not None and type(failure) is not StoreError:
        out.error(failure.message, failure.hint)
        return failure.exit_code
    if isinstance(exc, OSError) and exc.errno == 32:  # broken pipe: the reader went away
        return EXIT_FAILED
    if isinstance(exc, OSError) and help_asked:  # only help was written: to a full disk, say
        from prefctl.private_files import os_reason

        out.error(f"cannot write the output: {os_reason(exc)}")
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
