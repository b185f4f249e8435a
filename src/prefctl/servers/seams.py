"""The parts of uvicorn that are not its public interface and that prefctl's servers use, checked
before they are used.

prefctl reaches into uvicorn in three places (CONTRIBUTING.md, "Borrowed internals"): the
receiver's protocol (``receiver.protocol``), the connection limits (``connections``) and the quiet
server (``servers``). Each asks ``seam_problem`` at start-up whether what it needs is there, and
when it is not (or when using it raises), serves through uvicorn's public interface instead:
slower or less guarded, never wrong. ``TESTED_UVICORN`` is the range CI tests, and the bound in
``pyproject.toml`` (a test holds the two equal).
"""

from __future__ import annotations

import inspect
import logging
import re
from typing import Any

__all__ = ["TESTED_UVICORN", "httptools_protocol", "seam_problem", "version_problem"]

TESTED_UVICORN = ((0, 29), (0, 55))
"""uvicorn versions whose internals prefctl has been tested with: from the first, below the second."""

_log = logging.getLogger("prefctl.servers")


def _version_tuple(text: str) -> tuple[int, ...]:
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else ()


def version_problem() -> str | None:
    """Why the installed uvicorn is outside ``TESTED_UVICORN``; None when it is inside."""
    import uvicorn

    version = getattr(uvicorn, "__version__", "")
    low, high = TESTED_UVICORN
    found = _version_tuple(version)
    if not found or not low <= found < high:
        tested = f"{'.'.join(map(str, low))} to below {'.'.join(map(str, high))}"
        return f"uvicorn {version or '(unknown version)'} is outside the tested {tested}"
    return None


def method_problem(cls: type[Any], name: str, parameters: tuple[str, ...]) -> str | None:
    """Why ``cls.name`` is not a method taking ``parameters`` (after self); None if it is."""
    method = getattr(cls, name, None)
    if not callable(method):
        return f"{cls.__name__}.{name} is missing"
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return f"{cls.__name__}.{name} has no readable signature"
    names = tuple(signature.parameters)[1:]
    if names[: len(parameters)] != parameters or any(
        p.default is inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD
        for p in list(signature.parameters.values())[1 + len(parameters) :]
        if p.kind is not p.VAR_POSITIONAL
    ):
        return f"{cls.__name__}.{name}{signature} does not take {parameters}"
    return None


def httptools_protocol() -> type[Any] | None:
    """uvicorn's httptools protocol class, as uvicorn itself would load it; None if absent."""
    try:
        from uvicorn.protocols.http import httptools_impl
    except ImportError:
        return None
    protocol = getattr(httptools_impl, "HttpToolsProtocol", None)
    return protocol if isinstance(protocol, type) else None


# The parser callbacks and asyncio methods every protocol built on uvicorn's overrides.
PROTOCOL_METHODS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("connection_made", ("transport",)),
    ("connection_lost", ("exc",)),
    ("data_received", ("data",)),
    ("on_message_begin", ()),
    ("on_url", ("url",)),
    ("on_header", ("name", "value")),
    ("on_headers_complete", ()),
    ("on_body", ("body",)),
    ("on_message_complete", ()),
    ("shutdown", ()),
)


def seam_problem(
    cls: type[Any] | None, methods: tuple[tuple[str, tuple[str, ...]], ...]
) -> str | None:
    """Why ``cls`` (a class of uvicorn's) cannot be built on; None when it can."""
    if cls is None:
        return "uvicorn's httptools protocol is not installed"
    problem = version_problem()
    if problem is not None:
        return problem
    for name, parameters in methods:
        problem = method_problem(cls, name, parameters)
        if problem is not None:
            return problem
    return None
