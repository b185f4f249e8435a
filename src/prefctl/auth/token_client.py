"""The OAuth 2.0 client credentials request: ``POST {auth_url}/oauth2/v1/token``.

Every way the request can go wrong becomes one ``PrefctlError`` that says what happened:

    cannot connect, DNS, timeout, TLS    UnreachableError   exit 5  names the URL
    invalid_client, unauthorized_client,
    invalid_scope, invalid_grant,
    access_denied                        AuthError          exit 3  shows error and description
    any other RFC 6749 error             PrefctlError       exit 1  shows error and description
    an answer that is not JSON, or JSON
    that is not a token response         PrefctlError       exit 1  shows the HTTP status
    a redirect (3xx; never followed)     PrefctlError       exit 1  names the Location
    an auth_url that is not a URL        ConfigError        exit 2

A 429, or a 503 with ``Retry-After``, is retried as ``http_policy.RetryPolicy`` allows (a new
client assertion each time: the service refuses a ``jti`` it has seen). Server text in a message
is bounded and redacted (``http_policy.one_line``).

TLS verification is always on; the profile's ``ca_bundle`` is trusted in addition to the usual
roots (see ``prefctl.auth.tls``). The transport is a seam: tests pass a real server's URL, or an
``httpx`` transport.
"""

from __future__ import annotations

import errno
import logging
import re
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from prefctl.auth.cache import CachedToken
from prefctl.auth.credentials import ClientCredentials
from prefctl.auth.http_policy import (
    RetryPolicy,
    RetryState,
    http_client,
    is_loopback,
    one_line,
    proxy_variable,
    redirect_target,
    retry_hint,
)
from prefctl.auth.tls import context_for
from prefctl.errors import AuthError, ConfigError, PrefctlError, UnreachableError
from prefctl.logs import redact, register_secret

if TYPE_CHECKING:
    from prefctl.clock import Clock

__all__ = ["AUTH_ERRORS", "TOKEN_PATH", "TokenClient"]

TOKEN_PATH = "/oauth2/v1/token"
# RFC 6749 error codes that mean "these credentials may not have this token": exit 3.
AUTH_ERRORS = frozenset(
    {"invalid_client", "unauthorized_client", "invalid_scope", "invalid_grant", "access_denied"}
)
_HINTS = {
    "invalid_client": "check client_id, auth_method and the client secret or certificate",
    "unauthorized_client": "this client may not use the client_credentials grant",
    "invalid_scope": "the scope is <service_client_id>/<user_id>; check both in the profile",
}

log = logging.getLogger(__name__)


class TokenClient:
    """Requests access tokens for one client at one token service.

    >>> client = TokenClient("http://127.0.0.1:8750", SecretBasic(client_id, secret), clock=clock)
    >>> client.request("DEMO_CORP/admin").access_token
    'eyJ…'
    """

    def __init__(
        self,
        auth_url: str,
        credentials: ClientCredentials,
        *,
        clock: Clock,
        ca_bundle: Path | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.auth_url = auth_url.rstrip("/")
        self.token_url = self.auth_url + TOKEN_PATH
        self.credentials = credentials
        self.clock = clock
        self._ca_bundle = ca_bundle
        self._transport = transport
        self._timeout = timeout
        self.retry = RetryPolicy(clock=clock, sleep=sleep)

    def request(self, scope: str) -> CachedToken:
        """A new access token for ``scope``; raises a PrefctlError subclass on any failure."""
        log.debug(
            "requesting a token: POST %s (%s, scope %s)",
            self.token_url,
            self.credentials.method,
            scope,
        )

        def send() -> httpx.Response:
            # Built afresh for every try: a client assertion may be used only once.
            parts = self.credentials.token_request(self.token_url, self.clock.now())
            form = {"grant_type": "client_credentials", "scope": scope, **parts.form}
            headers = {"Accept": "application/json", **parts.headers}
            return self._post(form, headers)

        response, retried = self.retry.send(send, "POST")
        token = self._parse(response, scope, retried)
        register_secret(token.access_token)
        log.info(
            "got a token for scope %s, valid %d s", token.scope, token.expires_in(self.clock.now())
        )
        return token

    def _post(self, form: dict[str, str], headers: dict[str, str]) -> httpx.Response:
        verify = context_for(self.token_url, self._ca_bundle)
        try:
            with http_client(
                self.token_url, transport=self._transport, verify=verify, timeout=self._timeout
            ) as client:
                return client.post(self.token_url, data=form, headers=headers)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise ConfigError(
                f"auth_url {self.auth_url!r} is not an http(s) URL: {exc}",
                hint="set auth_url to the token service's base URL, e.g. http://127.0.0.1:8750",
            ) from None
        except httpx.TimeoutException as exc:
            raise UnreachableError(
                f"the token endpoint {self.token_url} did not answer within {self._timeout:g} s",
                hint=self._unreachable_hint(exc),
            ) from None
        except httpx.TransportError as exc:
            raise UnreachableError(
                f"cannot reach the token endpoint {self.token_url}: {transport_error_reason(exc)}",
                hint=self._unreachable_hint(exc),
            ) from None

    def _unreachable_hint(self, exc: Exception) -> str:
        answered = None
        if isinstance(exc, httpx.ReadTimeout):
            answered = "the token service accepted the connection but did not answer; try again"
        return unreachable_hint(exc, self.token_url, "auth_url", connected=answered)

    def _parse(self, response: httpx.Response, scope: str, retried: RetryState) -> CachedToken:
        from pydantic import ValidationError

        from prefctl.models.token import TokenError, TokenResponse

        status = response.status_code
        target = redirect_target(response)
        if target is not None:
            raise PrefctlError(
                f"the token endpoint {self.token_url} redirected to {one_line(target)} "
                f"(HTTP {status})",
                hint="if the token service moved, set auth_url to its new address; prefctl "
                "does not follow redirects, so the credentials never go to another address",
            )
        hint = retry_hint(status, retried)
        if hint is None and status >= 500:
            hint = "the token service, or a proxy in front of it, failed; try again later"
        body = _json_body(response)
        if body is None:
            kind = response.headers.get("content-type", "no content type").split(";")[0]
            raise PrefctlError(
                f"the token endpoint {self.token_url} answered HTTP {status} with {kind}, not JSON",
                hint=hint or "check that auth_url points at the token service",
            )
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            error = TokenError.model_validate(body)
            self._raise_token_error(status, error.error, error.error_description, hint)
        if status != 200:
            raise PrefctlError(
                f"the token endpoint {self.token_url} answered HTTP {status} "
                "without an OAuth error",
                hint=hint,
            )
        try:
            parsed = TokenResponse.model_validate(body)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "body"
            raise PrefctlError(
                f"the token endpoint {self.token_url} answered with an invalid token response "
                f"({where}: {problem['msg']})",
            ) from None
        if parsed.token_type.lower() != "bearer":
            raise PrefctlError(
                f"the token endpoint issued a '{parsed.token_type}' token; prefctl needs Bearer"
            )
        register_secret(parsed.access_token)
        if parsed.scope and parsed.scope != scope:
            log.debug("the token endpoint granted scope %s for %s", parsed.scope, scope)
        # Cached under the scope asked for, so the next request for it finds this token.
        return CachedToken.from_response(
            self.auth_url,
            self.credentials.client_id,
            scope,
            parsed.access_token,
            "Bearer",
            parsed.expires_in,
            self.clock.now(),
        )

    def _raise_token_error(
        self, status: int, error: str, description: str | None, hint: str | None = None
    ) -> None:
        # The description comes from the server: never let it carry a secret to the terminal,
        # nor a page of text.
        text = one_line(f"{error}: {description}" if description else error)
        message = f"the token endpoint refused the request (HTTP {status}): {text}"
        if error in AUTH_ERRORS:
            raise AuthError(message, hint=_HINTS.get(error))
        raise PrefctlError(message, hint=hint)


def _json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


REFUSED = "connection refused"

# What the operating system says when a connection fails → what a user reads.
_ERRNO_WORDS = {
    errno.ECONNREFUSED: REFUSED,
    errno.ECONNRESET: "the connection was reset",
    errno.ECONNABORTED: "the connection was aborted",
    errno.EPIPE: "the connection was closed while sending",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ENETUNREACH: "the network is unreachable",
    errno.ETIMEDOUT: "the connection timed out",
}
# httpx's own failures that carry no error of the operating system.
_HTTPX_WORDS: tuple[tuple[type[httpx.TransportError], str], ...] = (
    (httpx.RemoteProtocolError, "the server closed the connection without answering"),
    (httpx.ConnectTimeout, "the connection timed out"),
    (httpx.ReadTimeout, "no answer in time"),
    (httpx.ReadError, "the connection broke while reading the answer"),
    (httpx.WriteError, "the connection broke while sending the request"),
    (httpx.ProxyError, "the proxy refused the connection"),
)


def transport_error_reason(exc: BaseException) -> str:
    """Why a request failed in transit, in words ("connection refused", "the host name
    example.invalid is not known", "the server's TLS certificate is not trusted"), never the
    operating system's ``[Errno N]`` or an exception's class name."""
    text = str(exc) or type(exc).__name__
    host = tls_host_mismatch(exc)
    if host is not None:
        named = "the host" if host == "HOST" else f"the host {host}"
        return f"the server's TLS certificate does not cover {named}"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "the server's TLS certificate is not trusted"
    cause = _os_error(exc)
    if isinstance(cause, socket.gaierror):
        name = _request_host(exc)
        named = f"the host name {name}" if name else "the host name"
        if cause.errno == socket.EAI_AGAIN:
            return f"{named} could not be looked up (no answer from DNS)"
        return f"{named} is not known"
    if cause is not None and cause.errno in _ERRNO_WORDS:
        return _ERRNO_WORDS[cause.errno]
    for kind, words in _HTTPX_WORDS:
        if isinstance(exc, kind):
            return words
    if cause is not None and cause.strerror:
        return cause.strerror[:1].lower() + cause.strerror[1:]
    return redact(re.sub(r"^\[Errno -?\d+\] ", "", text.splitlines()[0]))


def cannot_reach(url: str, exc: BaseException) -> str:
    """ "nothing is listening at URL (connection refused)", or "cannot reach URL: REASON"."""
    reason = transport_error_reason(exc)
    if reason == REFUSED:
        return f"nothing is listening at {url} ({REFUSED})"
    return f"cannot reach {url}: {reason}"


def _os_error(exc: BaseException) -> OSError | None:
    """The operating system's error under ``exc`` (httpx wraps it, anyio wraps it once more in
    "All connection attempts failed"), or None."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and (cause.errno is not None or cause.strerror):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def _request_host(exc: BaseException) -> str | None:
    try:
        return str(exc.request.url.host) if isinstance(exc, httpx.RequestError) else None
    except RuntimeError:  # an error raised outside a request has none
        return None


def unreachable_hint(
    exc: BaseException | None, url: str, url_setting: str, *, connected: str | None = None
) -> str:
    """The hint after a request to ``url`` (from the profile's ``url_setting``) failed in transit:
    a TLS failure's remedy, the proxy it went through, ``connected`` (the hint when the server
    was reached, if the caller knows it was), whether the emulator runs (a loopback ``url``), or
    the setting and the network."""
    tls_hint = tls_failure_hint(exc, url_setting) if exc is not None else None
    if tls_hint is not None:
        return tls_hint
    proxy = proxy_variable(url)
    if proxy is not None:
        return (
            f"the request went through the proxy in {proxy}; check it, or list the host in NO_PROXY"
        )
    if connected is not None:
        return connected
    if is_loopback(url):
        return "is the emulator running? start it with 'prefctl emulator start'"
    return f"check {url_setting} in the profile and your network"


def tls_failure_hint(exc: BaseException, url_setting: str) -> str | None:
    """What to do about a failed TLS verification (None when ``exc`` is not one).

    A certificate for another host is not fixed by trusting its CA, so the two get different hints.
    """
    host = tls_host_mismatch(exc)
    if host is not None:
        return (
            f"set {url_setting} to a host the certificate covers, or give the server a "
            f"certificate for {host} (the emulator: prefctl certs issue --server {host})"
        )
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return "set ca_bundle in the profile to the CA that signed the server's certificate"
    return None


# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_HOST_MISMATCH_CODES = (62, 64)
_MISMATCH_TEXT = ("Hostname mismatch", "IP address mismatch")
_NOT_VALID_FOR = re.compile(r"not valid for '([^']+)'")


def tls_host_mismatch(exc: BaseException) -> str | None:
    """The host a server's certificate does not cover, when ``exc`` (an httpx error, or what it
    wraps) failed TLS verification for that reason; else None."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    text = ""
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLCertVerificationError):
            if cause.verify_code in _HOST_MISMATCH_CODES:
                text = str(cause.verify_message)
                break
            return None
        if any(marker in str(cause) for marker in _MISMATCH_TEXT):
            text = str(cause)
            break
        cause = cause.__cause__ or cause.__context__
    else:
        return None
    found = _NOT_VALID_FOR.search(text)
    if found:
        return found.group(1)
    try:
        return str(exc.request.url.host) if isinstance(exc, httpx.RequestError) else "HOST"
    except RuntimeError:  # an error raised outside a request has none
        return "HOST"
