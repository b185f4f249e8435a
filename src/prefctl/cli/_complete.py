"""Shell completion (``prefctl --install-completion``): the words typed so far, and the values
offered for options and arguments: profile names, subscription names and Ids, event types, dead
letters' EventIds, delivery ids, ProfileIds.

A TAB runs prefctl with the words in the environment; ``app.build_app`` reads them here to build
only the command group being completed. Each value reads ``profiles.toml`` or the store the
command would act on (``--store``, ``PREFCTL_STORE``, else the emulator's: its PostgreSQL database
when it runs on one, else its SQLite file) and gives no values rather than an error: a completion
must never print a traceback into the prompt.
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

COMPLETE_VAR = "_PREFCTL_COMPLETE"  # set by the completion script Typer installs


def typed_words(env: os._Environ[str] | dict[str, str] | None = None) -> list[str]:
    """The words before the one being completed, as the shell's completion script passes them
    (bash: ``COMP_WORDS``/``COMP_CWORD``; zsh, fish, PowerShell: ``_TYPER_COMPLETE_ARGS``), the
    program's name left out. Read the same way as Typer's completion classes read them."""
    env = os.environ if env is None else env
    shell = env.get(COMPLETE_VAR, "").partition("_")[2]
    if shell == "bash":
        words = _split(env.get("COMP_WORDS", ""))
        try:
            current = int(env.get("COMP_CWORD", ""))
        except ValueError:
            current = len(words)
        return words[1:current]
    line = env.get("_TYPER_COMPLETE_ARGS", "")
    words = _split(line)[1:]
    if shell == "powershell":
        return words[:-1] if env.get("_TYPER_COMPLETE_WORD_TO_COMPLETE") else words
    return words[:-1] if words and not line.endswith(" ") else words


def _split(line: str) -> list[str]:
    """Words as a POSIX shell splits them; an unclosed quote (the word being typed) ends one."""
    lexer = shlex.shlex(line, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    words: list[str] = []
    try:
        words.extend(lexer)
    except ValueError:
        words.append(lexer.token)
    return words


def _matching(values: list[str], incomplete: str) -> list[str]:
    return [value for value in values if value.startswith(incomplete)]


def _store(ctx: Any) -> Path | str:
    """The store a command acts on, as the command finds it (``_delivery_options.store_location``):
    its ``--store`` when typed or in ``PREFCTL_STORE`` (a path, or a PostgreSQL URL as it is),
    else the PostgreSQL database the emulator of the data dir serves, else its SQLite file."""
    from prefctl.cli._delivery_options import store_location
    from prefctl.config import ENV_STORE

    params = getattr(ctx, "params", {})
    chosen = params.get("store") or os.environ.get(ENV_STORE) or None
    try:
        return store_location(chosen, params.get("data_dir"))
    except Exception:  # a data dir that cannot be resolved: no store, nothing to offer
        return ""


def profile_names(incomplete: str) -> list[str]:
    """The profiles of ``profiles.toml`` (``PREFCTL_CONFIG`` honoured)."""
    try:
        from prefctl.config import config_path, load_config

        names = list(load_config(config_path(None)).profiles)
    except Exception:  # a broken file completes nothing; the command itself will say why
        return []
    return _matching(names, incomplete)


def subscription_refs(ctx: Any, incomplete: str) -> list[str]:
    """Names and Ids of the subscriptions in the store (``--store``, or the emulator's)."""
    from prefctl.store import completion

    return _matching(completion.subscription_refs(_store(ctx)), incomplete)


def dead_letter_ids(ctx: Any, incomplete: str) -> list[str]:
    """EventIds of the store's dead letters, newest first."""
    from prefctl.store import completion

    return _matching(completion.dead_letter_event_ids(_store(ctx)), incomplete)


def delivery_ids(ctx: Any, incomplete: str) -> list[str]:
    """Ids of the store's deliveries, newest first."""
    from prefctl.store import completion

    return _matching(completion.delivery_ids(_store(ctx)), incomplete)


def profile_ids(ctx: Any, incomplete: str) -> list[str]:
    """ProfileIds of the emulator's customer profiles, newest first."""
    from prefctl.store import completion

    return _matching(completion.profile_ids(_store(ctx)), incomplete)


def event_types(incomplete: str) -> list[str]:
    """The event types of the catalog."""
    from prefctl.webhooks.catalog import EVENT_TYPES

    return _matching(list(EVENT_TYPES), incomplete)
