"""What a failure-alert email says: ``compose`` turns an ``AlertContent`` into the message.

An alert is an RFC 5322 plain-text email: account id, environment, subscription
name and id, Url, the window of the dead letters it reports, their counts by reason, the last HTTP
status and failure reason, and sample EventIds. ``X-Prefctl-*`` headers repeat the identifiers for
mail filters and for ``prefctl alerts``. Prose is wrapped at 76 columns and sent 7bit when ASCII,
so the text reads the same in the store, the mbox and a mail client.

    >>> message = compose(content, message_id="<alert.3.1.1767225600000@demo-corp.prefctl>",
    ...                   sender="prefctl alerts <alerts@localhost>")
    >>> message["Subject"]
    '[Sandbox] DEMO_CORP: 1 webhook event dead-lettered for subscription "orders" (12)'
"""

from __future__ import annotations

from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import EmailPolicy
from typing import TYPE_CHECKING, Any

from prefctl.store.timestamps import wire_time

if TYPE_CHECKING:
    from prefctl.store.alert_incidents import Batch
    from prefctl.store.alerts import AlertKind

__all__ = ["ALERT_POLICY", "AlertContent", "AlertPolicy", "compose", "fold_at_spaces", "subject"]


@dataclass(frozen=True, slots=True)
class AlertContent:
    """Everything one alert email says. Times are Unix seconds; minutes are the account's
    settings as configured (before any emulator time scale)."""

    alert_id: int
    kind: AlertKind
    account: str
    environment: str
    subscription_id: int
    subscription_name: str
    url: str
    recipients: tuple[str, ...]
    incident_id: int
    incident_opened_at: float
    incident_dead_letters: int
    sequence: int
    batch: Batch
    created_at: float
    next_alert_at: float | None
    recovered_at: float | None
    frequency_min: int
    frequency_max: int
    threshold_max: int


def subject(content: AlertContent) -> str:
    """The Subject line: environment, account, what happened and to which subscription."""
    where = f'subscription "{content.subscription_name}" ({content.subscription_id})'
    count = content.batch.count
    events = f"{count} webhook event{'' if count == 1 else 's'}"
    prefix = f"[{content.environment}] {content.account}:"
    if content.kind == "paused":
        counted = content.incident_dead_letters
        return f"{prefix} alerting paused for {where} after {counted} dead letters"
    if content.kind == "recovered":
        return f"{prefix} {where} recovered; {events} dead-lettered before it"
    if content.kind == "update":
        events = f"{count} more webhook event{'' if count == 1 else 's'}"
    return f"{prefix} {events} dead-lettered for {where}"


class AlertPolicy(EmailPolicy):
    """The email package's default policy, except that ASCII text headers (Subject and the
    ``X-Prefctl-*`` ones) fold at the last space that fits in 78 columns, the first word always on
    the header's own line. The package's own folder moves a whole 70–77 character Subject onto a
    continuation line, leaving ``Subject:`` alone on the first, which some mail clients and every
    ``grep '^Subject: '`` read as empty."""

    def fold(self, name: str, value: Any) -> str:
        folded = self._at_spaces(name, value)
        return str(super().fold(name, value)) if folded is None else folded

    def fold_binary(self, name: str, value: Any) -> bytes:
        folded = self._at_spaces(name, value)
        if folded is None:
            return bytes(super().fold_binary(name, value))
        return folded.encode("ascii")

    def _at_spaces(self, name: str, value: Any) -> str | None:
        text = str(value)
        lowered = name.lower()
        if not (lowered == "subject" or lowered.startswith("x-prefctl-")):
            return None
        if not (text.isascii() and text.isprintable()):
            return None  # encoded words: the package's folder
        folded = fold_at_spaces(f"{name}: {text}", self.max_line_length or 78, self.linesep)
        if max(len(line) for line in folded.split(self.linesep)) > _MAX_LINE:
            return None  # a word too long for any line: the package splits it in encoded words
        return folded


ALERT_POLICY = AlertPolicy()
_MAX_LINE = 998  # RFC 5322 2.1.1: a line MUST be no longer (78 is what it SHOULD be)


def fold_at_spaces(line: str, width: int, linesep: str) -> str:
    """``line`` (``Name: value``) folded before the last space that keeps each line within
    ``width``, with ``linesep`` after each line. The value's first word stays with the name, and a
    word longer than ``width`` stays whole.

    >>> fold_at_spaces("Subject: " + "word " * 15 + "end", 40, "|")
    'Subject: word word word word word word| word word word word word word word word| word end|'
    """
    words = line.split(" ")
    lines = [" ".join(words[:2])]  # the name and the first word of the value
    for word in words[2:]:
        if len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(" " + word)  # the space folded before stays, as unfolding expects
    return "".join(folded + linesep for folded in lines)


def compose(content: AlertContent, *, message_id: str, sender: str) -> EmailMessage:
    """The alert as an RFC 5322 message (plain text, UTF-8)."""
    from email.utils import format_datetime

    from prefctl.store.timestamps import from_epoch

    message = EmailMessage(policy=ALERT_POLICY)
    message["From"] = sender
    message["To"] = ", ".join(content.recipients) or "undisclosed-recipients:;"
    message["Subject"] = subject(content)
    message["Date"] = format_datetime(from_epoch(content.created_at))
    message["Message-ID"] = message_id
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies, please
    message["X-Prefctl-Alert-Id"] = str(content.alert_id)
    message["X-Prefctl-Alert-Kind"] = content.kind
    message["X-Prefctl-Incident-Id"] = str(content.incident_id)
    message["X-Prefctl-Account"] = content.account
    message["X-Prefctl-Environment"] = content.environment
    message["X-Prefctl-Subscription-Id"] = str(content.subscription_id)
    message["X-Prefctl-Subscription-Name"] = content.subscription_name
    message["X-Prefctl-Dead-Letters"] = str(content.batch.count)
    body = _body(content)
    # Plain 7bit keeps the stored and mboxed text readable; non-ASCII (a name, a Url) needs
    # quoted-printable, which the library picks.
    message.set_content(body, cte="7bit" if body.isascii() else None)
    return message


def _body(c: AlertContent) -> str:
    batch, latest = c.batch, c.batch.latest
    width = max(len(reason) for reason in batch.by_reason) + 2
    status = "none (no HTTP response)" if latest.last_status is None else str(latest.last_status)
    lines = [
        *_wrap(_opening(c)),
        "",
        f"Account:        {c.account}",
        f"Environment:    {c.environment}",
        f"Subscription:   {c.subscription_name} (Id {c.subscription_id})",
        f"Url:            {c.url}",
        f"Incident:       {c.incident_id}, opened {wire_time(c.incident_opened_at)}, "
        f"alert {c.sequence}",
        f"Window:         {wire_time(batch.first_at)} to {wire_time(batch.last_at)}",
        f"Dead letters:   {batch.count} in this alert, {c.incident_dead_letters} in the incident",
        "",
        "Dead letters by reason:",
        *(f"  {reason:<{width}}{count}" for reason, count in batch.by_reason.items()),
        "",
        "Last failure:",
        f"  HTTP status:  {status}",
        f"  Reason:       {latest.reason}",
        f"  Error:        {_one_line(latest.last_error or '-')}",
        f"  EventId:      {latest.event_id}",
        f"  Attempts:     {latest.attempts}"
        + (f", last at {wire_time(latest.last_attempt_at)}" if latest.last_attempt_at else ""),
        "",
        f"Sample EventIds ({len(batch.sample_event_ids)} of {batch.count}):",
        *(f"  {event_id}" for event_id in batch.sample_event_ids),
        "",
        *(line for paragraph in _next_steps(c) for line in _wrap(paragraph)),
        "",
        "Inspect them:     prefctl deadletters list --subscription " + str(c.subscription_id),
        "Deliver again:    prefctl deadletters redrive --subscription " + str(c.subscription_id),
    ]
    return "\n".join(lines) + "\n"


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _wrap(paragraph: str) -> list[str]:
    import textwrap

    return textwrap.wrap(paragraph, width=76, break_long_words=False, break_on_hyphens=False)


def _opening(c: AlertContent) -> str:
    name = f'"{c.subscription_name}"'
    if c.kind == "recovered":
        return (
            f"Deliveries to subscription {name} recovered; these events were dead-lettered first."
        )
    if c.kind == "paused":
        return f"Webhook events for subscription {name} keep failing; alerting is now paused."
    return f"Webhook events could not be delivered to subscription {name} and were dead-lettered."


def _next_steps(c: AlertContent) -> list[str]:
    closes = (
        "The incident closes after a successful delivery (HTTP 200) to this subscription or "
        f"{c.frequency_max} minutes without dead letters."
    )
    if c.kind == "recovered":
        when = wire_time(c.recovered_at) if c.recovered_at is not None else "just now"
        return [f"A delivery to this subscription succeeded at {when}: the incident is closed."]
    if c.kind == "paused":
        return [
            f"This incident has counted {c.incident_dead_letters} dead letters "
            f"(AlertThresholdMax {c.threshold_max}): no more alerts are sent for it.",
            closes,
            "A new incident after it alerts again.",
        ]
    after = wire_time(c.next_alert_at) if c.next_alert_at is not None else "the next gap"
    return [
        f"Later dead letters are batched: the next alert goes no sooner than {after} (at most "
        f"one alert per {c.frequency_max} minutes). Alerting pauses once the incident has "
        f"counted {c.threshold_max} dead letters.",
        closes,
    ]
