"""Reading what a deployment answered or sent, for the cases of ``prefctl service check``: JSON
bodies, JWT claims, the receiver's requests shown as evidence (secrets masked), and the envelope
every message of the spec carries."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import httpx

from prefctl.logs import redact
from prefctl.receiver import Verdict

BODY_LIMIT = 600  # characters of an answer kept as evidence

ENVELOPE_KEYS = ("EventId", "EventType", "SubscriptionId", "ClientId", "ProfileId")
TIME_KEYS = ("EventTime", "OriginalEventTime")


def json_body(response: httpx.Response) -> Any:
    """The response's JSON, or None when it is not JSON."""
    try:
        return response.json()
    except ValueError:
        return None


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def missing(value: Any, keys: tuple[str, ...]) -> list[str]:
    """The ``keys`` that ``value`` lacks (all of them when it is not an object)."""
    if not isinstance(value, dict):
        return list(keys)
    return [key for key in keys if key not in value]


def shown_response(response: httpx.Response) -> str:
    """The answer as evidence: status, content type and the start of the body, secrets masked."""
    kind = response.headers.get("content-type", "no content type")
    text = response.text
    if len(text) > BODY_LIMIT:
        text = text[:BODY_LIMIT] + "…"
    return redact(f"HTTP {response.status_code} ({kind}) {text}".strip())


def jwt_claims(token: Any) -> dict[str, Any] | None:
    """The claims of a JWT, unverified; None when ``token`` is not one."""
    if not isinstance(token, str) or token.count(".") != 2:
        return None
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) else None


def message_of(verdict: Verdict) -> dict[str, Any] | None:
    """The JSON object a request to the receiver carried, or None."""
    try:
        message = json.loads(verdict.body or b"")
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def header(verdict: Verdict, name: str) -> str | None:
    wanted = name.lower().encode()
    for key, value in verdict.headers or ():
        if key.lower() == wanted:
            return value.decode("latin-1")
    return None


def shown_request(verdict: Verdict) -> str:
    """The request as evidence: its headers of interest and its body, secrets masked."""
    headers: Mapping[str, str] = {
        key.decode("latin-1"): value.decode("latin-1") for key, value in verdict.headers or ()
    }
    shown = {k: v for k, v in headers.items() if k.lower() in ("content-type", "service-webhook")}
    body = (verdict.body or b"").decode("utf-8", "replace")
    if len(body) > BODY_LIMIT:
        body = body[:BODY_LIMIT] + "…"
    return redact(f"POST {verdict.path} {json.dumps(shown)} {body}")


def envelope_problems(message: Mapping[str, Any], *, expected_type: str | None) -> list[str]:
    """What the message's envelope lacks or gets wrong (keys, EventType, time format)."""
    problems = [f"no {key}" for key in ENVELOPE_KEYS + TIME_KEYS if key not in message]
    if expected_type is not None and message.get("EventType") != expected_type:
        problems.append(f"EventType {message.get('EventType')!r}, not {expected_type!r}")
    for key in TIME_KEYS:
        value = message.get(key)
        if isinstance(value, str) and not is_rfc3339_ms(value):
            problems.append(f"{key} {value!r} is not RFC 3339 UTC with milliseconds")
    return problems


def is_rfc3339_ms(value: str) -> bool:
    if not value.endswith("Z") or len(value) != 24 or value[19] != ".":
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True
