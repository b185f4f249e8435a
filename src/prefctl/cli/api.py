"""``prefctl api METHOD PATH``: an authenticated request to any route of the profile's deployment.

prefctl api GET programs
prefctl api POST profiles --data @profile.json
prefctl api PATCH profiles/1001 --data '{"FirstName": "Ann"}'
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from prefctl.cli._context import get_state
from prefctl.errors import UsageError, did_you_mean

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def register(root: typer.Typer) -> None:
    root.command("api")(api)


def api(
    method: Annotated[
        str, typer.Argument(metavar="METHOD", help="GET, POST, PUT, PATCH or DELETE.")
    ],
    path: Annotated[
        str,
        typer.Argument(
            metavar="PATH",
            help="Relative to the account's base URL ({api_url}/{service_client_id}), e.g."
            " 'programs' or 'profiles?email=a@example.com'; or a full URL under api_url.",
        ),
    ],
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            "-d",
            metavar="JSON|@FILE|-",
            help="The request body: JSON text, @FILE for a file's, or - for stdin's.",
            show_default=False,
        ),
    ] = None,
    content_type: Annotated[
        str | None,
        typer.Option(
            "--content-type",
            metavar="TYPE",
            help="The body's media type (default: application/json; for PATCH,"
            " application/merge-patch+json for an object, application/json-patch+json for an array).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Send an authenticated request to the profile's deployment and print the JSON answer.

    How to reach a route no other command covers. The answer prints indented on a terminal, as one line in a pipe; an answer with no body prints nothing.
    Exit codes as for every command: 1 the service refused the request (4xx, 5xx), 3 authentication or permission (401/403), 4 not found, 5 unreachable; 2 a bad METHOD, PATH or --data.
    """
    from prefctl.cli._api import api_client

    verb = method.upper()
    if verb not in METHODS:
        raise UsageError(
            f"{method!r} is not an HTTP method prefctl sends{did_you_mean(verb, METHODS)}",
            hint=f"use one of {', '.join(METHODS)}",
        )
    body = None if data is None else _body(data)
    state = get_state()
    with api_client(state) as client:
        target = _target(path, client.api_url, client.base_url)
        kind = content_type or _default_type(verb, body)
        response = client.request(verb, target, body=body, content_type=kind)
    if not response.content:
        return
    try:
        answer = response.json()
    except ValueError:
        state.out.line(response.text.rstrip("\n"))
        return
    from prefctl.cli._output import to_json

    state.out.line(to_json(answer, indent=state.out.stdout_is_terminal))


def _default_type(verb: str, body: Any) -> str:
    if verb == "PATCH":
        return "application/json-patch+json" if isinstance(body, list) else MERGE_PATCH
    return "application/json"


MERGE_PATCH = "application/merge-patch+json"


def _body(data: str) -> Any:
    """The JSON value of ``--data``: its text, ``@FILE``'s or stdin's (``-``)."""
    from prefctl.cli._api import read_json

    if data == "-" or data.startswith("@"):
        return read_json(data if data == "-" else data[1:], "the request body")
    from prefctl.api.client import encode_body, parse_json

    try:
        value = parse_json(data)
    except (ValueError, RecursionError) as exc:
        raise UsageError(
            f"--data is not valid JSON: {exc}", hint="give JSON text, @FILE or - for stdin"
        ) from None
    encode_body(value, "--data")
    return value


def _target(path: str, api_url: str, base_url: str) -> str:
    """The URL to request: a full URL only under ``api_url`` (the token goes nowhere else),
    anything else relative to the account's base URL."""
    if "://" in path:
        if not (path == api_url or path.startswith(api_url.rstrip("/") + "/")):
            raise UsageError(
                f"{path} is not under the profile's api_url {api_url}",
                hint="give a path relative to the account, e.g. 'programs'",
            )
        return path
    return f"{base_url}/{path.lstrip('/')}"
