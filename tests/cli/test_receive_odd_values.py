"""``prefctl receive`` keeps running on values it cannot write as they came (docs/operations.md)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.cli.test_receive import FLAGS, hashkey, post, run_receiving

__all__ = ["hashkey"]  # the autouse fixture that sets PREFCTL_HASHKEY

BIG = 123456789012345678901234567890  # beyond 64 bits: valid JSON that orjson cannot write
DEEP = "[" * 300 + "]" * 300  # nesting orjson reads but cannot write back


def test_receive_shows_values_it_cannot_write_as_json_text_and_keeps_running(
    tmp_path: Path,
) -> None:
    recording = tmp_path / "rec.ndjson"
    bodies = [
        f'{{"EventType":"x","EventId":"big","ProfileId":{BIG}}}',
        f'{{"EventType":"x","EventId":"deep","SubscriptionId":{DEEP},"Data":{DEEP}}}',
    ]

    def send(url: str) -> None:
        for body in bodies:  # unsigned: 401, and shown
            answer = httpx.post(url, content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 401
        assert post(url, "evt-after") == 200

    result = run_receiving(
        "-o", "json", *FLAGS, "--exit-after", "1", "--timeout", "20", "--record", str(recording),
        send=send,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    _, big, deep, after, stopped = result.ndjson
    assert (big["event_id"], big["status"], big["profile_id"]) == ("big", 401, str(BIG))
    assert (deep["event_id"], deep["subscription_id"]) == ("deep", DEEP)
    assert after["event_id"] == "evt-after"
    assert stopped["reason"] == "exit_after"
    records = [json.loads(line) for line in recording.read_text().splitlines()]
    assert [r["verdict"]["event_id"] for r in records] == ["big", "deep", "evt-after"]
    assert records[1]["body"] is None
    assert records[1]["body_text"].startswith('{"EventType":"x","EventId":"deep"')


def test_receive_table_lines_show_control_characters_escaped() -> None:
    # An unsigned request may carry anything: it must not drive the terminal or forge lines.
    hostile = {"EventType": "x\u001b[2J\u001b]0;pwned\u0007", "EventId": "a\nFAKE LINE"}

    def send(url: str) -> None:
        answer = httpx.post(url, json=hostile)
        assert answer.status_code == 401
        assert post(url, "evt-after") == 200

    result = run_receiving(*FLAGS, "--exit-after", "1", "--timeout", "20", send=send)
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert "\x07" not in result.stdout
    lines = result.stdout.splitlines()
    assert not any(line.startswith("FAKE LINE") for line in lines)
    (hostile_line,) = [line for line in lines if "401" in line]
    assert "x\\x1b[2J\\x1b]0;pwned\\x07" in hostile_line
