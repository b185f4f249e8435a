"""What the REST commands share: the client of the selected profile, JSON bodies from a file or
stdin, and the options every REST command spells the same way."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import get_state
from prefctl.errors import UsageError

if TYPE_CHECKING:
    from prefctl.api.client import ApiClient
    from prefctl.cli._context import State

YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
CursorOption = Annotated[
    str | None,
    typer.Option(
        "--cursor", help="Start at this NextCursor of an earlier page.", show_default=False
    ),
]
WithCursorOption = Annotated[
    bool,
    typer.Option(
        "--with-cursor",
        help='With -o json: print {"items": [...], "next_cursor": ...} (null on the last page).',
    ),
]
AllPagesOption = Annotated[
    bool, typer.Option("--all", help="Follow the cursors and list every match.")
]
WaitTimeoutOption = Annotated[
    float,
    typer.Option(
        "--wait-timeout",
        min=0,
        metavar="SECONDS",
        help="How long to wait before giving up (exit 1).",
    ),
]


@contextmanager
def api_client(state: State) -> Iterator[ApiClient]:
    """The REST client of the selected profile, closed when the block ends."""
    from prefctl.api.client import ApiClient
    from prefctl.clock import SystemClock

    with ApiClient.for_profile(state.profile(), clock=SystemClock()) as client:
        yield client


def read_text(source: str) -> str:
    """The text of file ``source``, or of stdin for ``-``; UsageError when it cannot be read."""
    if source == "-":
        return get_state().out.read_stdin("the input")
    try:
        return Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{source} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        from prefctl.private_files import os_reason

        raise UsageError(f"cannot read {source}: {os_reason(exc)}") from None


def source_name(source: str) -> str:
    return "stdin" if source == "-" else source


def read_json(source: str, what: str) -> Any:
    """The JSON value in file ``source`` (``-``: stdin), to be sent as a request body;
    UsageError naming it when it is not JSON, or is JSON the service cannot be sent."""
    from prefctl.api.client import encode_body, parse_json

    text = read_text(source)
    if not text.strip():
        raise UsageError(f"{source_name(source)} is empty; expected {what}")
    try:
        value = parse_json(text)
    except ValueError as exc:
        raise UsageError(f"{source_name(source)} is not valid JSON ({what}): {exc}") from None
    except RecursionError:
        raise UsageError(f"{source_name(source)} is nested too deeply ({what})") from None
    encode_body(value, f"the body in {source_name(source)}")
    return value


def read_object(source: str, what: str) -> dict[str, Any]:
    """``read_json`` for bodies that must be a JSON object."""
    value = read_json(source, what)
    if not isinstance(value, dict):
        raise UsageError(
            f"{source_name(source)} must hold a JSON object ({what}), not {type(value).__name__}"
        )
    return value
