"""What a hostile client can make the receiver hold (issue 18, points 3 and 4), on a real server."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from prefctl.receiver import ReceiverConfig, start_in_thread
from prefctl.receiver.tracker import MAX_ID_CHARS
from prefctl.webhooks.signature import sign_header
from tests.receiver.asgi import CREDS, event_body


def _signed() -> dict[str, str]:
    return {
        "content-type": "application/json",
        "service-webhook": sign_header(CREDS, datetime.now(UTC)),
    }


def test_receiver_megabyte_event_ids_are_remembered_by_digest_not_whole() -> None:
    with (
        start_in_thread(ReceiverConfig(port=0, credentials=CREDS)) as running,
        httpx.Client(timeout=30) as http,
    ):
        for n in range(30):
            long_id = f"{n:07d}" + "x" * 1_000_000
            answer = http.post(running.webhook_url, content=event_body(long_id), headers=_signed())
            assert answer.status_code == 200
        again = http.post(
            running.webhook_url, content=event_body(f"{0:07d}" + "x" * 1_000_000), headers=_signed()
        )
        normal = http.post(running.webhook_url, content=event_body("evt-normal"), headers=_signed())
        health = http.get(running.url + "/healthz")
        verdicts = running.wait_for(32)
        tracked = running.tracked_bytes

    assert (again.status_code, normal.status_code, health.status_code) == (200, 200, 200)
    assert verdicts[-2].duplicate  # still recognised, by its digest
    assert f"real ones have at most {MAX_ID_CHARS}" in (verdicts[0].detail or "")
    assert verdicts[-1].detail is None
    assert tracked < 32 * 1024  # 31 ids of a megabyte each, held as 16-byte digests
