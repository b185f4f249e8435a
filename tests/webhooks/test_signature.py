from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefctl.webhooks.signature import (
    SignatureError,
    SigningCredentials,
    explain,
    parse_header,
    sign,
    sign_header,
    verify,
)

CREDS = SigningCredentials("DEMO_CORP", "events-signer", "test-hashkey")
NOW = datetime(2026, 11, 21, 19, 20, 30, 123000, tzinfo=UTC)

# Published in docs/webhooks.md: keep in sync.
VECTOR_TIMESTAMP = "2026-11-21T19:20:30.123Z"


def test_sign_header_is_canonical_and_verifies() -> None:
    header = sign_header(CREDS, NOW)
    assert header.startswith(f"Timestamp={VECTOR_TIMESTAMP},Signature=")
    assert verify(header, CREDS, now=NOW).timestamp == VECTOR_TIMESTAMP


@pytest.mark.parametrize(
    "template",
    [
        "Timestamp={t},Signature={s}",
        "Signature={s};Timestamp={t}",
        "timestamp={t} signature={s}",
        "  TIMESTAMP={t} ,  SIGNATURE={s} ",
    ],
)
def test_parse_header_is_lenient_about_separators_order_and_case(template: str) -> None:
    signature = sign(CREDS, VECTOR_TIMESTAMP)
    header = template.format(t=VECTOR_TIMESTAMP, s=signature)
    assert verify(header, CREDS, now=NOW).signature == signature


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("Timestamp=2026-11-21T19:20:30.123Z", "malformed"),
        ("garbage", "malformed"),
        ("Timestamp=yesterday,Signature=abc=", "bad_timestamp"),
        ("Timestamp=2026-11-21T19:20:30,Signature=abc=", "bad_timestamp"),
    ],
)
def test_verify_rejects_with_reason(header: str | None, reason: str) -> None:
    with pytest.raises(SignatureError) as info:
        verify(header, CREDS, now=NOW)
    assert info.value.reason == reason


def test_verify_rejects_stale_and_future_timestamps() -> None:
    old = sign_header(CREDS, NOW - timedelta(seconds=301))
    future = sign_header(CREDS, NOW + timedelta(seconds=301))
    with pytest.raises(SignatureError, match="old") as info:
        verify(old, CREDS, now=NOW)
    assert info.value.reason == "too_old"
    with pytest.raises(SignatureError) as info:
        verify(future, CREDS, now=NOW)
    assert info.value.reason == "in_future"
    assert verify(old, CREDS, now=NOW, tolerance=400)


def test_verify_rejects_altered_timestamp_or_other_key() -> None:
    header = sign_header(CREDS, NOW)
    altered = header.replace("30.123Z", "31.123Z")
    with pytest.raises(SignatureError) as info:
        verify(altered, CREDS, now=NOW)
    assert info.value.reason == "mismatch"
    other = SigningCredentials("DEMO_CORP", "events-signer", "another-key")
    with pytest.raises(SignatureError):
        verify(header, other, now=NOW)


def test_explain_shows_signed_string_but_never_the_hashkey() -> None:
    header = sign_header(CREDS, NOW).replace("30.123Z", "31.123Z")
    result = explain(header, CREDS, now=NOW)
    assert not result.ok
    assert result.reason == "mismatch"
    assert result.signed_string == "DEMO_CORP:events-signer:2026-11-21T19:20:31.123Z"
    assert "test-hashkey" not in repr(result.as_dict())
    assert "test-hashkey" not in repr(CREDS)


@given(st.text(max_size=300))
def test_parse_header_never_raises_anything_but_signature_error(text: str) -> None:
    try:
        parsed = parse_header(text)
        verify(text, CREDS, now=NOW)
    except SignatureError:
        return
    assert parsed.timestamp
