"""Call the receiver's real ASGI app directly: one request in, the answer and its verdicts out."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from prefctl.clock import FakeClock
from prefctl.receiver.app import Message, ReceiverApp
from prefctl.receiver.verdict import Verdict
from prefctl.webhooks.envelope import build_event, encode
from prefctl.webhooks.handshake import build_handshake
from prefctl.webhooks.signature import SigningCredentials, Verifier, sign_header

CREDS = SigningCredentials("DEMO_CORP", "events-signer", "receiver-test-hashkey")
NOW = datetime(2026, 11, 21, 19, 20, 30, 123000, tzinfo=UTC)


@dataclass
class Answer:
    status: int | None
    headers: dict[bytes, bytes]
    body: bytes
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def verdict(self) -> Verdict:
        assert len(self.verdicts) == 1, self.verdicts
        return self.verdicts[0]


def make_app(clock: FakeClock | None = None, **options: Any) -> tuple[ReceiverApp, list[Verdict]]:
    verdicts: list[Verdict] = []
    options.setdefault("verifier", Verifier(CREDS))
    app = ReceiverApp(push=verdicts.append, clock=clock or FakeClock(NOW), **options)
    return app, verdicts


def call(
    app: ReceiverApp,
    verdicts: list[Verdict],
    *,
    method: str = "POST",
    path: str = "/webhooks",
    headers: Sequence[tuple[bytes, bytes]] = (),
    body: bytes = b"",
    chunks: Sequence[bytes] | None = None,
) -> Answer:
    """Run one request through ``app`` the way uvicorn would."""
    parts = list(chunks) if chunks is not None else [body]
    sent: list[Message] = []

    async def receive() -> dict[str, Any]:
        if parts:
            chunk = parts.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(parts)}
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    async def serve() -> None:
        await app(scope, receive, send)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(name.lower(), value) for name, value in headers],
    }
    before = len(verdicts)
    asyncio.run(serve())
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    body_out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Answer(
        status=start["status"] if start else None,
        headers=dict(start["headers"]) if start else {},
        body=body_out,
        verdicts=verdicts[before:],
    )


def event_body(event_id: str = "evt-1", profile_id: int = 1001, **overrides: Any) -> bytes:
    message = build_event(
        event_id=event_id,
        event_type="contacts.email.added",
        subscription_id=12,
        client_id=CREDS.client_id,
        profile_id=profile_id,
        event_time=overrides.pop("event_time", NOW),
        original_event_time=NOW,
        data={"Address": "ann@example.com", "Type": "Personal"},
    )
    message.update(overrides)
    return encode(message)


def handshake_body(
    code: str | None = "code-123", url: str | None = "http://svc/validation/t"
) -> bytes:
    message = build_handshake(
        event_id="hs-1",
        subscription_id=12,
        client_id=CREDS.client_id,
        event_time=NOW,
        validation_code=code or "",
        validation_url=url or "",
    )
    if code is None:
        del message["data"]["validationCode"]
    if url is None:
        del message["data"]["validationUrl"]
    return encode(message)


def signed(when: datetime = NOW, creds: SigningCredentials = CREDS) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/json"),
        (b"service-webhook", sign_header(creds, when).encode()),
    ]
