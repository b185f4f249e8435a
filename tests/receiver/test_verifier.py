"""The receiver's hot-path ``Verifier`` agrees with the general header parser and ``verify``."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from prefctl.webhooks import signature
from prefctl.webhooks.signature import SignatureError, Verifier, sign, sign_header, verify
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
