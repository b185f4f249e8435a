"""``ApiClient``: one ``httpx.Client`` per invocation, on ``{api_url}/{service_client_id}``.

It carries the profile's bearer token (``prefctl.auth.httpx_auth.BearerAuth``: cached token, one
renewal on 401), verifies TLS (plus the profile's ``ca_bundle``), sends ``User-Agent:
prefctl/<version>``, and turns every failure into one ``PrefctlError`` that reads on one line: an error status
as ``problems.error_for_response`` words it (exit 1, 3 or 4), a connection error or a timeout
as an ``UnreachableError`` naming the URL (exit 5). Tokens never reach a log line or a message: requests are logged as method, path and status.

The real world's answers (``prefctl.auth.http_policy``): a 429, or a 503 the server invites a
retry of, is repeated a bounded number of times (``-v`` logs each retry); a redirect is reported,
never followed; a connection that breaks after the request went out says that the request may
have been carried out; proxies from the environment are used for remote hosts, never for loopback.

    >>> with ApiClient.for_profile(profile, clock=SystemClock()) as client:
    ...     client.get("/profiles/1001")
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from prefctl import __version__
from prefctl.api.problems import error_for_response
from prefctl.auth.http_policy import IDEMPOTENT_METHODS, RetryPolicy, http_client
from prefctl.auth.token_client import transport_error_reason, unreachable_hint
from prefctl.errors import ConfigError, PrefctlError, UnreachableError, UsageError

if TYPE_CHECKING:
    from prefctl.clock import Clock
    from prefctl.config import Profile

__all__ = [
    "DEFAULT_TIMEOUT",
    "JSON_PATCH",
    "MERGE_PATCH",
    "USER_AGENT",
    "ApiClient",
    "Page",
    "Resource",
    "all_items",
    "as_page",
    "as_resource",
    "encode_body",
    "finite_float",
    "not_json_constant",
    "parse_json",
]

# An API resource exactly as the service returns it (PascalCase keys).
Resource = dict[str, Any]

USER_AGENT = f"prefctl/{__version__}"
DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"

log = logging.getLogger(__name__)


class ApiClient:
    """The REST API of one account, with errors mapped to prefctl's error tree.

    ``transport`` is the seam for tests that need one; prefctl's own tests use a real emulator.
    """

    def __init__(
        self,
        api_url: str,
        service_client_id: str,
        *,
        auth: httpx.Auth | None = None,
        ca_bundle: Path | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Clock | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        """``clock`` and ``sleep``: for the waits between retries (``RetryPolicy``)."""
        self.api_url = api_url.rstrip("/")
        self.service_client_id = service_client_id
        self.base_url = f"{self.api_url}/{quote(service_client_id, safe='')}"
        self.timeout = timeout
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"api_url {api_url!r} is not an http(s) URL",
                hint="set api_url to the REST base, e.g. http://127.0.0.1:8750/api/v1",
            )
        from prefctl.auth.tls import context_for

        verify = context_for(self.base_url, ca_bundle)  # requests go only under base_url
        self.retry = RetryPolicy(clock=clock, sleep=sleep)
        self._http = http_client(
            self.base_url,
            base_url=self.base_url,
            auth=auth,
            verify=verify,
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
            headers={"User-Agent": USER_AGENT, "Accept": JSON},
            follow_redirects=False,
        )

    @classmethod
    def for_profile(
        cls,
        profile: Profile,
        *,
        clock: Clock,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        sleep: Callable[[float], None] | None = None,
    ) -> ApiClient:
        """A client for ``profile``'s account, authenticated with its credentials."""
        from prefctl.auth.httpx_auth import BearerAuth
        from prefctl.auth.provider import TokenProvider

        profile.require("api_url", "service_client_id")
        provider = TokenProvider.for_profile(profile, clock=clock, transport=transport, sleep=sleep)
        return cls(
            profile.api_url,
            profile.service_client_id,
            auth=BearerAuth(provider),
            ca_bundle=profile.path(profile.ca_bundle) if profile.ca_bundle else None,
            transport=transport,
            timeout=timeout,
            clock=clock,
            sleep=sleep,
        )

    # -- requests -------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send one request (``body`` as JSON of ``content_type``, with any extra ``headers``),
        repeated as ``RetryPolicy`` allows; the response if it is 2xx."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        sent = dict(headers or {})
        content: bytes | None = None
        if body is not None:
            content = encode_body(body)
            sent["Content-Type"] = content_type

        def send() -> httpx.Response:
            # params=None keeps a query written in ``path`` (httpx replaces it with any params)
            return self._http.request(
                method, path, params=query or None, content=content, headers=sent
            )

        try:
            response, retried = self.retry.send(send, method)
        except httpx.TimeoutException as exc:
            raise UnreachableError(
                f"the REST API at {self.base_url} did not answer {method} {path} within "
                f"{self.timeout:g} s",
                hint=self._unreachable_hint(sent=_was_sent(exc), method=method),
            ) from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise ConfigError(f"cannot use api_url {self.api_url!r}: {exc}") from None
        except httpx.TransportError as exc:
            reason = transport_error_reason(exc)
            if _was_sent(exc):
                raise UnreachableError(
                    f"the connection to the REST API at {self.base_url} broke before "
                    f"{method} {path} was answered: {reason}",
                    hint=self._unreachable_hint(sent=True, method=method),
                ) from None
            raise UnreachableError(
                f"cannot reach the REST API at {self.base_url}: {reason}",
                hint=self._unreachable_hint(exc),
            ) from None
        log.info("%s %s → %d", method, response.request.url.path, response.status_code)
        if not response.is_success:
            raise error_for_response(response, method, path, retried)
        return response

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Any:
        """``request`` and return the decoded JSON body (None for an empty one, e.g. 204)."""
        response = self.request(method, path, params=params, body=body, content_type=content_type)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type").split(";")[0]
            raise PrefctlError(
                f"the REST API answered {method} {path} with {kind}, not JSON "
                f"(HTTP {response.status_code})",
                hint="check that api_url points at the REST API",
            ) from None

    def resource(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Resource:
        """``call`` for operations that answer one resource (a JSON object)."""
        answer = self.call(method, path, params=params, body=body, content_type=content_type)
        return as_resource(answer, f"{method} {path}")

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.call("GET", path, params=params)

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _unreachable_hint(
        self, exc: Exception | None = None, *, sent: bool = False, method: str = "GET"
    ) -> str:
        if sent and method.upper() not in IDEMPOTENT_METHODS:
            return (
                "the service may have carried out the request; check before repeating it "
                "(e.g. with 'prefctl profiles get' or 'prefctl events list')"
            )
        connected = "try again; check api_url and your network if it persists" if sent else None
        return unreachable_hint(exc, self.base_url, "api_url", connected=connected)


def _was_sent(exc: httpx.TransportError) -> bool:
    """True when ``exc`` happened after the request went out (reading or writing on an open
    connection), so the service may have received it; False when no connection was made."""
    return isinstance(exc, _AFTER_SENDING)


_AFTER_SENDING = (
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
)


def parse_json(text: str) -> Any:
    """``json.loads`` of strict JSON, for bodies users give: ``NaN`` and ``Infinity`` (not JSON)
    and numbers beyond a double (``1e400``, which would be sent as null) are a ValueError, like
    any other JSON error."""
    import json

    return json.loads(text, parse_constant=not_json_constant, parse_float=finite_float)


def not_json_constant(name: str) -> Any:
    """For ``json``'s ``parse_constant``: NaN and Infinity are not JSON."""
    raise ValueError(f"{name} is not JSON")


def finite_float(text: str) -> float:
    """For ``json``'s ``parse_float``: a number beyond a double is refused, not made infinite."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text} is beyond what JSON numbers can carry here")
    return value


def encode_body(body: Any, what: str = "the body") -> bytes:
    """``body`` as the JSON bytes of a request; UsageError saying why when it cannot be sent.

    Valid JSON can still be unsendable: an integer beyond 64 bits, nesting deeper than 254
    levels, a lone surrogate such as ``"\\ud800"``. Input readers call this too, so that such a
    body fails before any request is made.
    """
    import orjson

    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as exc:
        reason = str(exc)
        if reason == "Recursion limit reached":
            reason = "it is nested more than 254 levels deep"
        raise UsageError(f"{what} cannot be sent: {reason}") from None


@dataclass(frozen=True)
class Page:
    """One page of a listing: its items and the cursor of the next page (None at the end)."""

    items: list[Resource]
    next_cursor: str | None


def all_items(fetch: Callable[[str | None], Page]) -> Iterator[Resource]:
    """Every item of a paged listing: ``fetch(cursor)`` returns one page (None: the first)."""
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        yield from page.items
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def as_resource(body: Any, what: str) -> Resource:
    """``body`` when it is a JSON object; PrefctlError naming the request otherwise."""
    if not isinstance(body, dict):
        raise PrefctlError(f"the REST API answered {what} without a JSON object")
    return body


def as_page(body: Any, key: str, what: str) -> Page:
    """A ``{<key>: [...], "NextCursor": …}`` body as a Page; PrefctlError when it is not one
    (an item that is not a JSON object included)."""
    if not isinstance(body, dict) or not isinstance(body.get(key), list):
        raise PrefctlError(f"the REST API answered {what} without a {key} list")
    for index, item in enumerate(body[key]):
        if not isinstance(item, dict):
            raise PrefctlError(
                f"the REST API answered {what} with {key}[{index}] that is not a JSON object"
            )
    cursor = body.get("NextCursor")
    return Page(list(body[key]), cursor if isinstance(cursor, str) and cursor else None)
