"""Two ``Service-Webhook`` headers (issue 18, point 5): refused with 401 and the reason, on the
receiver's own HTTP path and through the ASGI app alike, whichever of the two is the valid one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from prefctl.receiver import ReceiverConfig, RunningReceiver, start_in_thread
from prefctl.receiver.verdict import SignatureResult
from prefctl.webhooks.signature import sign_header
from tests.receiver.asgi import CREDS, event_body
from tests.receiver.test_protocol import Connection

REASON = "the request has 2 Service-Webhook headers: send exactly one"
GARBAGE = "Timestamp=2020-01-01T00:00:00.000Z,Signature=AAAA"


@pytest.fixture(scope="module")
def receiver() -> Iterator[RunningReceiver]:
    with start_in_thread(ReceiverConfig(port=0, credentials=CREDS)) as running:
        yield running


def _request(target: str, event_id: str, signatures: list[str]) -> bytes:
    body = event_body(event_id)
    lines = [
        f"POST {target} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ] + [f"Service-Webhook: {value}" for value in signatures]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# The protocol answers /webhooks itself; a query string sends the request through the ASGI app.
@pytest.mark.parametrize("target", ["/webhooks", "/webhooks?via=asgi"])
@pytest.mark.parametrize("order", ["garbage then valid", "valid then garbage", "valid twice"])
def test_receiver_two_signature_headers_are_401_with_the_reason(
    receiver: RunningReceiver, target: str, order: str
) -> None:
    valid = sign_header(CREDS, datetime.now(UTC))
    signatures = {
        "garbage then valid": [GARBAGE, valid],
        "valid then garbage": [valid, GARBAGE],
        "valid twice": [valid, valid],
    }[order]
    event_id = f"evt-{order}-{target}".replace(" ", "-")
    connection = Connection(receiver.port)
    try:
        connection.send(_request(target, event_id, signatures))
        answer = connection.answer()
        connection.send(_request(target, event_id + "-single", [valid]))
        single = connection.answer()
    finally:
        connection.close()

    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401 ")
    assert json.loads(body) == {"error": "repeated_header", "detail": REASON}
    assert single.startswith(b"HTTP/1.1 200 ")
    refused, accepted = receiver.wait_for(2)
    assert (refused.status, refused.reason, refused.signature) == (
        401,
        "repeated_header",
        SignatureResult.INVALID,
    )
    assert (accepted.status, accepted.event_id) == (200, event_id + "-single")
    assert httpx.get(receiver.url + "/healthz").status_code == 200


def test_receiver_without_verification_still_refuses_two_signature_headers() -> None:
    with start_in_thread(ReceiverConfig(port=0, verify=False)) as running:
        connection = Connection(running.port)
        try:
            connection.send(_request("/webhooks", "evt-1", [GARBAGE, GARBAGE]))
            answer = connection.answer()
        finally:
            connection.close()
    assert answer.startswith(b"HTTP/1.1 401 ")
