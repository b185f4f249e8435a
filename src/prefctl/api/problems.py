"""Error answers of the REST API → one ``PrefctlError`` each, worded for one line on stderr.

    3xx                               PrefctlError      exit 1  names the Location; never followed
    400 409 413 415 429, other 4xx    PrefctlError      exit 1
    5xx                               PrefctlError      exit 1
    401 403                           AuthError         exit 3
    404                               NotFoundError     exit 4

An RFC 9457 problem body (``{type, title, status, detail, errors?: [{field, message}]}``) gives the
message: its title, its detail and the field errors, then the status and the request::

    Invalid request body: 1 field is invalid: Emails[0].Address: … (HTTP 400, POST /profiles)

Without one, the status's reason phrase does, followed by the first line of a ``text/plain`` body
(a proxy's HTML page is never shown). What the server wrote is bounded (``MAX_FIELD_ERRORS``, and
``http_policy.one_line`` for each piece) and passes through ``logs.redact``. A 429 or 503 that
retries did not get past says how many tries were made (``http_policy.retry_hint``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from prefctl.auth.http_policy import RetryState, one_line, redirect_target, retry_hint
from prefctl.errors import AuthError, NotFoundError, PrefctlError
from prefctl.logs import redact

__all__ = ["MAX_FIELD_ERRORS", "error_for_response"]

MAX_FIELD_ERRORS = 5
_MESSAGE_LIMIT = 1000

_HINTS = {
    401: "the service refused the token twice; check the profile's credentials "
    "('prefctl token get --force' shows the token error)",
    403: "the token is for another account, or the API user (user_id) lacks the permission; "
    "ask the support team (emulator: 'prefctl emulator users add USER -P PERMISSION')",
    413: "the body is too large for the service; send less at once",
    415: "the service does not accept this content type",
}
_REDIRECT_HINT = (
    "if the service moved, set api_url to its new address; prefctl does not follow redirects, "
    "so the token never goes to another address"
)
_SERVER_HINT = (
    "the service, or a proxy in front of it, failed; try again, and report it if it persists"
)


def error_for_response(
    response: httpx.Response, method: str, path: str, retry: RetryState | None = None
) -> PrefctlError:
    """The PrefctlError for a non-2xx answer, worded from its problem body when it has one.
    ``retry``: how the request's retries went (for a 429 or 503)."""
    status = response.status_code
    target = redirect_target(response)
    if target is not None:
        return PrefctlError(
            f"the REST API redirected {method} {path} to {one_line(target)} (HTTP {status})",
            hint=_REDIRECT_HINT,
        )
    reason = _problem_text(response) or _plain_text(response)
    message = redact(f"{one_line(reason, _MESSAGE_LIMIT)} (HTTP {status}, {method} {path})")
    hint = _HINTS.get(status)
    if status in (401, 403):
        return AuthError(message, hint=hint)
    if status == 404:
        return NotFoundError(message)
    hint = retry_hint(status, retry or RetryState()) or hint
    if status >= 500 and hint is None:
        hint = _SERVER_HINT
    return PrefctlError(message, hint=hint)


def _problem_text(response: httpx.Response) -> str | None:
    """``title: detail: field: message; field: message`` from an RFC 9457 body, else None."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    parts: list[str] = []
    for key in ("title", "detail"):
        value = body.get(key)
        if isinstance(value, str) and value.strip():
            text = one_line(value)
            if text not in parts:
                parts.append(text)
    errors = body.get("errors")
    if isinstance(errors, list):
        fields = [_field_error(error) for error in errors if isinstance(error, dict)]
        if len(fields) > MAX_FIELD_ERRORS:
            more = len(fields) - MAX_FIELD_ERRORS
            fields = [*fields[:MAX_FIELD_ERRORS], f"and {more} more"]
        if fields:
            parts.append("; ".join(fields))
    # Token-endpoint style errors ({error, error_description}) also reach here behind proxies.
    if not parts and isinstance(body.get("error"), str):
        parts.append(one_line(body["error"]))
        if isinstance(body.get("error_description"), str):
            parts.append(one_line(body["error_description"]))
    return ": ".join(parts) or None


def _plain_text(response: httpx.Response) -> str:
    """The reason phrase, and the first line of a ``text/plain`` body (a service's or proxy's
    own words) when it says more: ``Internal Server Error: database is down``."""
    phrase = response.reason_phrase or "error"
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "text/plain":
        return phrase
    try:
        text = response.text
    except (UnicodeDecodeError, LookupError):
        return phrase
    first = one_line(next((line for line in text.splitlines() if line.strip()), ""))
    if not first or first.lower() in (phrase.lower(), f"{response.status_code} {phrase}".lower()):
        return phrase
    return f"{phrase}: {first}"


def _field_error(error: Mapping[str, Any]) -> str:
    field = one_line(str(error.get("field") or ""), 100)
    message = one_line(str(error.get("message") or "invalid"))
    return f"{field}: {message}" if field else message
