"""Logging with secrets redacted.

Core modules log through ``logging.getLogger(__name__)``; the CLI installs one stderr handler whose
filter replaces every registered secret (client secrets, tokens, Hashkeys) and anything shaped like
a JWT or an Authorization header value with ``***``, at any verbosity.

    >>> register_secret("s3cr3t-value")
    >>> redact("secret=s3cr3t-value")
    'secret=***'
"""

from __future__ import annotations

import logging
import re
import threading

MASK = "***"
_MIN_SECRET_LENGTH = 6

_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_AUTH_HEADER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_FORM_SECRET = re.compile(
    r"(?i)\b(client_secret|client_assertion|access_token|hashkey|signature)=([^&\s,;\"']+)"
)

_secrets: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember ``value`` so that it is masked wherever it would be logged."""
    if value and len(value) >= _MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """``text`` with registered secrets, JWTs and credential-looking values masked."""
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _JWT.sub(MASK, text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    return _FORM_SECRET.sub(lambda m: f"{m.group(1)}={MASK}", text)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with ``redact`` before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        record.msg = redact(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def configure(verbosity: int, stream: object | None = None) -> None:
    """Send prefctl's (and, from ``-vvv``, its libraries') logs to stderr, redacted.

    ``-v`` info, ``-vv`` debug, ``-vvv`` debug including httpx and uvicorn.
    """
    import sys

    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.addFilter(RedactingFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_prefctl", False)]:
        root.removeHandler(old)
    handler._prefctl = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbosity >= 3 else logging.WARNING)
    logging.getLogger("prefctl").setLevel(level)
    for name in ("httpx", "httpcore", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbosity >= 3 else logging.WARNING)
