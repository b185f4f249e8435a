"""``prefctl api METHOD PATH``: an authenticated request to any route of the profile's deployment.

prefctl api GET programs
prefctl api POST profiles --data @profile.json
prefctl api PATCH profiles/1001 --data '{"FirstName": "Ann"}'
prefctl api GET profiles --paginate --jq '.[].ProfileId'
prefctl api POST profiles -F 'CustomerName[FirstName]=Ann' -f 'Emails[][Address]=ann@example.com'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import get_state
from prefctl.errors import PrefctlError, UsageError, did_you_mean

if TYPE_CHECKING:
    import httpx

    from prefctl.cli._context import State

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
    raw_fields: Annotated[
        list[str] | None,
        typer.Option(
            "--raw-field",
            "-f",
            metavar="KEY=VALUE",
            help="A string field of the JSON body (repeatable; KEY[SUB] nests, KEY[] appends);"
            " for GET, a query parameter.",
            show_default=False,
        ),
    ] = None,
    typed_fields: Annotated[
        list[str] | None,
        typer.Option(
            "--field",
            "-F",
            metavar="KEY=VALUE",
            help="A typed field: true, false, null and numbers as JSON, @FILE a file's text"
            " (@- stdin's), anything else a string. Not with --data.",
            show_default=False,
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            "-H",
            metavar="NAME:VALUE",
            help="An extra request header (repeatable); Authorization, Host, Cookie and"
            " Content-Length are refused.",
            show_default=False,
        ),
    ] = None,
    include: Annotated[
        bool,
        typer.Option(
            "--include", "-i", help="Print the status line and the headers before the body."
        ),
    ] = False,
    paginate: Annotated[
        bool,
        typer.Option(
            "--paginate",
            help="Follow NextCursor to the last page and print every item as one JSON array.",
        ),
    ] = False,
    jq_expression: Annotated[
        str | None,
        typer.Option(
            "--jq",
            metavar="EXPR",
            help="Filter the answer with a jq expression; each result on a line, strings"
            " without quotes.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Send an authenticated request to the profile's deployment and print the JSON answer.

    How to reach a route no other command covers. The answer prints indented on a terminal, as one line in a pipe; an answer with no body prints nothing.
    PATH stays under the profile's api_url: dot segments ('..', '%2e%2e') are resolved first, and a path that leaves it is refused.
    Exit codes as for every command: 1 the service refused the request (4xx, 5xx) or --jq failed on the answer, 3 authentication or permission (401/403), 4 not found, 5 unreachable; 2 a bad METHOD, PATH, --data, field, header or --jq expression.
    """
    from urllib.parse import parse_qs

    from prefctl.api import raw
    from prefctl.cli._api import api_client, read_text

    verb = method.upper()
    if verb not in METHODS:
        raise UsageError(
            f"{method!r} is not an HTTP method prefctl sends{did_you_mean(verb, METHODS)}",
            hint=f"use one of {', '.join(METHODS)}",
        )
    if paginate and verb != "GET":
        raise UsageError("--paginate follows the pages of a GET listing", hint="use GET")
    extra = raw.parse_headers(header or [])
    for name in [n for n in extra if n.lower() == "content-type"]:
        if content_type is not None:
            raise UsageError("give the body's type once: --content-type or -H Content-Type")
        content_type = extra.pop(name)
    fields = [_field(f, typed=False) for f in raw_fields or []]
    fields += [_field(f, typed=True) for f in typed_fields or []]
    if fields and data is not None:
        raise UsageError("give the body either as --data or as -f/-F fields, not both")
    params: dict[str, list[str]] = {}
    body = None if data is None else _body(data)
    if fields:
        built = raw.build_fields(fields, read_text, as_query=verb == "GET")
        if verb == "GET":
            params = built
        else:
            body = built
    jq = raw.jq_filter(jq_expression) if jq_expression is not None else None
    state = get_state()
    with api_client(state) as client:
        target, _, written = raw.resolve_target(path, client.api_url, client.base_url).partition(
            "?"
        )
        params = {**parse_qs(written, keep_blank_values=True), **params}
        kind = content_type or _default_type(verb, body)

        def send(query: dict[str, list[str]]) -> httpx.Response:
            response = client.request(
                verb, target, params=query, body=body, content_type=kind, headers=extra
            )
            if include:
                _print_head(state, response)
            return response

        response = send(params)
        if not response.content:
            return
        try:
            answer = response.json()
        except ValueError:
            if jq is not None:
                kind = response.headers.get("content-type", "no content type").split(";")[0]
                raise PrefctlError(f"--jq needs a JSON answer, not {kind}") from None
            state.out.line(response.text.rstrip("\n"))
            return
        if paginate and raw.list_key(answer) is not None:

            def page(cursor: str) -> Any:
                return send({**params, "cursor": [cursor]}).json()

            answer = list(raw.paginate(answer, page))
    from prefctl.cli._output import to_json

    indent = state.out.stdout_is_terminal
    if jq is None:
        state.out.line(to_json(answer, indent=indent))
        return
    for result in jq(answer):
        state.out.line(result if isinstance(result, str) else to_json(result, indent=indent))


def _field(given: str, *, typed: bool) -> tuple[str, str, bool]:
    key, equals, value = given.partition("=")
    if not equals or not key:
        flag = "-F" if typed else "-f"
        raise UsageError(f"{flag} {given!r} is not KEY=VALUE", hint=f"e.g. {flag} Name=Ann")
    return key, value, typed


def _print_head(state: State, response: httpx.Response) -> None:
    """The status line and headers of ``response``, as ``curl -i`` and ``gh api -i`` print them."""
    state.out.line(f"{response.http_version} {response.status_code} {response.reason_phrase}")
    for name, value in response.headers.multi_items():
        state.out.line(f"{name}: {value}")
    state.out.line("")


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
