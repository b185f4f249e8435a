"""Error answers of the REST API → one ``PrefctlError`` each, worded for one line on stderr.

    400 409 413 415, other 4xx, 5xx   PrefctlError      exit 1
    401 403                           AuthError         exit 3
    404                               NotFoundError     exit 4

An RFC 9457 problem body (``{type, title, status, detail, errors?: [{field, message}]}``) gives the
message: its title, its detail and every field error, then the status and the request::

    Invalid request body: 1 field is invalid: Emails[0].Address: … (HTTP 400, POST /profiles)

Anything the server wrote passes through ``logs.redact`` first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from prefctl.errors import AuthError, NotFoundError, PrefctlError
from prefctl.logs import redact

__all__ = ["error_for_response"]

_HINTS = {
    401: "the service refused the token twice; check the profile's credentials "
    "('prefctl token get --force' shows the token error)",
    403: "the token is for another account, or the API user (user_id) lacks the permission; "
    "ask the support team (emulator: 'prefctl emulator users add USER -P PERMISSION')",
    413: "the body is too large for the service; send less at once",
    415: "the service does not accept this content type",
}


def error_for_response(response: httpx.Response, method: str, path: str) -> PrefctlError:
    """The PrefctlError for a non-2xx answer, worded from its problem body when it has one."""
    status = response.status_code
    reason = _problem_text(response) or response.reason_phrase or "error"
    message = redact(f"{reason} (HTTP {status}, {method} {path})")
    hint = _HINTS.get(status)
    if status in (401, 403):
        return AuthError(message, hint=hint)
    if status == 404:
        return NotFoundError(message)
    if status >= 500:
        hint = "the service failed; try again, and report it if it persists"
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
        if isinstance(value, str) and value.strip() and value.strip() not in parts:
            parts.append(" ".join(value.split()))
    errors = body.get("errors")
    if isinstance(errors, list):
        fields = [_field_error(error) for error in errors if isinstance(error, dict)]
        if fields:
            parts.append("; ".join(fields))
    # Token-endpoint style errors ({error, error_description}) also reach here behind proxies.
    if not parts and isinstance(body.get("error"), str):
        parts.append(str(body["error"]))
        if isinstance(body.get("error_description"), str):
            parts.append(str(body["error_description"]))
    return ": ".join(parts) or None


def _field_error(error: Mapping[str, Any]) -> str:
    field = str(error.get("field") or "").strip()
    message = " ".join(str(error.get("message") or "invalid").split())
    return f"{field}: {message}" if field else message
