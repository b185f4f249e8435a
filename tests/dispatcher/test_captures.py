from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pytest

from prefctl.dispatcher.captures import parse_captured, read_captured
from prefctl.errors import UsageError
from prefctl.receiver.serve import ReceiverConfig, start_in_thread
from prefctl.webhooks.envelope import build_event, encode

NOW = datetime(2026, 11, 21, 19, 20, 30, 123000, tzinfo=UTC)


def _event(n: int, **extra: object) -> dict[str, object]:
    return build_event(
        event_id=f"00000000-0000-4000-8000-{n:012d}",
        event_type="contacts.email.updated",
        subscription_id=12,
        client_id="DEMO_CORP",
        profile_id=1001,
        event_time=NOW,
        original_event_time="2026-11-21T19:20:29.998Z",
        data={"Address": f"ann{n}@example.com"},
        previous_data={"Address": "old@example.com"},
        **extra,  # type: ignore[arg-type]
    )


def test_read_captured_recording_of_a_real_receiver_keeps_each_event_once(tmp_path: Path) -> None:
    recording = tmp_path / "capture.ndjson"
    config = ReceiverConfig(port=0, verify=False, record=recording)
    with start_in_thread(config) as receiver, httpx.Client() as client:
        for body in (encode(_event(1)), encode(_event(2)), encode(_event(1)), b"not json"):
            client.post(receiver.webhook_url, content=body)
        receiver.wait_for(4)

    captured = read_captured(recording)

    assert [e.event_id for e in captured.events] == [
        "00000000-0000-4000-8000-000000000001",
        "00000000-0000-4000-8000-000000000002",
    ]
    assert (captured.duplicates, captured.skipped) == (1, 1)
    first = captured.events[0]
    assert first.event_type == "contacts.email.updated"
    assert first.entity == "Contacts"
    assert first.profile_id == 1001
    assert first.subscription_id == 12
    assert first.data == {"Address": "ann1@example.com"}
    assert first.previous_data == {"Address": "old@example.com"}
    assert datetime.fromtimestamp(first.original_event_time, UTC).isoformat() == (
        "2026-11-21T19:20:29.998000+00:00"
    )


def test_parse_captured_reads_exports_bare_events_and_json_arrays() -> None:
    export_line = {"event_id": "x", "reason": "PayloadTooLarge", "event": _event(3)}
    ndjson = orjson.dumps(export_line) + b"\n\n" + orjson.dumps(_event(4)) + b"\n"
    assert [e.event_id[-1] for e in parse_captured(ndjson).events] == ["3", "4"]

    array = orjson.dumps([export_line, _event(4)])
    assert [e.event_id[-1] for e in parse_captured(array).events] == ["3", "4"]


def test_parse_captured_entity_missing_is_taken_from_the_catalog() -> None:
    event = _event(5)
    del event["Entity"]
    assert parse_captured(orjson.dumps(event)).events[0].entity == "Contacts"


def test_parse_captured_handshake_is_skipped() -> None:
    handshake = {"EventId": "h", "EventType": "subscription.validation", "data": {}}
    captured = parse_captured(orjson.dumps(handshake))
    assert (captured.events, captured.skipped) == ([], 1)


def test_parse_captured_line_that_is_not_json_names_the_line() -> None:
    with pytest.raises(UsageError, match=r"line 2 of capture\.ndjson is not JSON"):
        parse_captured(orjson.dumps(_event(1)) + b"\n{oops\n", source="capture.ndjson")


def test_parse_captured_event_without_a_time_is_refused() -> None:
    event = _event(1)
    del event["OriginalEventTime"]
    del event["EventTime"]
    with pytest.raises(UsageError, match="cannot be replayed"):
        parse_captured(orjson.dumps(event))


def test_parse_captured_skips_recorded_requests_the_receiver_refused() -> None:
    import orjson

    from prefctl.dispatcher.captures import parse_captured

    event = {
        "EventId": "5f0c8a9e-0000-4000-8000-000000000001",
        "EventType": "profile.created",
        "ProfileId": 1001,
        "EventTime": "2026-11-21T19:20:30.123Z",
        "OriginalEventTime": "2026-11-21T19:20:30.100Z",
        "Data": {"ProfileId": 1001},
    }
    forged = {**event, "EventId": "5f0c8a9e-0000-4000-8000-000000000002"}
    lines = [
        {"body": event, "verdict": {"type": "request", "status": 200, "signature": "valid"}},
        {"body": forged, "verdict": {"type": "request", "status": 401, "signature": "invalid"}},
    ]
    captured = parse_captured(b"\n".join(orjson.dumps(line) for line in lines))
    assert [e.event_id for e in captured.events] == [event["EventId"]]
