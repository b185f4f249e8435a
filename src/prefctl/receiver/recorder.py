"""``--record FILE``: every request to the webhook path as one NDJSON line, for replay and bug reports.

    {"received_at": "2026-11-21T19:20:30.123456Z", "method": "POST", "path": "/webhooks",
     "headers": {"content-type": "application/json",
                 "service-webhook": "Timestamp=2026-11-21T19:20:30.120Z,Signature=***"},
     "body": {"EventId": "…", "EventType": "contacts.email.added", …},
     "verdict": {"type": "request", "status": 200, "signature": "valid", …}}

``body`` is the request body as JSON (the event itself, which is what ``prefctl replay --file``
re-delivers); a body that is not JSON is kept as text in ``body_text`` instead (at most 64 KiB).
The Signature in ``Service-Webhook`` and any ``Authorization`` or ``Cookie`` header are masked: a
replay signs afresh, and a recording shared in a bug report must not carry a usable credential.
The Hashkey is never known to the recorder. With ``redact=True`` e-mail addresses, phone numbers and
personal names in the body are masked too. The file is written with mode 0600 and truncated when
the receiver starts; one receiver at a time records into a file (a lock beside it).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from prefctl.errors import PrefctlError, UsageError
from prefctl.private_files import lock_open_file, os_reason
from prefctl.receiver.pump import BackgroundWriter
from prefctl.receiver.verdict import JSON_OPTIONS, Kind, Verdict, writable
from prefctl.webhooks.signature import HEADER_NAME

__all__ = ["Recorder", "record_line", "record_of", "redact_personal_data"]

MASK = "***"
BODY_TEXT_LIMIT = 64 * 1024

_SIGNATURE_HEADER = HEADER_NAME.lower().encode("latin-1")
_MASKED_HEADERS = {b"authorization", b"proxy-authorization", b"cookie"}
_SIGNATURE_PARAM = re.compile(r"(?i)(signature\s*=\s*)[^,;\s]+")

_EMAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")
_PHONE = re.compile(r"(?<![\w-])\+?\d[\d\s().-]{5,}\d(?![\w-])")
_NAME_KEYS = frozenset({"FirstName", "MiddleName", "LastName", "Prefix", "Suffix", "CustomerName"})
# Envelope fields are identifiers and times, never personal data (and some look like numbers).
_ENVELOPE_KEYS = frozenset(
    {"EventId", "EventType", "Entity", "SubscriptionId", "ClientId", "ProfileId", "EventTime"}
    | {"OriginalEventTime"}
)


def _mask_phone(match: re.Match[str]) -> str:
    digits = [c for c in match.group(0) if c.isdigit()]
    if not 7 <= len(digits) <= 15:
        return match.group(0)
    return MASK + "".join(digits[-2:])


def _redact_text(text: str) -> str:
    text = _EMAIL.sub(lambda m: f"{MASK}@{m.group(1)}", text)
    return _PHONE.sub(_mask_phone, text)


def redact_personal_data(value: Any, key: str | None = None) -> Any:
    """``value`` with e-mail addresses, phone numbers and personal names masked.

    Names are the CustomerName parts (``FirstName``…); e-mails keep their domain
    (``***@example.com``) and phone numbers their last two digits (``***67``), so that a recording
    still shows which contact changed.
    """
    if key in _NAME_KEYS:
        if isinstance(value, dict):
            return {k: MASK if isinstance(v, str) and v else v for k, v in value.items()}
        return MASK if isinstance(value, str) and value else value
    if isinstance(value, dict):
        return {k: redact_personal_data(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_personal_data(item, key) for item in value]
    if isinstance(value, str) and key not in _ENVELOPE_KEYS:
        return _redact_text(value)
    return value


def _headers(raw: list[tuple[bytes, bytes]] | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in raw or ():
        text = value.decode("latin-1")
        if name == _SIGNATURE_HEADER:
            text = _SIGNATURE_PARAM.sub(lambda m: m.group(1) + MASK, text)
        elif name in _MASKED_HEADERS:
            text = MASK
        key = name.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def record_of(verdict: Verdict, *, redact: bool = False) -> dict[str, Any]:
    """The recording of one request, ready for ``orjson.dumps(…, option=JSON_OPTIONS)``."""
    record: dict[str, Any] = {
        "received_at": verdict.time,
        "method": verdict.method,
        "path": verdict.path,
        "headers": _headers(verdict.headers),
        "body": None,
    }
    body: Any = None
    if verdict.body:
        try:
            body = orjson.loads(verdict.body)
        except orjson.JSONDecodeError:
            text = verdict.body[:BODY_TEXT_LIMIT].decode("utf-8", errors="replace")
            record["body_text"] = _redact_text(text) if redact else text
    if body is not None:
        record["body"] = redact_personal_data(body) if redact else body
    record["verdict"] = verdict
    if redact and verdict.forward is not None:
        shown = verdict.as_dict()
        shown["forward"]["body"] = _redact_text(shown["forward"]["body"])
        record["verdict"] = shown
    return record


def record_line(verdict: Verdict, *, redact: bool = False) -> bytes:
    """The recording of one request as one line of JSON (without the newline)."""
    record = record_of(verdict, redact=redact)
    try:
        return orjson.dumps(record, option=JSON_OPTIONS)
    except orjson.JSONEncodeError:
        pass
    # A body orjson reads but cannot write back (nesting over 255 levels): kept as text.
    if record["body"] is not None and verdict.body:
        text = verdict.body[:BODY_TEXT_LIMIT].decode("utf-8", errors="replace")
        record["body"], record["body_text"] = None, _redact_text(text) if redact else text
    if isinstance(record["verdict"], Verdict):
        record["verdict"] = writable(record["verdict"])
    return orjson.dumps(record, option=JSON_OPTIONS)


class Recorder:
    """Writes recording lines to a 0600 file: formatted per batch, written on a writer thread.

    ``write`` is a verdict sink; the error of a failed write is raised by the next ``write``.
    """

    def __init__(self, path: Path, *, redact: bool = False) -> None:
        self.path = path
        self.redact = redact
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError as exc:
            raise UsageError(f"cannot write the recording {path}: {os_reason(exc)}") from None
        # Two receivers recording into one file would overwrite each other's lines: the second
        # is refused before it truncates the first one's recording (the lock goes with the fd).
        # Not for /dev/stdout or a pipe, which nothing truncates.
        if stat.S_ISREG(os.fstat(fd).st_mode):
            if not lock_open_file(fd):
                os.close(fd)
                raise UsageError(
                    f"{path} is being recorded by another prefctl receive",
                    hint="give each receiver its own --record FILE",
                )
            os.ftruncate(fd, 0)
            os.fchmod(fd, 0o600)
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._writer = BackgroundWriter(self._write_chunk, name="prefctl-recorder")

    def _write_chunk(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self._file.flush()

    def write(self, verdicts: Sequence[Verdict]) -> None:
        """Queue the requests among ``verdicts`` (one write per batch)."""
        self._check()
        lines = [
            record_line(v, redact=self.redact) + b"\n"
            for v in verdicts
            if v.kind != Kind.VALIDATION
        ]
        if lines:
            self._writer.write(b"".join(lines))

    def close(self) -> None:
        """Write what is queued and close the file; raises a write error that happened."""
        self._writer.close()
        try:
            self._file.close()
        except OSError as exc:
            self._writer.error = self._writer.error or exc
        self._check()

    def _check(self) -> None:
        error = self._writer.error
        if error is not None:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise PrefctlError(f"cannot write the recording {self.path}: {reason}") from None
