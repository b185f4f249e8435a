"""The receiver's hot-path ``Verifier`` agrees with the general header parser and ``verify``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from prefctl.webhooks import signature
from prefctl.webhooks.signature import (
    SignatureError,
    SigningCredentials,
    Verifier,
    sign,
    sign_header,
    verify,
)
from tests.receiver.asgi import CREDS, NOW

param_text = st.text(min_size=0, max_size=40)


def parsed(header: str) -> object:
    try:
        return signature.parse_header(header)
    except SignatureError as exc:
        return exc.reason


@given(timestamp=param_text, value=param_text)
def test_canonical_fast_path_parses_like_the_general_loop(timestamp: str, value: str) -> None:
    header = f"Timestamp={timestamp},Signature={value}"
    # A leading space skips the fast path and leaves the general loop's result unchanged.
    assert parsed(header) == parsed(" " + header)


@given(offset=st.integers(min_value=-400, max_value=400))
def test_verifier_and_verify_agree(offset: int) -> None:
    header = sign_header(CREDS, NOW + timedelta(seconds=offset))
    verifier = Verifier(CREDS, tolerance=300)

    def outcome(check: object) -> str:
        try:
            check()  # type: ignore[operator]
        except SignatureError as exc:
            return exc.reason
        return "ok"

    assert outcome(lambda: verifier.verify(header, now=NOW)) == outcome(
        lambda: verify(header, CREDS, now=NOW, tolerance=300)
    )


def test_verifier_digest_is_the_published_signature() -> None:
    import base64

    timestamp = "2026-11-21T19:20:30.123Z"
    assert base64.b64encode(Verifier(CREDS).digest(timestamp)).decode() == sign(CREDS, timestamp)


digits = st.text(alphabet="0123456789", min_size=1, max_size=1)
base64_text = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    min_size=86,
    max_size=86,
)


@given(
    when=st.datetimes(timezones=st.just(UTC)),
    month=st.integers(min_value=0, max_value=19),
    day=st.integers(min_value=0, max_value=39),
    value=base64_text,
    real=st.booleans(),
)
def test_verifier_exact_header_shortcut_gives_the_general_outcome(
    when: datetime, month: int, day: int, value: str, real: bool
) -> None:
    # The exact form sign_header emits (sliced, not parsed) may still hold an impossible date.
    timestamp = f"{when:%Y}-{month:02d}-{day:02d}T{when:%H:%M:%S}.{when.microsecond // 1000:03d}Z"
    signature = sign(CREDS, timestamp) if real else value + "=="
    header = f"Timestamp={timestamp},Signature={signature}"
    verifier = Verifier(CREDS, tolerance=10**9)

    def outcome(text: str) -> object:
        try:
            return verifier.verify(text, now=NOW)
        except SignatureError as exc:
            return (exc.reason, exc.message)

    # A leading space takes the general parser; both must agree on result and message.
    assert outcome(header) == outcome(" " + header)


def test_verifier_long_hashkey_is_hashed_first_as_in_rfc_2104() -> None:
    import hashlib
    import hmac

    creds = SigningCredentials("DEMO_CORP", "events-signer", "k" * 300)
    timestamp = "2026-11-21T19:20:30.123Z"
    expected = hmac.new(
        creds.hashkey.encode(), f"DEMO_CORP:events-signer:{timestamp}".encode(), hashlib.sha512
    ).digest()
    assert Verifier(creds).digest(timestamp) == expected
