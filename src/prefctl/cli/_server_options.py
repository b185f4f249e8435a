"""The options that bound client connections, shared by ``prefctl receive`` and
``prefctl emulator start`` (``prefctl.servers.connections``; docs/receiver.md, docs/emulator.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from prefctl.cli._output import Output

if TYPE_CHECKING:
    from prefctl.servers.connections import ConnectionLimits

# prefctl.servers.connections' defaults, repeated to keep --help free of imports (tests/test_docs.py).
HeaderTimeoutOption = Annotated[
    float,
    typer.Option(
        "--header-timeout",
        metavar="S",
        help="Seconds a client has to send a request's header (then 408, closed).",
    ),
]
BodyTimeoutOption = Annotated[
    float,
    typer.Option(
        "--body-timeout",
        metavar="S",
        help="Seconds a client may pause while sending a body (then 408, closed).",
    ),
]
MaxHeaderBytesOption = Annotated[
    int,
    typer.Option(
        "--max-header-bytes", metavar="N", help="Largest request header accepted (431 above)."
    ),
]
MaxConnectionsOption = Annotated[
    int,
    typer.Option(
        "--max-connections",
        metavar="N",
        help="Connections open at once, at most (kept below the open-files limit).",
    ),
]
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 10.0
DEFAULT_MAX_HEADER_BYTES = 32768
DEFAULT_MAX_CONNECTIONS = 8192


def connection_limits(
    header_timeout: float, body_timeout: float, max_header_bytes: int, max_connections: int
) -> ConnectionLimits:
    from prefctl.servers.connections import ConnectionLimits

    return ConnectionLimits(
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        max_header_bytes=max_header_bytes,
        max_connections=max_connections,
    )


def warn_if_exposed(out: Output, host: str) -> None:
    """A warning on stderr when ``--host`` lets other machines reach the server."""
    from prefctl.servers.server import exposure

    warning = exposure(host)
    if warning is not None:
        out.warn(warning)
