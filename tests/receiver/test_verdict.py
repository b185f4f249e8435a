"""The verdict lines: NDJSON for machines, one line for people."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from prefctl.receiver.verdict import ForwardResult, Kind, Verdict, format_line, json_lines
from tests.receiver.asgi import NOW


def verdict(**fields: object) -> Verdict:
    values: dict[str, object] = {
        "time": NOW,
        "kind": Kind.EVENT,
        "status": 200,
        "path": "/webhooks",
        "signature": "valid",
        "event_type": "contacts.email.added",
        "event_id": "3f2a9c1e-1111-2222-3333-444455556666",
        "profile_id": 1001,
        "latency_ms": 12.4,
    }
    values.update(fields)
    return Verdict(**values)  # type: ignore[arg-type]


def test_json_line_has_the_documented_keys_and_no_raw_request() -> None:
    line = json.loads(verdict(_body=b"secret body", _headers=[(b"a", b"b")]).as_json())
    assert list(line)[:3] == ["type", "time", "kind"]
    assert line["time"] == "2026-11-21T19:20:30.123000Z"
    assert "_body" not in line
    assert "secret body" not in json.dumps(line)


@given(st.lists(st.text(), min_size=1, max_size=5))
def test_json_lines_split_exactly_one_object_per_verdict(details: list[str]) -> None:
    tricky = [d + '},{"type":"request"' for d in details]
    batch = [verdict(detail=d, forward=ForwardResult(500, 1.0, body=d)) for d in tricky]
    lines = json_lines(batch).split(b"\n")
    assert [json.loads(line)["detail"] for line in lines] == tricky
    assert [json.loads(line) for line in lines] == [v.as_dict() for v in batch]


def test_json_lines_of_nothing_is_empty() -> None:
    assert json_lines([]) == b""


def test_format_line_shows_flags_people_look_for() -> None:
    line = format_line(
        verdict(duplicate=True, attempt=2, out_of_order=True, fault="fail-first 1/3")
    )
    assert line.startswith("19:20:30.123  200  contacts.email.added")
    for part in ("profile=1001", "event=3f2a9c1e…", "sig=valid", "DUPLICATE", "attempt=2",
                 "OUT-OF-ORDER", "latency=12ms", "fault=fail-first 1/3"):  # fmt: skip
        assert part in line


def test_format_line_of_a_reset_and_a_refusal() -> None:
    assert " RST  " in format_line(verdict(status=None, fault="step 4 1/1"))
    refused = format_line(verdict(status=401, signature="invalid", reason="too_old", detail="old"))
    assert "(too_old: old)" in refused


def test_format_line_shortens_what_a_request_chose() -> None:
    huge = "x" * 1_000_000
    line = format_line(
        verdict(event_type=huge, profile_id=huge, detail=huge, reason="not_json", status=400)
    )
    assert len(line) < 600
    assert "x" * 59 + "…" in line
