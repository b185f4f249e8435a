"""What the service sends a webhook receiver, built for a user's own tests: signed headers and a
validation handshake. The signature and the handshake come from ``prefctl.webhooks``, the same
code the emulator's dispatcher sends them with."""

from __future__ import annotations

import json
import random
from datetime import datetime
from typing import Any

from prefctl.clock import SystemClock, utc_timestamp
from prefctl.webhooks.envelope import new_event_id
from prefctl.webhooks.handshake import (
    build_handshake,
    new_validation_code,
    new_validation_token,
    validation_url,
)
from prefctl.webhooks.signature import HEADER_NAME, SigningCredentials, format_header, sign

__all__ = ["EXAMPLE_API_URL", "EXAMPLE_CLIENT_ID", "sign_headers", "validation_request"]

JSON = "application/json"
EXAMPLE_CLIENT_ID = "DEMO_CORP"
EXAMPLE_API_URL = "http://127.0.0.1:8750/api/v1"


def sign_headers(
    body: bytes,
    *,
    hashkey: str,
    client_id: str,
    user_id: str,
    timestamp: datetime | str | None = None,
) -> dict[str, str]:
    """The ``Service-Webhook`` and ``Content-Type`` headers the service sends with ``body``.

    ``client_id`` is the service client id, ``user_id`` the EventsClientSignatureUserId.
    ``timestamp``: now when None; a datetime is written as RFC 3339 UTC with milliseconds; a
    string is signed exactly as given (to test a stale or malformed Timestamp). The signature does
    not cover the body (the service's scheme); ``body`` is taken so that the call reads like the
    request it signs, and must be the bytes sent.
    """
    if not isinstance(body, bytes | bytearray):
        raise TypeError(f"body must be the bytes sent, not {type(body).__name__}")
    if timestamp is None:
        stamp = utc_timestamp(SystemClock().now())
    elif isinstance(timestamp, datetime):
        stamp = utc_timestamp(timestamp)
    else:
        stamp = timestamp
    credentials = SigningCredentials(client_id, user_id, hashkey)
    return {HEADER_NAME: format_header(stamp, sign(credentials, stamp)), "Content-Type": JSON}


def validation_request(
    code: str | None = None,
    *,
    client_id: str = EXAMPLE_CLIENT_ID,
    subscription_id: int = 1,
    api_url: str = EXAMPLE_API_URL,
) -> tuple[bytes, dict[str, str]]:
    """A validation handshake as the service POSTs it: (body, headers). No signature header.

    ``code`` is the validationCode (a fresh random one when None; read it back from
    ``json.loads(body)["data"]["validationCode"]``). A receiver answers 200 with
    ``{"validationResponse": code}``.
    """
    rng = random.SystemRandom()
    message: dict[str, Any] = build_handshake(
        event_id=new_event_id(rng),
        subscription_id=subscription_id,
        client_id=client_id,
        event_time=SystemClock().now(),
        validation_code=code if code is not None else new_validation_code(rng),
        validation_url=validation_url(api_url, new_validation_token(rng)),
    )
    return json.dumps(message).encode("utf-8"), {"Content-Type": JSON}
