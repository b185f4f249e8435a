"""``--record``: the recording format, masking and redaction."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from prefctl.receiver.recorder import Recorder, record_line, redact_personal_data
from prefctl.receiver.verdict import Kind, SignatureResult, Verdict
from tests.receiver.asgi import CREDS, NOW, event_body, signed


def verdict(body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> Verdict:
    return Verdict(
        time=NOW,
        kind=Kind.EVENT,
        status=200,
        path="/webhooks",
        signature=SignatureResult.VALID,
        event_id="evt-1",
        _headers=headers if headers is not None else signed(),
        _body=body,
    )


def record_of(value: Verdict) -> dict:
    return json.loads(record_line(value))


def test_record_keeps_the_event_and_masks_the_signature() -> None:
    headers = [*signed(), (b"authorization", b"Bearer abc.def.ghi")]
    record = record_of(verdict(event_body(), headers))
    assert record["body"]["EventId"] == "evt-1"
    assert record["body"]["Data"]["Address"] == "ann@example.com"
    signature = record["headers"]["service-webhook"]
    assert signature.startswith("Timestamp=2026-11-21T19:20:30.123Z,Signature=")
    assert signature.endswith("Signature=***")
    assert record["headers"]["authorization"] == "***"
    assert record["verdict"]["status"] == 200
    assert record["received_at"] == "2026-11-21T19:20:30.123000Z"
    assert CREDS.hashkey not in json.dumps(record)


def test_record_of_a_body_that_is_not_json_keeps_text() -> None:
    record = record_of(verdict(b"\xffnot json"))
    assert record["body"] is None
    assert record["body_text"].endswith("not json")


def test_redact_masks_emails_phones_and_names_but_not_identifiers() -> None:
    data = {
        "EventId": "12345678-1234",
        "ProfileId": 1001,
        "EventTime": "2026-11-21T19:20:30.123Z",
        "Data": {
            "CustomerName": {"FirstName": "Ann", "LastName": "Lee"},
            "Emails": [{"Address": "ann.lee@example.com"}],
            "PhoneNumbers": [{"Number": "+1 (555) 123-4567"}],
            "Note": "call 555-987-6543 or write to ann@example.org",
            "FirstName": "Ann",
            "Tags": ["vip"],
        },
    }
    redacted = redact_personal_data(data)
    text = json.dumps(redacted)
    for secret in ("Ann", "Lee", "ann.lee", "123-4567", "987-6543", "ann@"):
        assert secret not in text
    assert redacted["Data"]["Emails"][0]["Address"] == "***@example.com"
    assert redacted["Data"]["PhoneNumbers"][0]["Number"] == "***67"
    assert redacted["EventId"] == "12345678-1234"
    assert redacted["EventTime"] == data["EventTime"]
    assert redacted["Data"]["Tags"] == ["vip"]


def test_recorder_writes_ndjson_0600(tmp_path: Path) -> None:
    path = tmp_path / "events.ndjson"
    path.write_text("old content\n")
    recorder = Recorder(path, redact=True)
    recorder.write([verdict(event_body()), verdict(event_body("evt-2"))])
    recorder.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["body"]["EventId"] for line in lines] == ["evt-1", "evt-2"]
    assert lines[0]["body"]["Data"]["Address"] == "***@example.com"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
