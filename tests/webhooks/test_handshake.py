"""The validation handshake (docs/webhooks.md, docs/subscriptions.md): the message, the reply, how a reply is judged."""

from __future__ import annotations

import random
import string
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from prefctl.models.event import ValidationHandshake, ValidationReply
from prefctl.webhooks.envelope import encode
from prefctl.webhooks.handshake import (
    ReplyOutcome,
    build_reply,
    classify_reply,
    extract_validation_response,
    is_handshake,
    new_handshake,
    new_validation_code,
    validation_fields,
)

NOW = datetime(2026, 11, 21, 19, 20, 30, 123000, tzinfo=UTC)
API = "http://127.0.0.1:8750/api/v1/"


def _handshake(seed: int = 1):
    return new_handshake(
        random.Random(seed), subscription_id=12, client_id="DEMO_CORP", api_url=API, now=NOW
    )


def test_new_handshake_message_has_the_design_shape() -> None:
    handshake = _handshake()
    message = handshake.message
    # Spec: "Same schema as an event, except the data object is named data".
    assert list(message) == [
        "EventId",
        "EventType",
        "Entity",
        "SubscriptionId",
        "ClientId",
        "ProfileId",
        "EventTime",
        "OriginalEventTime",
        "data",
    ]
    assert message["EventType"] == "subscription.validation"
    assert message["Entity"] == "Subscription"
    assert message["ProfileId"] is None
    assert message["EventTime"] == message["OriginalEventTime"] == "2026-11-21T19:20:30.123Z"
    assert message["data"] == {"validationCode": handshake.code, "validationUrl": handshake.url}
    assert handshake.url == f"http://127.0.0.1:8750/api/v1/validation/{handshake.token}"


def test_new_handshake_is_repeatable_with_a_seed_and_fresh_otherwise() -> None:
    assert _handshake(3) == _handshake(3)
    rng = random.Random(3)
    codes = {new_validation_code(rng) for _ in range(50)}
    assert len(codes) == 50
    assert all(len(c) == 32 and set(c) <= set(string.ascii_letters + string.digits) for c in codes)


def test_model_validates_the_message_and_wire_keeps_profile_id_null() -> None:
    message = _handshake().message
    model = ValidationHandshake.model_validate(message)
    assert model.data.validation_code == message["data"]["validationCode"]
    assert model.wire() == message
    assert b'"ProfileId":null' in encode(model.wire())


@pytest.mark.parametrize(
    "change",
    [
        {"EventType": "contacts.email.added"},
        {"data": {"validationUrl": "http://x/validation/t"}},
        {"data": {"validationCode": "", "validationUrl": "http://x/validation/t"}},
        {"ProfileId": 1001},
    ],
)
def test_model_rejects_a_message_that_is_not_a_handshake(change: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ValidationHandshake.model_validate({**_handshake().message, **change})


def test_is_handshake_and_validation_fields_read_a_received_message() -> None:
    handshake = _handshake()
    assert is_handshake(handshake.message)
    assert validation_fields(handshake.message) == (handshake.code, handshake.url)
    assert not is_handshake({"EventType": "tag.added"})
    assert validation_fields({"data": "x"}) == (None, None)
    assert validation_fields({"data": {"validationCode": 7, "validationUrl": ""}}) == (None, None)


def test_build_reply_round_trips_through_extract_and_the_model() -> None:
    body = encode(build_reply("abc123"))
    assert body == b'{"validationResponse":"abc123"}'
    assert extract_validation_response(body) == "abc123"
    assert ValidationReply.model_validate_json(body).validation_response == "abc123"


@pytest.mark.parametrize(
    "body",
    [
        None,
        b"",
        b"abc123",
        b"not json",
        b'["abc123"]',
        b'{"validationResponse": 123}',
        b'{"validationResponse": ""}',
        b'{"ValidationResponse": "abc123"}',
        b'{"data": {"validationResponse": "abc123"}}',
        b"\xff\xfe",
    ],
)
def test_extract_validation_response_finds_no_code_in_other_shapes(body: bytes | None) -> None:
    assert extract_validation_response(body) is None


def test_extract_validation_response_accepts_text_and_extra_members() -> None:
    assert extract_validation_response('{"ok": true, "validationResponse": "c"}') == "c"


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (200, b'{"validationResponse": "right"}', ReplyOutcome.VALIDATED),
        (200, b"", ReplyOutcome.MANUAL),
        (200, b'{"status": "ok"}', ReplyOutcome.MANUAL),
        (200, b'{"validationResponse": "wrong"}', ReplyOutcome.WRONG_CODE),
        (202, b'{"validationResponse": "right"}', ReplyOutcome.REJECTED),
        (500, b"", ReplyOutcome.REJECTED),
        (301, b"", ReplyOutcome.REJECTED),
    ],
)
def test_classify_reply_judges_as_the_service(
    status: int, body: bytes, outcome: ReplyOutcome
) -> None:
    assert classify_reply(status, body, "right").outcome is outcome


def test_classify_reply_says_202_is_not_accepted() -> None:
    verdict = classify_reply(202, b"", "code")
    assert "202" in verdict.message
    assert "only 200" in verdict.message


@given(st.binary(max_size=200))
def test_extract_validation_response_never_raises(body: bytes) -> None:
    result = extract_validation_response(body)
    assert result is None or isinstance(result, str)
    classify_reply(200, body, "code")
