"""What ``prefctl api METHOD PATH`` does beyond one request (docs/admin.md, "Any route").

- ``resolve_target``: the URL of PATH, normalised (dot segments resolved, percent-encoded ones
  too) and kept under the profile's ``api_url``: the token goes nowhere else.
- ``parse_headers``: ``-H NAME:VALUE`` pairs, refusing the headers prefctl itself sets.
- ``build_fields``: ``-f KEY=VALUE`` / ``-F KEY=TYPED`` as a JSON object (``a[b]`` nests,
  ``a[]`` appends), or as query parameters for GET.
- ``paginate``: every item of a paged listing (``{<List>: [...], "NextCursor": …}``).
- ``jq_filter``: ``--jq EXPR`` through the ``jq`` library (imported only when used).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from prefctl.errors import PrefctlError, UsageError

__all__ = [
    "MAX_PAGES",
    "RESERVED_HEADERS",
    "Field",
    "build_fields",
    "jq_filter",
    "paginate",
    "parse_headers",
    "resolve_target",
]

MAX_PAGES = 10_000  # --paginate stops (exit 1) rather than follow a cursor forever
RESERVED_HEADERS = {
    "authorization": "prefctl sends the profile's token; use another profile to send another",
    "host": "the host is api_url's",
    "content-length": "it is computed from the body",
    "transfer-encoding": "it is chosen by the HTTP client",
    "cookie": "the API authenticates with the token, not cookies",
}
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")


# -- the target -----------------------------------------------------------------------------------
def resolve_target(path: str, api_url: str, base_url: str) -> str:
    """The URL to request for PATH: a full URL (only under ``api_url``) or a path relative to
    ``base_url``, with its dot segments (``..``, ``%2e%2e``) resolved; UsageError when the result
    is not under ``api_url``, or when a segment hides a dot segment behind an encoded slash."""
    root = urlsplit(api_url.rstrip("/"))
    if _SCHEME.match(path):
        given = urlsplit(path)
        same_origin = (
            given.scheme.lower() == root.scheme.lower()
            and (given.hostname or "") == (root.hostname or "")
            and given.port == root.port
            and given.username is None
            and given.password is None
        )
        if not same_origin:
            raise _outside(path, api_url)
        raw_path, query = given.path, given.query
    else:
        relative, _, query = path.partition("#")[0].partition("?")
        raw_path = urlsplit(base_url).path.rstrip("/") + "/" + relative.lstrip("/")
    normal = _remove_dot_segments(raw_path, path)
    prefix = root.path.rstrip("/")
    if not (normal == prefix or normal.startswith(prefix + "/")):
        raise _outside(path, api_url)
    return urlunsplit((root.scheme, root.netloc, normal, query, ""))


def _outside(path: str, api_url: str) -> UsageError:
    return UsageError(
        f"{path} is not under the profile's api_url {api_url}",
        hint="give a path relative to the account, e.g. 'programs'; the token is sent nowhere else",
    )


def _remove_dot_segments(raw_path: str, given: str) -> str:
    """RFC 3986 dot-segment removal where ``.``/``..`` may also be percent-encoded; a segment
    that decodes to a path with dot segments in it (``..%2f..``) is refused."""
    out: list[str] = []
    segments = raw_path.split("/")
    for index, segment in enumerate(segments):
        decoded = unquote(segment)
        last = index == len(segments) - 1
        if decoded == ".":
            if last:
                out.append("")
            continue
        if decoded == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
            continue
        if any(part in (".", "..") for part in re.split(r"[/\\]", decoded)):
            raise UsageError(
                f"{given} has a dot segment behind an encoded slash ({segment})",
                hint="write the path without '..'",
            )
        out.append(segment)
    return "/".join(out) or "/"


# -- headers --------------------------------------------------------------------------------------
def parse_headers(pairs: list[str]) -> dict[str, str]:
    """``NAME:VALUE`` pairs as headers (a later one replaces an earlier one of that name)."""
    headers: dict[str, str] = {}
    for pair in pairs:
        name, colon, value = pair.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not _TOKEN.match(name):
            raise UsageError(f"-H {pair!r} is not NAME:VALUE", hint="e.g. -H 'Accept-Language: en'")
        if any(ch in value for ch in "\r\n\0"):
            raise UsageError(f"the value of -H {name} has a line break in it")
        reason = RESERVED_HEADERS.get(name.lower())
        if reason is not None:
            raise UsageError(f"-H cannot set {name}: {reason}")
        for known in list(headers):
            if known.lower() == name.lower():
                del headers[known]
        headers[name] = value
    return headers


# -- fields ---------------------------------------------------------------------------------------
Field = tuple[str, str, bool]  # KEY, VALUE, typed (-F)


def build_fields(
    fields: list[Field], read_file: Callable[[str], str], *, as_query: bool
) -> dict[str, Any]:
    """The JSON object of ``-f``/``-F`` fields in the order given; ``as_query``: flat query
    parameters (a key given twice sends the parameter twice), nested keys refused."""
    body: dict[str, Any] = {}
    for key, raw, typed in fields:
        value = _typed(raw, read_file) if typed else raw
        match = _KEY.match(key)
        if match is None:
            raise UsageError(
                f"field name {key!r} is not NAME, NAME[KEY] or NAME[]",
                hint="e.g. -F 'CustomerName[FirstName]=Ann'",
            )
        name, brackets = match.group(1), match.group(2)
        if as_query:
            if brackets:
                raise UsageError(
                    f"field {key!r}: a GET sends its fields as query parameters, which do not nest"
                )
            body.setdefault(name, []).append("" if value is None else _query_text(value))
            continue
        keys = [name, *re.findall(r"\[([^\[\]]*)\]", brackets)]
        _place(body, keys, value, key)
    return body


def _query_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _place(body: dict[str, Any], keys: list[str], value: Any, given: str) -> None:
    node: Any = body
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        following: Any = None if last else ([] if keys[depth + 1] == "" else {})
        if key == "":
            if not isinstance(node, list):
                raise _conflict(given)
            if last:
                node.append(value)
                return
            # a[][b]=1: a new object in the list unless the last one lacks b
            if node and isinstance(node[-1], dict) and keys[depth + 1] not in node[-1]:
                node = node[-1]
            else:
                node.append(following)
                node = node[-1]
            continue
        if not isinstance(node, dict):
            raise _conflict(given)
        if last:
            if key in node:
                raise UsageError(f"field {given!r} is given twice")
            node[key] = value
            return
        if key not in node:
            node[key] = following
        node = node[key]


def _conflict(given: str) -> UsageError:
    return UsageError(f"field {given!r} mixes a list and an object under one name")


def _typed(raw: str, read_file: Callable[[str], str]) -> Any:
    """``-F``'s value: true, false, null, an integer or a decimal number as JSON; ``@FILE`` the
    file's text (``@-`` stdin's); anything else the string itself."""
    if raw.startswith("@"):
        return read_file(raw[1:])
    if raw in ("true", "false"):
        return raw == "true"
    if raw == "null":
        return None
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", raw):
        return int(raw)
    if re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", raw):
        from prefctl.api.client import finite_float

        try:
            return finite_float(raw)
        except ValueError as exc:
            raise UsageError(f"-F value {raw}: {exc}") from None
    return raw


# -- pages ----------------------------------------------------------------------------------------
def list_key(body: Any) -> str | None:
    """The list of a paged answer (``{"Profiles": [...], "NextCursor": …}``), or None when the
    answer is not a page of a listing."""
    if not isinstance(body, dict) or "NextCursor" not in body:
        return None
    lists = [key for key, value in body.items() if isinstance(value, list)]
    return lists[0] if len(lists) == 1 else None


def paginate(first: Any, fetch: Callable[[str], Any]) -> Iterator[Any]:
    """Every item of the listing whose first page is ``first``; ``fetch(cursor)`` returns the
    next page's body. A body that is not a page is yielded whole, once."""
    key = list_key(first)
    if key is None:
        yield first
        return
    body, seen = first, set()
    for _ in range(MAX_PAGES):
        yield from body[key]
        cursor = body.get("NextCursor")
        if not isinstance(cursor, str) or not cursor:
            return
        if cursor in seen:
            raise PrefctlError(f"the API gave the cursor {cursor[:40]} twice; stopped paging")
        seen.add(cursor)
        body = fetch(cursor)
        if list_key(body) != key:
            raise PrefctlError(f"a later page of the listing has no {key} list")
    raise PrefctlError(f"stopped after {MAX_PAGES} pages", hint="narrow the listing with a query")


# -- jq -------------------------------------------------------------------------------------------
def jq_filter(expression: str) -> Callable[[Any], list[Any]]:
    """A function giving the outputs of jq ``expression`` on a JSON value; UsageError when the
    expression does not compile, PrefctlError when it fails on the value."""
    import jq

    try:
        program = jq.compile(expression)
    except ValueError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "it does not compile"
        raise UsageError(
            f"--jq {expression!r}: {first.removeprefix('jq: error: ').rstrip(':')}"
        ) from None

    def run(value: Any) -> list[Any]:
        try:
            return list(program.input_value(value).all())
        except ValueError as exc:
            raise PrefctlError(f"--jq {expression!r} failed on the answer: {exc}") from None

    return run
