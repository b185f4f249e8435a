"""Events read from a file for ``prefctl replay --file``.

Three shapes are read, one JSON object per line (NDJSON) or all of them in one JSON array:

- a line of ``prefctl receive --record`` (``receiver/recorder.py``): the event is its ``"body"``;
- a line of ``prefctl deadletters export``: the event is its ``"event"``;
- a bare event notification (docs/webhooks.md), as a receiver would log it.

Each event keeps its EventId, EventType, Entity, ProfileId, OriginalEventTime, Data and
PreviousData; a replay gives it a new EventTime and its target's SubscriptionId. Lines that hold no
event (a body that was not JSON, a validation handshake) and recorded requests the receiver refused
as not authentic (a bad, stale or missing signature) are skipped and counted; an EventId seen
before is counted as a duplicate and replayed once (a recording holds every retry of an event).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from prefctl.errors import UsageError
from prefctl.private_files import os_reason
from prefctl.store.events import NewEvent
from prefctl.webhooks.catalog import entity_of
from prefctl.webhooks.handshake import VALIDATION_EVENT_TYPE
from prefctl.webhooks.verification import AUTHENTIC_SIGNATURES

__all__ = ["CapturedEvent", "CapturedEvents", "parse_captured", "read_captured"]


@dataclass(frozen=True)
class CapturedEvent:
    """One event to replay, as it was captured; ``subscription_id`` is the one it was sent to."""

    event_id: str
    event_type: str
    entity: str
    profile_id: int | None
    client_id: str | None
    subscription_id: int | None
    original_event_time: float
    data: dict[str, Any]
    previous_data: dict[str, Any] | None = None

    def new_event(self) -> NewEvent:
        """The event as the store keeps it."""
        return NewEvent(
            event_id=self.event_id,
            event_type=self.event_type,
            entity=self.entity,
            profile_id=self.profile_id,
            original_event_time=self.original_event_time,
            data=self.data,
            previous_data=self.previous_data,
        )


@dataclass(frozen=True)
class CapturedEvents:
    """The events of a file, first occurrence of each EventId, in file order."""

    events: list[CapturedEvent] = field(default_factory=list)
    skipped: int = 0
    duplicates: int = 0


def read_captured(path: Path) -> CapturedEvents:
    """The events in ``path`` (see the module docstring); a malformed file is a ``UsageError``."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {os_reason(exc)}") from None
    return parse_captured(raw, source=str(path))


def parse_captured(raw: bytes, *, source: str = "the file") -> CapturedEvents:
    """The events in ``raw``: NDJSON, or one JSON array."""
    items: Iterable[tuple[int, Any]]
    if raw.lstrip().startswith(b"["):
        try:
            array = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UsageError(f"{source} is not valid JSON: {exc}") from None
        items = enumerate(array, start=1)
    else:
        items = _ndjson(raw, source)
    events: list[CapturedEvent] = []
    seen: set[str] = set()
    skipped = duplicates = 0
    for number, item in items:
        event = _event_of(item, f"{source} record {number}")
        if event is None:
            skipped += 1
        elif event.event_id in seen:
            duplicates += 1
        else:
            seen.add(event.event_id)
            events.append(event)
    return CapturedEvents(events, skipped, duplicates)


def _ndjson(raw: bytes, source: str) -> Iterable[tuple[int, Any]]:
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, orjson.loads(line)
        except orjson.JSONDecodeError:
            raise UsageError(
                f"line {number} of {source} is not JSON",
                hint="replay reads NDJSON from 'prefctl receive --record' or "
                "'prefctl deadletters export'",
            ) from None


def _authentic_recording(item: dict[str, Any]) -> bool:
    """False for a recorded request the receiver refused as forged, stale or unsigned."""
    verdict = item.get("verdict")
    if "body" not in item or not isinstance(verdict, dict):
        return True  # not a recording line: an export or a bare event
    return verdict.get("signature") in AUTHENTIC_SIGNATURES


def _event_of(item: Any, where: str) -> CapturedEvent | None:
    """The event in one record, None when it holds none; a broken event is a ``UsageError``."""
    if not isinstance(item, dict):
        raise UsageError(f"{where} is not a JSON object")
    body: Any = item if "EventId" in item else item.get("body", item.get("event"))
    if not _authentic_recording(item):
        return None
    if not isinstance(body, dict) or body.get("EventType") == VALIDATION_EVENT_TYPE:
        return None
    if "EventId" not in body:
        return None
    try:
        return _parse_event(body)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where} holds an event that cannot be replayed: {exc}") from None


def _parse_event(body: dict[str, Any]) -> CapturedEvent:
    event_id, event_type = body["EventId"], body["EventType"]
    if not isinstance(event_id, str) or not event_id:
        raise ValueError("EventId must be a string")
    if not isinstance(event_type, str):
        raise ValueError("EventType must be a string")
    entity = body.get("Entity") or entity_of(event_type)
    data = body.get("Data") or {}
    previous = body.get("PreviousData")
    if not isinstance(data, dict) or not (previous is None or isinstance(previous, dict)):
        raise ValueError("Data and PreviousData must be objects")
    profile_id = body.get("ProfileId")
    subscription_id = body.get("SubscriptionId")
    for name, value in (("ProfileId", profile_id), ("SubscriptionId", subscription_id)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be an integer")
    return CapturedEvent(
        event_id=event_id,
        event_type=event_type,
        entity=str(entity),
        profile_id=profile_id,
        client_id=body.get("ClientId"),
        subscription_id=subscription_id,
        original_event_time=_epoch(body.get("OriginalEventTime") or body.get("EventTime")),
        data=data,
        previous_data=previous,
    )


def _epoch(text: Any) -> float:
    if not isinstance(text, str):
        raise ValueError("OriginalEventTime must be an RFC 3339 time")
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
