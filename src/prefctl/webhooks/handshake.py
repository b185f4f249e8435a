"""The validation handshake (spec "Validation handshake message"): the message and the reply.

When a subscription is created, or its Url changes, the service POSTs a handshake without a
signature header. Spec: "Same schema as an event, except the data object is named data", so it
carries every envelope field of an event (``Entity`` is ``"Subscription"``, a decision of ours;
no ``PreviousData``, which only the entities the spec names carry)::

    {"EventId": "…", "EventType": "subscription.validation", "Entity": "Subscription",
     "SubscriptionId": 12, "ClientId": "DEMO_CORP", "ProfileId": null, "EventTime": "…",
     "OriginalEventTime": "…",
     "data": {"validationCode": "…", "validationUrl": "{api_url}/validation/{token}"}}

(``data`` is camelCase here, unlike ``Data`` in events.) The endpoint answers either

- ``200`` with ``{"validationResponse": "<validationCode>"}``: validated at once, or
- ``200`` without the code: the subscription awaits a GET of ``validationUrl`` (5 minutes).

Anything else (202 included, or a different code) is a failed attempt. ``classify_reply`` makes
that decision for the dispatcher and for ``prefctl endpoint check``; ``extract_validation_response``
reads the code out of a reply body. Codes and tokens come from an injected ``random.Random`` (pass a
``random.SystemRandom()`` where they must be unguessable).

    >>> handshake = new_handshake(rng, subscription_id=12, client_id="DEMO_CORP",
    ...                           api_url="http://127.0.0.1:8750/api/v1", now=clock.now())
    >>> classify_reply(200, b'{"validationResponse": "%s"}' % handshake.code.encode(), handshake.code)
    ReplyVerdict(outcome=<ReplyOutcome.VALIDATED: 'validated'>, message='…')
"""

from __future__ import annotations

import hmac
import random
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson

from prefctl.webhooks.envelope import new_event_id, wire_time

__all__ = [
    "REPLY_FIELD",
    "VALIDATION_ENTITY",
    "VALIDATION_EVENT_TYPE",
    "Handshake",
    "ReplyOutcome",
    "ReplyVerdict",
    "build_handshake",
    "build_reply",
    "classify_reply",
    "extract_validation_response",
    "is_handshake",
    "new_handshake",
    "new_validation_code",
    "new_validation_token",
    "validation_fields",
    "validation_url",
]

VALIDATION_EVENT_TYPE = "subscription.validation"
VALIDATION_ENTITY = "Subscription"
REPLY_FIELD = "validationResponse"

_ALPHABET = string.ascii_letters + string.digits
CODE_LENGTH = 32
TOKEN_LENGTH = 40


def new_validation_code(rng: random.Random) -> str:
    """A validation code: 32 letters and digits (about 190 bits) drawn from ``rng``."""
    return "".join(rng.choices(_ALPHABET, k=CODE_LENGTH))


def new_validation_token(rng: random.Random) -> str:
    """The secret path segment of a validationUrl: 40 letters and digits drawn from ``rng``."""
    return "".join(rng.choices(_ALPHABET, k=TOKEN_LENGTH))


def validation_url(api_url: str, token: str) -> str:
    """``{api_url}/validation/{token}``: where a manual validation GETs (docs/api.md)."""
    return f"{api_url.rstrip('/')}/validation/{token}"


def build_handshake(
    *,
    event_id: str,
    subscription_id: int,
    client_id: str,
    event_time: datetime | str,
    validation_code: str,
    validation_url: str,
    original_event_time: datetime | str | None = None,
) -> dict[str, Any]:
    """The handshake message body; ``original_event_time`` defaults to ``event_time``."""
    sent = wire_time(event_time)
    return {
        "EventId": event_id,
        "EventType": VALIDATION_EVENT_TYPE,
        "Entity": VALIDATION_ENTITY,
        "SubscriptionId": subscription_id,
        "ClientId": client_id,
        "ProfileId": None,
        "EventTime": sent,
        "OriginalEventTime": sent
        if original_event_time is None
        else wire_time(original_event_time),
        "data": {"validationCode": validation_code, "validationUrl": validation_url},
    }


@dataclass(frozen=True)
class Handshake:
    """A handshake ready to send: the message, and the code and token it was built with."""

    message: dict[str, Any]
    code: str
    token: str
    url: str


def new_handshake(
    rng: random.Random,
    *,
    subscription_id: int,
    client_id: str,
    api_url: str,
    now: datetime,
) -> Handshake:
    """A fresh handshake: new EventId, code and validation token, all drawn from ``rng``."""
    code = new_validation_code(rng)
    token = new_validation_token(rng)
    url = validation_url(api_url, token)
    message = build_handshake(
        event_id=new_event_id(rng),
        subscription_id=subscription_id,
        client_id=client_id,
        event_time=now,
        validation_code=code,
        validation_url=url,
    )
    return Handshake(message=message, code=code, token=token, url=url)


def is_handshake(message: Mapping[str, Any]) -> bool:
    """Whether a received message is a validation handshake rather than an event."""
    return message.get("EventType") == VALIDATION_EVENT_TYPE


def validation_fields(message: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(validationCode, validationUrl)`` of a received handshake; None where absent or not text."""
    data = message.get("data")
    if not isinstance(data, Mapping):
        return None, None
    code, url = data.get("validationCode"), data.get("validationUrl")
    return (
        code if isinstance(code, str) and code else None,
        url if isinstance(url, str) and url else None,
    )


def build_reply(code: str) -> dict[str, str]:
    """The synchronous answer to a handshake: ``{"validationResponse": code}``."""
    return {REPLY_FIELD: code}


def extract_validation_response(body: bytes | str | None) -> str | None:
    """The ``validationResponse`` of a reply body, or None when the body carries none.

    The body must be a JSON object whose ``validationResponse`` (exact name) is a non-empty string;
    anything else (no body, not JSON, another shape) is "no code".
    """
    if not body:
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    value = parsed.get(REPLY_FIELD)
    return value if isinstance(value, str) and value else None


class ReplyOutcome(StrEnum):
    """What a handshake reply means to the service."""

    VALIDATED = "validated"  # 200 with the code: provisioning succeeds
    MANUAL = "manual"  # 200 without a code: awaits a GET of validationUrl
    WRONG_CODE = "wrong_code"  # 200 with another code: a failed attempt
    REJECTED = "rejected"  # not 200 (202 included): a failed attempt


@dataclass(frozen=True)
class ReplyVerdict:
    """The outcome of a handshake reply and a one-line explanation."""

    outcome: ReplyOutcome
    message: str


def classify_reply(status: int, body: bytes | str | None, expected_code: str) -> ReplyVerdict:
    """Judge a handshake reply as the service does (docs/subscriptions.md): only HTTP 200 counts."""
    if status != 200:
        hint = " (202 is not accepted: only 200 is)" if status == 202 else ""
        return ReplyVerdict(ReplyOutcome.REJECTED, f"answered {status}, not 200{hint}")
    code = extract_validation_response(body)
    if code is None:
        return ReplyVerdict(
            ReplyOutcome.MANUAL,
            f"answered 200 without {REPLY_FIELD}: awaits a GET of validationUrl",
        )
    if not hmac.compare_digest(code.encode(), expected_code.encode()):
        return ReplyVerdict(
            ReplyOutcome.WRONG_CODE,
            f"{REPLY_FIELD} {_shorten(code)!r} is not the validationCode sent",
        )
    return ReplyVerdict(ReplyOutcome.VALIDATED, f"answered 200 with the right {REPLY_FIELD}")


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
