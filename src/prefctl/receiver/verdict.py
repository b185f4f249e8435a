"""What the receiver decided about one request: the ``Verdict`` stream.

The ASGI handler builds a ``Verdict`` for every request to the webhook path, answers, and appends
the verdict to a queue; a consumer task (``receiver.pump``) completes it off the request path
(duplicate, attempt, out of order, latency) and hands batches to the display, the recorder and any
``on_verdicts`` callback. ``orjson.dumps(verdict, option=JSON_OPTIONS)`` (``as_json()``) is the
``{"type": "request", …}`` line of ``prefctl receive -o json``; ``format_line()`` is the line
people read (both in docs/receiver.md).

    >>> verdict.status, verdict.signature, verdict.duplicate
    (200, 'valid', False)
    >>> format_line(verdict)
    '19:20:30.123  200  contacts.email.added          profile=1001  event=3f2a9c1e…  sig=valid  latency=12ms'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson

from prefctl.webhooks.verification import AUTHENTIC_SIGNATURES, SignatureResult

__all__ = [
    "AUTHENTIC_SIGNATURES",
    "JSON_OPTIONS",
    "ForwardResult",
    "Kind",
    "SignatureResult",
    "Verdict",
    "format_line",
    "json_lines",
    "writable",
]


class Kind:
    """What a request was: ``Verdict.kind``."""

    EVENT = "event"  # an event notification (EventType other than the handshake's)
    HANDSHAKE = "handshake"  # a subscription.validation message
    INVALID = "invalid"  # a request whose body could not be read as a message
    OTHER = "other"  # a request to another path or with another method
    VALIDATION = "validation"  # the receiver's own GET of a validationUrl (--auto-validate)


@dataclass(slots=True)
class ForwardResult:
    """How the user's handler (``--forward-to``) answered a forwarded event."""

    status: int | None
    latency_ms: float
    body: str = ""
    error: str | None = None


_NO_TIME = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(eq=False)
class Verdict:
    """One request and the receiver's answer to it; its public fields are the NDJSON line.

    ``status`` is None when a fault reset the connection. ``reason`` is a short machine code
    (``too_old``, ``not_json``, ``body_too_large``…) and ``detail`` the sentence for people.
    ``duplicate``, ``attempt``, ``out_of_order`` and ``latency_ms`` are filled in by the pump.
    ``validation_skipped`` says why ``--auto-validate`` did not GET a handshake's validationUrl
    (``untrusted_host``, ``not_http``, ``too_many_validations``; ``detail`` has the sentence).
    ``_body`` and ``_headers`` are the raw request (kept only when recording); orjson leaves
    fields that start with an underscore out, so ``orjson.dumps(verdict)`` is exactly the line
    of ``prefctl receive -o json``, serialised without building a dict first.

    No ``__slots__``, on purpose: orjson serialises a dataclass from its ``__dict__`` (in field
    order, as ``__init__`` assigns them) about four times as fast as one with slots, which it must
    read field by field, and building one costs the same either way.

    Build one with keywords (``Verdict(time=now, kind=Kind.EVENT, status=200)``); every field has
    a default so that the request path can also pass the first few positionally, which is cheaper.
    """

    type: str = "request"
    time: datetime = _NO_TIME
    kind: str = Kind.INVALID
    method: str = "POST"
    path: str = ""
    status: int | None = None
    event_type: str | None = None
    event_id: str | None = None
    profile_id: Any = None
    subscription_id: Any = None
    event_time: str | None = None
    signature: str = SignatureResult.NOT_REQUIRED
    reason: str | None = None
    detail: str | None = None
    duplicate: bool = False
    attempt: int = 0
    out_of_order: bool = False
    latency_ms: float | None = None
    fault: str | None = None
    validation_url: str | None = None
    validation_skipped: str | None = None
    forward: ForwardResult | None = None
    _headers: list[tuple[bytes, bytes]] | None = None
    _body: bytes | None = None

    @property
    def authentic(self) -> bool:
        """An event whose signature verified (or was not checked, with --no-verify)."""
        return self.kind == Kind.EVENT and self.signature in AUTHENTIC_SIGNATURES

    @property
    def body(self) -> bytes | None:
        """The raw request body (kept only when recording)."""
        return self._body

    @property
    def headers(self) -> list[tuple[bytes, bytes]] | None:
        """The raw request headers (kept only when recording)."""
        return self._headers

    def as_json(self) -> bytes:
        """The NDJSON line of ``prefctl receive -o json`` (snake_case keys), without newline."""
        try:
            return orjson.dumps(self, option=JSON_OPTIONS)
        except orjson.JSONEncodeError:
            return orjson.dumps(writable(self), option=JSON_OPTIONS)

    def as_dict(self) -> dict[str, Any]:
        """The same line as a dict."""
        result: dict[str, Any] = orjson.loads(self.as_json())
        return result


# Times in UTC with a Z, to the microsecond: "2026-11-21T19:20:30.123456Z".
JSON_OPTIONS = orjson.OPT_UTC_Z
_BETWEEN = b'},{"type":"request"'


def json_lines(verdicts: Sequence[Verdict]) -> bytes:
    """The NDJSON lines of ``verdicts``, newline-separated (no trailing newline).

    One ``orjson.dumps`` of the whole batch costs well under half of one call per verdict. The
    array is then cut into lines where one object ends and the next begins: ``},{"type":"request"``
    cannot occur anywhere else, because inside a JSON string every ``"`` is escaped.
    """
    if not verdicts:
        return b""
    try:
        array = orjson.dumps(list(verdicts), option=JSON_OPTIONS)
    except orjson.JSONEncodeError:  # a value from a body that orjson cannot write: rare
        array = orjson.dumps([writable(v) for v in verdicts], option=JSON_OPTIONS)
    return array[1:-1].replace(_BETWEEN, b'}\n{"type":"request"')


def writable(verdict: Verdict) -> Verdict:
    """``verdict``, or a copy that orjson can write.

    ProfileId and SubscriptionId are shown as the body gave them, whatever their JSON type; the
    few values orjson refuses to write (an integer beyond 64 bits, nesting over 255 levels) are
    shown as their JSON text, a string (null if even that is too deep), rather than stopping the
    receiver.
    """
    try:
        orjson.dumps(verdict)
    except orjson.JSONEncodeError:
        return replace(
            verdict,
            profile_id=_writable(verdict.profile_id),
            subscription_id=_writable(verdict.subscription_id),
        )
    return verdict


def _writable(value: Any) -> Any:
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        try:
            return msgspec.json.encode(value).decode()
        except (msgspec.EncodeError, RecursionError):
            return None  # deeper than anyone reads
    return value


# Table mode shows at most this many characters of each field a request chose (the JSON line has
# them whole): one request must not make a megabyte line.
SHOWN_CHARS = {"event_type": 60, "id": 40, "url": 120, "detail": 200, "short": 40}


def _shown(value: Any, limit: int) -> str:
    """``value`` as text, at most ``limit`` characters (``-`` for None)."""
    if value is None:
        return "-"
    if type(value) is not str:
        try:
            value = str(value)
        except ValueError:  # an integer too long to print (Python refuses past 4,300 digits)
            return "(a very long number)"
    return _short(value, limit)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_line(verdict: Verdict) -> str:
    """The one-line summary printed by ``prefctl receive`` (format in docs/receiver.md).

    Anything a request sent that is not printable (escape sequences, newlines) is shown escaped,
    ``\\x1b[2J``, so that no request can drive the terminal or forge a line of the output; what it
    chose is shortened (``SHOWN_CHARS``), so that the line stays about a terminal row or two.
    """
    line = _line(verdict)
    return line if line.isprintable() else line.encode("unicode_escape").decode("ascii")


def _line(verdict: Verdict) -> str:
    moment = verdict.time
    time = f"{moment:%H:%M:%S}.{moment.microsecond // 1000:03d}"
    status = "RST" if verdict.status is None else str(verdict.status)
    url_chars, id_chars, detail_chars = SHOWN_CHARS["url"], SHOWN_CHARS["id"], SHOWN_CHARS["detail"]
    if verdict.kind == Kind.VALIDATION:
        outcome = _shown(verdict.detail or "done", detail_chars)
        url = _shown(verdict.validation_url, url_chars)
        return f"{time}  {status:>3}  GET validationUrl  {url}  {outcome}"
    if verdict.kind == Kind.OTHER:
        shown = f"{verdict.method} {_short(verdict.path, 60)}"
        return f"{time}  {status:>3}  {shown}  {_shown(verdict.detail, detail_chars)}"
    event_type = _shown(verdict.event_type, SHOWN_CHARS["event_type"])
    parts = [time, f"{status:>3}", f"{event_type:<28}"]
    if verdict.kind == Kind.HANDSHAKE:
        parts.append(f"subscription={_shown(verdict.subscription_id, id_chars)}")
    elif verdict.profile_id is not None:
        parts.append(f"profile={_shown(verdict.profile_id, id_chars)}")
    if verdict.event_id:
        parts.append(f"event={_short(verdict.event_id, 9)}")
    # A refused body that was never read (413, 415, malformed) has no signature verdict to show.
    if verdict.signature != SignatureResult.NOT_REQUIRED:
        parts.append(f"sig={verdict.signature}")
    if verdict.duplicate:
        parts.append("DUPLICATE")
    if verdict.attempt > 1:
        parts.append(f"attempt={verdict.attempt}")
    if verdict.out_of_order:
        parts.append("OUT-OF-ORDER")
    if verdict.latency_ms is not None:
        parts.append(f"latency={verdict.latency_ms:.0f}ms")
    if verdict.fault:
        parts.append(f"fault={_shown(verdict.fault, SHOWN_CHARS['short'])}")
    if verdict.validation_url:
        parts.append(f"validationUrl={_shown(verdict.validation_url, url_chars)}")
    detail = _shown(verdict.detail, detail_chars) if verdict.detail else None
    if verdict.reason:
        parts.append(f"({verdict.reason}: {detail})" if detail else verdict.reason)
    elif detail and verdict.status is not None and verdict.kind != Kind.INVALID:
        parts.append(detail)  # what was answered to a handshake; a note on an event
    forward = verdict.forward
    if forward is not None:
        answer = (
            _shown(forward.error, detail_chars)
            if forward.error
            else f"{forward.status} {_short(forward.body, 60)!r}"
        )
        parts.append(f"→ handler {answer} {forward.latency_ms:.0f}ms")
    return "  ".join(parts)
