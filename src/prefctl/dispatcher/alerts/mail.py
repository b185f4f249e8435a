"""Where failure-alert emails go (``Mailer``), and reading them back from the mbox.

What an alert says is ``dispatcher/alerts/message.py``. Sinks: SMTP when configured
(``SmtpSettings``: host, port, STARTTLS, user; the password only from ``PREFCTL_SMTP_PASSWORD``),
otherwise the mbox ``alerts.mbox`` in the data dir, appended under its lock.

**[decision]** When SMTP fails (server down, refused, a certificate that does not verify, no
recipients), the alert is appended to the mbox instead; the SMTP error is logged as a warning and
kept with the alert's record. An alert is never lost.

Reading them back: ``read_mbox_bytes`` (under the same lock), ``parse_message`` for a whole email,
and for listing many, ``parse_headers``, ``DecodedHeaders`` and ``message_id``, which read
headers as the email package does at a fraction of its cost.

    >>> mailer = Mailer(MboxSink(data_dir / MBOX_FILE), SmtpSink(SmtpSettings("mail.example")))
    >>> mailer.send(compose(content, message_id=..., sender=mailer.sender)).sink
    'smtp'
"""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage, Message
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from prefctl.errors import AuthError, PrefctlError, UnreachableError, UsageError
from prefctl.logs import register_secret
from prefctl.private_files import os_reason

if TYPE_CHECKING:
    import mailbox

__all__ = [
    "DEFAULT_SENDER",
    "ENV_SMTP_FROM",
    "ENV_SMTP_HOST",
    "ENV_SMTP_PASSWORD",
    "ENV_SMTP_PORT",
    "ENV_SMTP_STARTTLS",
    "ENV_SMTP_USER",
    "MBOX_FILE",
    "SMTP_SETTING",
    "DecodedHeaders",
    "Mailer",
    "MboxSink",
    "Sent",
    "SmtpSettings",
    "SmtpSink",
    "message_id",
    "parse_headers",
    "parse_message",
    "read_mbox",
    "read_mbox_bytes",
]

log = logging.getLogger(__name__)

MBOX_FILE = "alerts.mbox"
# The key of ``EmulatorContext.settings`` holding the emulator's SmtpSettings (or None).
SMTP_SETTING = "alerts.smtp"
ENV_SMTP_PASSWORD = "PREFCTL_SMTP_PASSWORD"
ENV_SMTP_HOST = "PREFCTL_SMTP_HOST"
ENV_SMTP_PORT = "PREFCTL_SMTP_PORT"
ENV_SMTP_STARTTLS = "PREFCTL_SMTP_STARTTLS"
ENV_SMTP_USER = "PREFCTL_SMTP_USER"
ENV_SMTP_FROM = "PREFCTL_SMTP_FROM"
DEFAULT_SENDER = "prefctl alerts <alerts@localhost>"
DEFAULT_SMTP_PORT = 25
SMTP_TIMEOUT_SECONDS = 10.0
MBOX_LOCK_TIMEOUT_SECONDS = 5.0
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


# -- sinks ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SmtpSettings:
    """Where alert emails go by SMTP. The password is read from ``PREFCTL_SMTP_PASSWORD`` when
    sending, never stored here; ``ca_file`` adds trust for a STARTTLS server (system CAs and
    ``SSL_CERT_FILE`` are always used)."""

    host: str
    port: int = DEFAULT_SMTP_PORT
    starttls: bool = False
    user: str | None = None
    sender: str = DEFAULT_SENDER
    timeout: float = SMTP_TIMEOUT_SECONDS
    ca_file: Path | None = None

    def validate(self, env: Mapping[str, str] | None = None) -> None:
        """Raise UsageError (exit 2) for settings that cannot work."""
        env = os.environ if env is None else env
        if not self.host:
            raise UsageError("--smtp-host must not be empty")
        if not 0 < self.port <= 65535:
            raise UsageError(f"--smtp-port must be 1 to 65535, not {self.port}")
        if self.user and not env.get(ENV_SMTP_PASSWORD):
            raise UsageError(
                f"--smtp-user needs the password in {ENV_SMTP_PASSWORD}",
                hint=f"export {ENV_SMTP_PASSWORD}=… before starting",
            )
        if self.user and not self.starttls and self.host not in _LOOPBACK:
            raise UsageError(
                "--smtp-user without --smtp-starttls would send the password in clear text",
                hint="add --smtp-starttls",
            )

    def cli_args(self) -> list[str]:
        """The ``prefctl emulator start`` options that give these settings (a detached emulator
        is started with them)."""
        args = ["--smtp-host", self.host, "--smtp-port", str(self.port)]
        if self.starttls:
            args.append("--smtp-starttls")
        if self.user:
            args += ["--smtp-user", self.user]
        if self.sender != DEFAULT_SENDER:
            args += ["--smtp-from", self.sender]
        return args

    def password(self, env: Mapping[str, str] | None = None) -> str | None:
        value = (os.environ if env is None else env).get(ENV_SMTP_PASSWORD) or None
        register_secret(value)
        return value


class SmtpSink:
    """Sends an alert through an SMTP server (STARTTLS and login when configured)."""

    name: Literal["smtp"] = "smtp"

    def __init__(self, settings: SmtpSettings) -> None:
        self.settings = settings

    def deliver(self, message: EmailMessage) -> None:
        import smtplib
        import ssl
        from email.utils import getaddresses, parseaddr

        s = self.settings
        where = f"the SMTP server {s.host}:{s.port}"
        recipients = [address for _, address in getaddresses(message.get_all("To", [])) if address]
        if not recipients:
            raise UsageError("the alert has no recipients", hint="enable alerts with --recipient")
        try:
            with smtplib.SMTP(
                s.host, s.port, timeout=s.timeout, local_hostname=socket.gethostname()
            ) as smtp:
                if s.starttls:
                    context = ssl.create_default_context()
                    if s.ca_file is not None:
                        context.load_verify_locations(cafile=str(s.ca_file))
                    smtp.starttls(context=context)
                if s.user:
                    smtp.login(s.user, self.settings.password() or "")
                smtp.send_message(message, from_addr=parseaddr(s.sender)[1], to_addrs=recipients)
        except smtplib.SMTPAuthenticationError as exc:
            raise AuthError(f"{where} refused the login of {s.user!r}: {_reply(exc)}") from None
        except smtplib.SMTPRecipientsRefused as exc:
            raise PrefctlError(f"{where} refused the recipients {sorted(exc.recipients)}") from None
        except smtplib.SMTPResponseException as exc:
            raise PrefctlError(f"{where} answered {_reply(exc)}") from None
        except (smtplib.SMTPException, OSError) as exc:
            raise UnreachableError(f"cannot send through {where}: {os_reason(exc)}") from None


def _reply(exc: Exception) -> str:
    code = getattr(exc, "smtp_code", "")
    text = getattr(exc, "smtp_error", b"")
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return f"{code} {text}".strip()


class MboxSink:
    """Appends alerts to an mbox file (created 0600), under the mailbox lock."""

    name: Literal["mbox"] = "mbox"

    def __init__(self, path: Path) -> None:
        self.path = path

    def deliver(self, message: EmailMessage) -> None:
        import mailbox

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with open(fd, "ab") as file, _locked_mbox(self.path) as box:
                if os.linesep != "\n":
                    box.add(message)
                    box.flush()
                    return
                # mailbox.mbox.add reads the whole file first to index it (~0.2 s per alert with
                # 5,000 in it): the same bytes are appended here without that.
                before = file.tell()
                try:
                    file.write(_mbox_entry(message))
                    file.flush()
                    os.fsync(file.fileno())
                except BaseException:
                    file.truncate(before)
                    raise
        except (OSError, mailbox.Error) as exc:
            raise PrefctlError(
                f"cannot append the alert to {self.path}: {os_reason(exc)}"
            ) from None


def _mbox_entry(message: EmailMessage) -> bytes:
    """``message`` as ``mailbox.mbox.add`` appends it: a From line, the message with its body's
    "From " lines quoted, a final newline, and an empty line."""
    import io
    from email.generator import BytesGenerator

    buffer = io.BytesIO()
    BytesGenerator(buffer, True, 0).flatten(message)
    data = buffer.getvalue()
    if not data.endswith(b"\n"):
        data += b"\n"
    unixfrom = message.get_unixfrom()
    if unixfrom is None:
        unixfrom = "From MAILER-DAEMON " + time.asctime(time.gmtime())
    return unixfrom.encode("ascii") + b"\n" + data + b"\n"


@dataclass(frozen=True, slots=True)
class Sent:
    """Which sink took an alert, and why SMTP did not when it was tried and failed."""

    sink: Literal["smtp", "mbox"]
    smtp_error: str | None = None


class Mailer:
    """SMTP when configured, else the mbox; SMTP failures fall back to the mbox."""

    def __init__(self, mbox: MboxSink, smtp: SmtpSink | None = None) -> None:
        self.mbox = mbox
        self.smtp = smtp

    @classmethod
    def for_data_dir(cls, data_dir: Path, smtp: SmtpSettings | None = None) -> Mailer:
        """SMTP with ``smtp`` when given, and ``alerts.mbox`` in ``data_dir``."""
        return cls(MboxSink(data_dir / MBOX_FILE), SmtpSink(smtp) if smtp else None)

    @property
    def sender(self) -> str:
        """The From of the alerts: the SMTP sender when SMTP is configured."""
        return self.smtp.settings.sender if self.smtp else DEFAULT_SENDER

    def send(self, message: EmailMessage) -> Sent:
        """Deliver ``message``; raises PrefctlError only when the mbox cannot take it either."""
        if self.smtp is None:
            self.mbox.deliver(message)
            return Sent("mbox")
        try:
            self.smtp.deliver(message)
        except PrefctlError as exc:
            log.warning("alert %s went to %s: %s", message["Message-ID"], self.mbox.path, exc)
            self.mbox.deliver(message)
            return Sent("mbox", smtp_error=exc.message)
        return Sent("smtp")


# -- reading --------------------------------------------------------------------------------------
def parse_message(text: str | bytes) -> EmailMessage:
    """An alert's stored text as a message (headers decoded, ``get_content()`` for the body)."""
    from email import message_from_bytes, message_from_string
    from email.policy import default

    if isinstance(text, bytes):
        parsed = message_from_bytes(text, policy=default)
    else:
        parsed = message_from_string(text, policy=default)
    assert isinstance(parsed, EmailMessage)  # the default policy makes EmailMessages
    return parsed


def parse_headers(text: str | bytes) -> EmailMessage:
    """The message's headers as ``parse_message`` reads them, its body left unparsed (what
    ``email.parser.HeaderParser`` gives with the default policy): what listing an alert needs, at
    a fraction of the cost. ``DecodedHeaders`` reads them quickly."""
    from email.policy import default

    if isinstance(text, bytes):
        text = text.decode("ascii", "surrogateescape")  # as BytesHeaderParser does
    end = text.find("\n\n")
    fields = None if end < 0 else _fields(text[:end])
    if fields is None:
        from email.parser import HeaderParser

        parsed = HeaderParser(policy=default).parsestr(text)
        assert isinstance(parsed, EmailMessage)
        return parsed
    message = EmailMessage(policy=default)
    for name, value in fields:
        message.set_raw(name, value)
    message.set_payload(text[end + 2 :])
    return message


def message_id(text: str | bytes) -> str:
    """The Message-ID of the message ``text`` ("" without one), as ``parse_headers`` reads it,
    from a scan of its header section."""
    if isinstance(text, bytes):
        end = text.find(b"\n\n")
        section = text[: max(end, 0)].decode("ascii", "surrogateescape")
    else:
        end = text.find("\n\n")
        section = text[: max(end, 0)]
    if end < 0 or not _well_formed(section):
        return DecodedHeaders(parse_headers(text)).get("Message-ID") or ""
    field = _MESSAGE_ID_FIELD.search(section)
    if field is None:
        return ""
    return _default_text("message-id", field[1])


class DecodedHeaders:
    """A message's headers as ``str(message[name])`` and ``message.get_all(name)`` read them, the
    same text without the cost of the email package's header objects: with the default policy a
    plain ASCII value is its own decoding, and any other is decoded once per distinct value.

        >>> DecodedHeaders(parse_headers(text)).get("Subject")
        '[Sandbox] DEMO_CORP: 1 webhook event dead-lettered for subscription "orders" (12)'
    """

    def __init__(self, message: Message) -> None:
        from email.policy import default

        self._message = message
        self._default = message.policy is default
        self._first: dict[str, tuple[str, Any]] = {}
        self._repeated: set[str] = set()
        for name, value in message.raw_items():
            key = name.lower()
            if key in self._first:
                self._repeated.add(key)
            else:
                self._first[key] = (name, value)

    def get(self, name: str) -> str | None:
        """The first ``name`` header's text; None without one."""
        field = self._first.get(name.lower())
        return None if field is None else self._decoded(*field)

    def get_all(self, name: str) -> list[str]:
        key = name.lower()
        if key not in self._repeated:
            field = self._first.get(key)
            return [] if field is None else [self._decoded(*field)]
        return [self._decoded(*f) for f in self._message.raw_items() if f[0].lower() == key]

    def _decoded(self, name: str, value: Any) -> str:
        if not self._default or type(value) is not str:
            return str(self._message.policy.header_fetch_parse(name, value))
        return _default_text(name, value)


def read_mbox(path: Path) -> list[EmailMessage]:
    """Every message of the mbox at ``path`` (none when it does not exist), read under its lock."""
    return [parse_message(text) for text in read_mbox_bytes(path)]


def read_mbox_bytes(path: Path) -> list[bytes]:
    """The text of every message of the mbox at ``path`` (none when it does not exist), read
    under its lock, as ``mailbox.mbox.get_bytes`` gives it."""
    import mailbox

    if not path.is_file():
        return []
    try:
        with _locked_mbox(path) as box:
            if os.linesep != "\n":
                return [box.get_bytes(key) for key in box.iterkeys()]
            return _mbox_messages(path.read_bytes())
    except (OSError, mailbox.Error) as exc:
        raise PrefctlError(f"cannot read {path}: {os_reason(exc)}") from None


def _mbox_messages(data: bytes) -> list[bytes]:
    """The messages of an mbox file's bytes, split as ``mailbox.mbox`` does (at each line that
    starts with "From ", dropping that line and the empty line before it), in one pass."""
    starts = [match.start() for match in _FROM_LINE.finditer(data)]
    messages = []
    ends = [*starts[1:], len(data)] if starts else []
    for start, end in zip(starts, ends, strict=True):
        stop = end - 1 if data[end - 2 : end] == b"\n\n" else end
        first_line = data.find(b"\n", start, stop)
        messages.append(data[first_line + 1 : stop] if first_line >= 0 else b"")
    return messages


_FROM_LINE = re.compile(rb"^From ", re.MULTILINE)
_FIELD_NAME = r"[\x21-\x39\x3b-\x7e]+"  # printable ASCII but the colon
# A header section the email parser reads as headers only: every line a field or a fold.
_SECTION = re.compile(rf"{_FIELD_NAME}:[^\n]*(?:\n(?:[ \t]|{_FIELD_NAME}:)[^\n]*)*")
# A field and its value as the parser keeps it: blanks after the colon dropped, folds kept.
_FIELD = re.compile(rf"^({_FIELD_NAME}):[ \t]*([^\n]*(?:\n[ \t][^\n]*)*)", re.MULTILINE)
_MESSAGE_ID_FIELD = re.compile(
    r"^message-id:[ \t]*([^\n]*(?:\n[ \t][^\n]*)*)", re.MULTILINE | re.IGNORECASE
)
# A Message-ID that the default policy reads back unchanged.
_PLAIN_MESSAGE_ID = re.compile(r"<[\w-]+(?:\.[\w-]+)*@[\w-]+(?:\.[\w-]+)*>", re.ASCII)


def _well_formed(section: str) -> bool:
    # ASCII without CR: no undecodable bytes, and lines end where the parser ends them.
    return section.isascii() and "\r" not in section and _SECTION.fullmatch(section) is not None


def _fields(section: str) -> list[tuple[str, str]] | None:
    """(name, value) of each header of a well-formed section, as the email parser stores them;
    None for any other (a unix From line, CRs, a defect), left to the parser."""
    if not _well_formed(section):
        return None
    fields: list[tuple[str, str]] = _FIELD.findall(section)
    if "multipart" in section.lower() and any(
        name.lower() == "content-type" and "multipart" in value.lower() for name, value in fields
    ):
        return None  # the parser notes a defect on a multipart type without its parts
    return fields


@functools.lru_cache(maxsize=8192)
def _default_text(name: str, value: str) -> str:
    """``str(email.policy.default.header_fetch_parse(name, value))``: unfolded, then decoded as
    the header's kind says. Alerts repeat their senders, recipients, accounts, subjects and
    subscription names: each distinct value is decoded once."""
    value = value.replace("\r", "").replace("\n", "")
    name = name.lower()
    if value.isascii() and "=?" not in value:  # no encoded words, no undecodable bytes
        if _header_kind(name)[1]:
            return value  # unstructured text is its own decoding
        if name == "message-id" and _PLAIN_MESSAGE_ID.fullmatch(value):
            return value
    return str(_header_kind(name)[0](name, value))


@functools.cache
def _header_kind(name: str) -> tuple[Any, bool]:
    """The class the default policy's header factory makes for ``name`` (it makes a new one on
    every call, which is most of its cost), and whether it is plain unstructured text."""
    from email.headerregistry import HeaderRegistry, UniqueUnstructuredHeader, UnstructuredHeader
    from email.policy import default

    factory = default.header_factory
    assert isinstance(factory, HeaderRegistry)
    kind = factory[name]
    return kind, kind.__mro__[1] in (UnstructuredHeader, UniqueUnstructuredHeader)


# mailbox's dot-lock names its temporary file after the time in seconds, the host and the pid:
# two threads of one process (the alert sender and a reader such as `prefctl demo`) locking in
# the same second collide on that name with FileExistsError. Threads take turns here first.
_THREADS = threading.Lock()


@contextmanager
def _locked_mbox(path: Path) -> Iterator[mailbox.mbox]:
    """The mbox at ``path``, locked. The lock does not wait by itself: a writer and a reader
    may meet, so it is retried for a bounded time."""
    import mailbox

    with _THREADS:
        box = mailbox.mbox(path, create=False)
        try:
            deadline = time.monotonic() + MBOX_LOCK_TIMEOUT_SECONDS
            while True:
                try:
                    box.lock()
                    break
                except mailbox.ExternalClashError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            try:
                yield box
            finally:
                box.unlock()
        finally:
            box.close()
