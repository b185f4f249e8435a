"""The ``Service-Webhook`` signature (docs/webhooks.md).

    Service-Webhook: Timestamp=2026-11-21T19:20:30.123Z,Signature=<base64>

    Signature = base64(HMAC-SHA512(key = UTF-8(Hashkey),
                                   msg = UTF-8(ClientId + ":" + EventsClientSignatureUserId + ":" + Timestamp)))

The Timestamp is used exactly as sent. The header is emitted in the canonical form above and parsed
leniently (``,`` ``;`` or spaces between parameters, any order, case-insensitive names). Verification
compares in constant time and checks the Timestamp against the receiver's clock.

The signature does not cover the body: receivers should use HTTPS or mTLS and deduplicate on EventId.

The spec's sentence ("recomputes the signature, converts it to UTF-8 bytes and then to Base64")
admits two readings. ``raw`` (the default) is Base64 of the 64 digest bytes; ``hex`` is Base64 of
the digest's 128-character lowercase hex text. ``SigningCredentials.encoding`` picks one; when a
Signature fails but matches the other reading, the error says so.

    >>> creds = SigningCredentials("DEMO_CORP", "events-signer", "hashkey")
    >>> header = sign_header(creds, now)
    >>> verify(header, creds, now=now)          # raises SignatureError when it does not verify
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from prefctl.clock import utc_timestamp
from prefctl.errors import PrefctlError, UsageError

HEADER_NAME = "Service-Webhook"
DEFAULT_TOLERANCE_SECONDS = 300.0

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$"
)
_SEPARATORS = re.compile(r"[,;\s]+")
_CANONICAL = re.compile(r"Timestamp=([^,;\s]+),Signature=([^,;\s]+)\Z")
_EXTRA_DIGITS = re.compile(r"(\.\d{6})\d+")
# Exactly what ``sign_header`` produces: a millisecond UTC Timestamp and a 64-byte Signature. Fixed
# positions let ``Verifier.verify`` slice the header instead of going through the general parser.
_EXACT = re.compile(
    r"Timestamp=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z,"
    r"Signature=[A-Za-z0-9+/]{86}==\Z"
)
_EXACT_TIMESTAMP = slice(10, 34)
_EXACT_SIGNATURE = slice(45, None)
# HMAC (RFC 2104) pads the key to the hash's block size and XORs it with these bytes.
_SHA512_BLOCK = 128
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


RAW, HEX = "raw", "hex"
ENCODINGS = (RAW, HEX)
_ENCODING_WORDS = {RAW: "the raw digest", HEX: "the hex digest"}


@dataclass(frozen=True)
class SigningCredentials:
    """What both sides must share: the service client id, the signature user id, the Hashkey,
    and what the Signature is the Base64 of (``raw`` digest bytes or ``hex`` digest text)."""

    client_id: str
    signature_user_id: str
    hashkey: str = field(repr=False)
    encoding: str = RAW

    def __post_init__(self) -> None:
        check_encoding(self.encoding)


def check_encoding(encoding: str) -> None:
    """UsageError (exit 2) unless ``encoding`` is one of ``ENCODINGS``."""
    if encoding not in ENCODINGS:
        raise UsageError(f"signature encoding must be {' or '.join(ENCODINGS)}, not '{encoding}'")


class SignatureError(PrefctlError):
    """A signature that does not verify. ``reason`` is one of ``REASONS``."""

    REASONS = ("missing", "malformed", "bad_timestamp", "too_old", "in_future", "mismatch")

    def __init__(self, reason: str, message: str, *, matches_encoding: str | None = None) -> None:
        super().__init__(message, hint=None)
        self.reason = reason
        self.matches_encoding = matches_encoding  # a mismatch that the other encoding verifies


class SignatureHeader(NamedTuple):
    """A parsed header: the Timestamp and the Signature, as sent."""

    timestamp: str
    signature: str


def signing_string(client_id: str, signature_user_id: str, timestamp: str) -> str:
    """The exact string that is signed."""
    return f"{client_id}:{signature_user_id}:{timestamp}"


def sign(credentials: SigningCredentials, timestamp: str) -> str:
    """The base64 Signature for ``timestamp`` (used verbatim), in the credentials' encoding."""
    return base64.b64encode(Verifier(credentials).signed_bytes(timestamp)).decode("ascii")


def mismatch_message(matches: str | None) -> str:
    """The words of a ``mismatch``; ``matches`` is the other encoding when the Signature is that."""
    if matches is None:
        return "Signature does not match"
    return (
        f"Signature does not match; it matches Base64 of {_ENCODING_WORDS[matches]}: "
        f"try --signature-encoding {matches}"
    )


def format_header(timestamp: str, signature: str) -> str:
    """The canonical header value."""
    return f"Timestamp={timestamp},Signature={signature}"


def sign_header(credentials: SigningCredentials, now: datetime) -> str:
    """A fresh header value for an attempt made at ``now``."""
    timestamp = utc_timestamp(now)
    return format_header(timestamp, sign(credentials, timestamp))


def parse_header(value: str | None) -> SignatureHeader:
    """Parse a header value leniently; raises SignatureError (missing or malformed)."""
    if value is not None:
        # The canonical form, as prefctl and the service send it, parses without the general loop;
        # the result is the one the loop below would give.
        canonical = _CANONICAL.match(value)
        if canonical is not None:
            return SignatureHeader(timestamp=canonical[1], signature=canonical[2])
    if value is None or not value.strip():
        raise SignatureError("missing", f"no {HEADER_NAME} header")
    params: dict[str, str] = {}
    for part in _SEPARATORS.split(value.strip()):
        if not part:
            continue
        name, sep, param = part.partition("=")
        key = name.strip().lower()
        if not sep or not param or key in params:
            raise SignatureError("malformed", f"malformed {HEADER_NAME} header near '{part[:40]}'")
        params[key] = param
    missing = [name for name in ("timestamp", "signature") if name not in params]
    if missing:
        raise SignatureError(
            "malformed", f"malformed {HEADER_NAME} header: no {missing[0].capitalize()} parameter"
        )
    return SignatureHeader(timestamp=params["timestamp"], signature=params["signature"])


def parse_timestamp(timestamp: str) -> datetime:
    """An RFC 3339 timestamp with a zone; raises SignatureError (bad_timestamp)."""
    if not _RFC3339.match(timestamp):
        raise SignatureError("bad_timestamp", f"Timestamp '{timestamp[:40]}' is not RFC 3339")
    text = timestamp.replace("z", "Z").replace("t", "T")
    if len(text) > 27:  # fromisoformat takes at most 6 fractional digits
        text = _EXTRA_DIGITS.sub(r"\1", text)
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        raise SignatureError(
            "bad_timestamp", f"Timestamp '{timestamp[:40]}' is not a valid time"
        ) from None


def verify(
    header: str | None,
    credentials: SigningCredentials,
    *,
    now: datetime,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
) -> SignatureHeader:
    """Check a header value; returns it parsed, or raises SignatureError with the reason."""
    return Verifier(credentials, tolerance=tolerance).verify(header, now=now)


class Verifier:
    """Signs and verifies with one set of credentials, prepared once (a receiver's hot path).

    The HMAC key schedule and the constant ``ClientId:EventsClientSignatureUserId:`` prefix are
    absorbed once, into the inner and outer SHA-512 states of RFC 2104; each header then costs two
    state copies and two short updates, all in C (``hmac.HMAC.copy`` would add three Python calls).
    A header in the exact form ``sign_header`` produces is sliced rather than parsed; any other
    form goes through ``parse_header`` and ``parse_timestamp``, with the same outcome. ``verify()``
    and ``sign()`` above go through this class too, so there is one implementation.

        >>> verifier = Verifier(creds, tolerance=300)
        >>> verifier.verify(header, now=clock.now())     # raises SignatureError, or the parsed header
    """

    __slots__ = ("_hex", "_inner", "_outer", "tolerance")

    def __init__(
        self, credentials: SigningCredentials, *, tolerance: float = DEFAULT_TOLERANCE_SECONDS
    ) -> None:
        key = credentials.hashkey.encode()
        if len(key) > _SHA512_BLOCK:
            key = hashlib.sha512(key).digest()
        key = key.ljust(_SHA512_BLOCK, b"\0")
        prefix = signing_string(credentials.client_id, credentials.signature_user_id, "")
        self._inner = hashlib.sha512(key.translate(_IPAD) + prefix.encode())
        self._outer = hashlib.sha512(key.translate(_OPAD))
        self._hex = credentials.encoding == HEX
        self.tolerance = tolerance

    def digest(self, timestamp: str) -> bytes:
        """The raw HMAC-SHA512 for ``timestamp`` (used verbatim)."""
        inner = self._inner.copy()
        inner.update(timestamp.encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def signed_bytes(self, timestamp: str) -> bytes:
        """What the Signature is the Base64 of: the digest, or its hex text (``hex`` encoding)."""
        digest = self.digest(timestamp)
        return digest.hex().encode("ascii") if self._hex else digest

    def verify(self, header: str | None, *, now: datetime) -> SignatureHeader:
        """Check a header value against ``now``; returns it parsed or raises SignatureError."""
        if not self._hex and header is not None and _EXACT.match(header) is not None:
            timestamp, signature = header[_EXACT_TIMESTAMP], header[_EXACT_SIGNATURE]
            try:
                # The pattern admits only the RFC 3339 form that fromisoformat reads as UTC.
                moment = datetime.fromisoformat(timestamp)
            except ValueError:  # a shape that is not a date (month 13): the usual error
                moment = parse_timestamp(timestamp)
            # Only base64 characters and the padding got through the pattern.
            given = binascii.a2b_base64(signature)
        else:
            timestamp, signature = parse_header(header)
            moment = parse_timestamp(timestamp)
            try:
                given = base64.b64decode(signature, validate=True)
            except (binascii.Error, ValueError):
                given = b""
        digest = self.digest(timestamp)
        if not hmac.compare_digest(given, digest.hex().encode("ascii") if self._hex else digest):
            matches = self._other_match(given, digest)
            raise SignatureError("mismatch", mismatch_message(matches), matches_encoding=matches)
        tolerance = self.tolerance
        age = (now - moment).total_seconds()
        if age > tolerance:
            raise SignatureError(
                "too_old", f"Timestamp is {age:.0f} s old (tolerance {tolerance:g} s)"
            )
        if -age > tolerance:
            raise SignatureError(
                "in_future", f"Timestamp is {-age:.0f} s in the future (tolerance {tolerance:g} s)"
            )
        return SignatureHeader(timestamp, signature)

    def _other_match(self, given: bytes, digest: bytes) -> str | None:
        """The other encoding when ``given`` is ``digest`` in it (compared in constant time)."""
        other = digest if self._hex else digest.hex().encode("ascii")
        return (RAW if self._hex else HEX) if hmac.compare_digest(given, other) else None


@dataclass(frozen=True)
class Explanation:
    """Why a header verifies or not, step by step, without revealing the Hashkey."""

    ok: bool
    reason: str | None
    message: str
    timestamp: str | None = None
    signed_string: str | None = None
    expected_signature: str | None = None
    given_signature: str | None = None
    age_seconds: float | None = None
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS
    encoding: str = RAW
    matches_encoding: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "message": self.message,
            "timestamp": self.timestamp,
            "signed_string": self.signed_string,
            "expected_signature": self.expected_signature,
            "given_signature": self.given_signature,
            "age_seconds": self.age_seconds,
            "tolerance_seconds": self.tolerance_seconds,
            "encoding": self.encoding,
            "matches_encoding": self.matches_encoding,
        }


def explain(
    header: str | None,
    credentials: SigningCredentials,
    *,
    now: datetime,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
) -> Explanation:
    """Verify ``header`` and say why it passes or fails (for ``events verify --explain``)."""
    encoding = credentials.encoding
    try:
        parsed = parse_header(header)
    except SignatureError as exc:
        return Explanation(
            False, exc.reason, exc.message, tolerance_seconds=tolerance, encoding=encoding
        )
    signed = signing_string(credentials.client_id, credentials.signature_user_id, parsed.timestamp)
    expected = sign(credentials, parsed.timestamp)
    details: dict[str, object] = {
        "timestamp": parsed.timestamp,
        "signed_string": signed,
        "expected_signature": expected,
        "given_signature": parsed.signature,
        "tolerance_seconds": tolerance,
        "encoding": encoding,
    }
    try:
        moment = parse_timestamp(parsed.timestamp)
        details["age_seconds"] = round((now - moment).total_seconds(), 3)
        verify(header, credentials, now=now, tolerance=tolerance)
    except SignatureError as exc:
        details["matches_encoding"] = exc.matches_encoding
        return Explanation(False, exc.reason, exc.message, **details)  # type: ignore[arg-type]
    return Explanation(True, None, "signature verifies", **details)  # type: ignore[arg-type]
