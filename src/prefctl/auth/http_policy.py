"""What prefctl's HTTP clients (the REST client, the token client, the JWKS fetch) do alike with
the answers of real deployments: bounded retries, proxies, and server text fit for one line.

**Retries** (``RetryPolicy``). A request is repeated only when the answer says the server did not
process it and invites a later try:

    429 Too Many Requests                 any method: the request was not processed (RFC 6585)
    503 Service Unavailable + Retry-After any method: the server asks for the retry (RFC 9110)
    503 without Retry-After               GET, HEAD, OPTIONS, PUT, DELETE only (idempotent)

It waits what ``Retry-After`` asks (delay-seconds or an HTTP-date), else 1, 2, 4 s; at most
``MAX_ATTEMPTS`` tries and ``MAX_TOTAL_WAIT`` seconds of waiting in all. A wait the answer asks
for that would go past that budget is not started: the error is reported at once, naming the wait.
Each retry is logged at info level (``-v``) as method, path, status and wait. Anything else (502,
504, 500, a connection reset) is not repeated: the request may have been carried out.

**Proxies** (``http_client``). ``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` are
honoured for remote hosts; a loopback host (``127.0.0.0/8``, ``::1``, ``localhost``) is always
reached directly, since no proxy can reach this machine's emulator. Proxy settings httpx cannot
use are a ConfigError naming them, not a crash.

**Answers** (``http_client``). An answer must arrive whole within ``ANSWER_DEADLINE_FACTOR`` times
the client's read timeout, counted from the request (httpx's timeouts bound each read, so a server
that sends a byte now and then would otherwise hold prefctl for ever): past it, the request is an
``UnreachableError`` saying the server was still sending. A 2xx answer over ``MAX_ANSWER_BYTES``
(as sent, before any gzip is undone) is an error rather than read into memory; of an error
answer, only the first ``MAX_ERROR_BYTES`` are read (a problem document with hundreds of field
errors fits).

**Server text** (``one_line``): what a server wrote is cut to a bounded length, on one line.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from prefctl.errors import ConfigError, PrefctlError, UnreachableError
from prefctl.hosts import is_loopback
from prefctl.logs import redact

if TYPE_CHECKING:
    from prefctl.clock import Clock

__all__ = [
    "ANSWER_DEADLINE_FACTOR",
    "BACKOFF",
    "LOOPBACK_DIRECT",
    "MAX_ANSWER_BYTES",
    "MAX_ATTEMPTS",
    "MAX_ERROR_BYTES",
    "MAX_TOTAL_WAIT",
    "RetryPolicy",
    "RetryState",
    "http_client",
    "is_loopback",
    "one_line",
    "proxy_variable",
    "redirect_target",
    "retry_after",
    "retry_hint",
]

MAX_ATTEMPTS = 4  # the first try and three retries
MAX_TOTAL_WAIT = 60.0  # seconds of waiting, across the retries of one request
BACKOFF = (1.0, 2.0, 4.0)  # waits before retries 1, 2, 3 when the answer gives no Retry-After
RETRY_STATUSES = frozenset({429, 503})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
SERVER_TEXT_LIMIT = 300  # characters of one piece of server text in a message
# The largest answer read. The emulator's listing pages stay under ~8 MiB (store/_paging.py).
MAX_ANSWER_BYTES = 64 * 1024 * 1024
MAX_ERROR_BYTES = 4 * 1024 * 1024  # of an error answer: a problem document with many field errors
ANSWER_DEADLINE_FACTOR = 4  # the whole answer within 4 × the read timeout (30 s: 2 minutes)
_DEFAULT_READ_TIMEOUT = 5.0  # httpx's, for a client made without a timeout
_STARTED = "prefctl.started"  # request extension: when the request was sent (monotonic)

_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")

log = logging.getLogger(__name__)


# -- retries ---------------------------------------------------------------------------------------
@dataclass
class RetryState:
    """How one request went: tries made, seconds waited, and the last ``Retry-After`` (seconds)."""

    attempts: int = 1
    waited: float = 0.0
    asked: float | None = None


class RetryPolicy:
    """Repeats a request whose answer was a 429 or 503 the server invites a retry of (see the
    module docstring). ``sleep`` is the seam for tests (``FakeClock.advance``); ``clock`` turns an
    HTTP-date ``Retry-After`` into seconds."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] | None = None,
        attempts: int = MAX_ATTEMPTS,
        total_wait: float = MAX_TOTAL_WAIT,
    ) -> None:
        self.clock = clock
        self.sleep = sleep or time.sleep
        self.attempts = attempts
        self.total_wait = total_wait

    def send(
        self, send: Callable[[], httpx.Response], method: str
    ) -> tuple[httpx.Response, RetryState]:
        """``send()`` until its answer is not one to repeat, or the budget is spent; the last
        answer and how it went. Retries are logged as method, path, status and wait."""
        state = RetryState()
        while True:
            response = send()
            wait = self._wait(response, method, state)
            if wait is None:
                return response, state
            log.info(
                "%s %s → %d; retrying in %g s (attempt %d of %d)",
                method,
                response.request.url.path,
                response.status_code,
                wait,
                state.attempts + 1,
                self.attempts,
            )
            response.close()
            self.sleep(wait)
            state.waited += wait
            state.attempts += 1

    def _wait(self, response: httpx.Response, method: str, state: RetryState) -> float | None:
        status = response.status_code
        if status not in RETRY_STATUSES:
            return None
        now = self.clock.now() if self.clock is not None else datetime.now(UTC)
        state.asked = retry_after(response.headers.get("Retry-After"), now)
        if status == 503 and state.asked is None and method.upper() not in IDEMPOTENT_METHODS:
            return None
        if state.attempts >= self.attempts:
            return None
        wait = state.asked
        if wait is None:
            wait = BACKOFF[min(state.attempts - 1, len(BACKOFF) - 1)]
        if state.waited + wait > self.total_wait:
            return None
        return wait


def retry_after(value: str | None, now: datetime) -> float | None:
    """The seconds a ``Retry-After`` value asks to wait (delay-seconds, or an HTTP-date: a past
    one is 0); None when there is none or it cannot be read."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # HTTP-dates are GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def retry_hint(status: int, state: RetryState, total_wait: float = MAX_TOTAL_WAIT) -> str | None:
    """What to do after a 429 or 503 that retries did not get past; None for other statuses."""
    if status not in RETRY_STATUSES:
        return None
    what = "is rate limiting requests" if status == 429 else "is unavailable"
    tries = (
        f"tried {state.attempts} times over {state.waited:.0f} s"
        if state.attempts > 1
        else "not retried"
    )
    if state.asked is not None and state.waited + state.asked > total_wait:
        return (
            f"the service {what} and asks to wait {state.asked:.0f} s, longer than prefctl "
            f"waits ({total_wait:.0f} s in all; {tries}); try again later"
        )
    if state.attempts == 1 and status == 503:
        tries = "not retried: the request may not be safe to repeat"
    return f"the service {what} ({tries}); try again later"


# -- clients and proxies ---------------------------------------------------------------------------
LOOPBACK_DIRECT: dict[str, httpx.AsyncBaseTransport | None] = {
    "all://localhost": None,
    "all://127.0.0.1": None,
}
"""httpx ``mounts`` for a client whose requests go to several hosts: those to this machine go
direct, the others by the environment's proxy if it sets one."""


def proxy_variable(url: str) -> str | None:
    """The environment variable whose proxy a request to ``url`` goes through, or None."""
    if is_loopback(url):
        return None
    import urllib.request

    host = urlsplit(url).hostname or ""
    if urllib.request.proxy_bypass(host):
        return None
    scheme = urlsplit(url).scheme.upper()
    for name in (f"{scheme}_PROXY", "ALL_PROXY"):
        for spelled in (name, name.lower()):
            if os.environ.get(spelled):
                return spelled
    return None


def http_client(url: str, **options: Any) -> httpx.Client:
    """An ``httpx.Client`` for requests to ``url`` (``options``: httpx's): proxies from the
    environment for a remote host, none for loopback; answers bounded in time and size (see the
    module docstring); ConfigError for proxy settings httpx cannot use."""
    timeout = options.get("timeout", _DEFAULT_READ_TIMEOUT)
    read = timeout.read if isinstance(timeout, httpx.Timeout) else timeout
    deadline = ANSWER_DEADLINE_FACTOR * (read if read is not None else _DEFAULT_READ_TIMEOUT)
    options["event_hooks"] = {"request": [_mark_start], "response": [_bounded_answer(deadline)]}
    try:
        return httpx.Client(trust_env=not is_loopback(url), **options)
    except (ValueError, ImportError) as exc:
        names = [
            name
            for name in (*_PROXY_VARIABLES, *(n.lower() for n in _PROXY_VARIABLES))
            if os.environ.get(name)
        ]
        if not names:
            raise
        raise ConfigError(
            f"cannot use the proxy settings of the environment ({', '.join(names)}): "
            f"{one_line(str(exc))}",
            hint="set them to an http:// or https:// proxy URL, or unset them",
        ) from None


def _mark_start(request: httpx.Request) -> None:
    request.extensions[_STARTED] = time.monotonic()


def _bounded_answer(seconds: float) -> Callable[[httpx.Response], None]:
    """The response hook that bounds the answer's body in time and size (before httpx reads it)."""

    def hook(response: httpx.Response) -> None:
        request = response.request
        deadline = request.extensions.get(_STARTED, time.monotonic()) + seconds
        if time.monotonic() > deadline:  # the status line and headers alone took that long
            raise _too_slow(request, seconds)
        error = response.status_code >= 400
        limit = MAX_ERROR_BYTES if error else MAX_ANSWER_BYTES
        response.stream = _BoundedStream(response, deadline, seconds, limit, cut=error)

    return hook


class _BoundedStream(httpx.SyncByteStream):
    """An answer's body as sent, stopped at a deadline and at a size: past ``limit`` an error
    answer is cut (``cut``), any other is an error."""

    def __init__(
        self, response: httpx.Response, deadline: float, seconds: float, limit: int, *, cut: bool
    ) -> None:
        self._stream = response.stream
        self._request = response.request
        self._deadline = deadline
        self._seconds = seconds
        self._limit = limit
        self._cut = cut

    def __iter__(self) -> Iterator[bytes]:
        received = 0
        for chunk in self._stream:  # type: ignore[union-attr]
            if time.monotonic() > self._deadline:
                raise _too_slow(self._request, self._seconds)
            if received + len(chunk) > self._limit:
                if self._cut:
                    yield chunk[: self._limit - received]
                    return
                raise PrefctlError(
                    f"the answer of {self._request.url.host} to {_what(self._request)} is over "
                    f"{self._limit // (1024 * 1024)} MiB; prefctl does not read answers that large",
                    hint="check that the URL points at the service",
                )
            received += len(chunk)
            yield chunk

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


def _too_slow(request: httpx.Request, seconds: float) -> UnreachableError:
    return UnreachableError(
        f"{request.url.host} did not finish answering {_what(request)} within {seconds:g} s "
        "(it was still sending)",
        hint="try again; check the URL and your network if it persists",
    )


def _what(request: httpx.Request) -> str:
    return f"{request.method} {request.url.path}"


# -- answers ---------------------------------------------------------------------------------------
def one_line(text: str, limit: int = SERVER_TEXT_LIMIT) -> str:
    """``text`` on one line, redacted, and cut to ``limit`` characters (``…`` marks the cut)."""
    flat = redact(" ".join(text.split()))  # before the cut, which could leave part of a secret
    if len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    return flat


def redirect_target(response: httpx.Response) -> str | None:
    """Where a 3xx answer points (its ``Location``, made absolute), or None."""
    if not 300 <= response.status_code < 400:
        return None
    location = response.headers.get("Location")
    if not location:
        return None
    try:
        return str(response.request.url.join(location))
    except (httpx.InvalidURL, RuntimeError):
        return str(location)
