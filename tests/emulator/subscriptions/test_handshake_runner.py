"""The handshake runner against a real store and real endpoints (no emulator around it).

Retry delays and the manual-validation window pass on a FakeClock (instantly); HTTP waits are real.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from prefctl.clock import Clock, FakeClock, SystemClock
from prefctl.dispatcher.handshake import (
    MANUAL_EXPIRED,
    HandshakeRunner,
    HandshakeTimings,
    ManualValidation,
    confirm_validation,
)
from prefctl.emulator.app import EmulatorContext
from prefctl.store import subscriptions as store
from prefctl.store.db import transaction
from prefctl.store.subscriptions import SubscriptionRecord
from prefctl.store.timestamps import epoch
from tests.emulator.subscriptions.endpoints import Receiver, stub_endpoint
from tests.helpers import free_port, wait_until
from tests.store.service_helpers import ACCOUNT, open_service_store, subscription_body

API_URL = "http://127.0.0.1:8750/api/v1"
QUICK = HandshakeTimings(response_timeout=5.0)


@pytest.fixture(scope="module")
def emulator_backend() -> str:
    """No running emulator here: the runner works on a SQLite store of its own (``ctx``)."""
    return "sqlite"


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[EmulatorContext]:
    """Only for its per-thread store connections, as the emulator hands them to the runner."""
    open_service_store(tmp_path / "store.db").close()
    context = EmulatorContext(store_path=tmp_path / "store.db", base_url="http://127.0.0.1:8750")
    yield context
    context.close()


def fake_clock() -> FakeClock:
    return FakeClock(datetime.now(UTC))


def create(ctx: EmulatorContext, url: str, name: str = "CRM sync") -> int:
    conn = ctx.connection()
    with transaction(conn):
        record = store.create_subscription(
            conn, ACCOUNT, subscription_body(url, name=name), actor="admin", now=time.time()
        )
    return record.id


def read(ctx: EmulatorContext, subscription_id: int) -> SubscriptionRecord:
    record = store.get_subscription(ctx.connection(), ACCOUNT, subscription_id)
    assert record is not None
    return record


def runner_for(
    ctx: EmulatorContext, clock: Clock, timings: HandshakeTimings = QUICK
) -> HandshakeRunner:
    return HandshakeRunner(
        ctx.connection, clock=clock, rng=random.Random(4), api_url=API_URL, timings=timings
    )


async def reaches(
    ctx: EmulatorContext, subscription_id: int, state: str, timeout: float = 10.0
) -> SubscriptionRecord:
    deadline = time.monotonic() + timeout
    while True:
        record = await asyncio.to_thread(read, ctx, subscription_id)
        if record.provisioning_state == state:
            return record
        if time.monotonic() > deadline:
            raise AssertionError(f"still {record.provisioning_state}, not {state}")
        await asyncio.sleep(0.01)


def provision(
    ctx: EmulatorContext,
    subscription_id: int,
    state: str,
    *,
    clock: Clock | None = None,
    timings: HandshakeTimings = QUICK,
) -> SubscriptionRecord:
    """Run a runner (which resumes the Creating subscription) until it reaches ``state``."""

    async def main() -> SubscriptionRecord:
        async with runner_for(ctx, clock or fake_clock(), timings).running():
            return await reaches(ctx, subscription_id, state)

    return asyncio.run(main())


def test_handshake_sync_receiver_succeeds(ctx: EmulatorContext, receiver: Receiver) -> None:
    subscription_id = create(ctx, receiver.url)
    record = provision(ctx, subscription_id, "Succeeded")
    (verdict,) = receiver.handshakes(subscription_id)
    assert verdict.status == 200
    assert record.receives_events
    assert record.provisioned_at is not None
    assert record.handshake.last_error is None


def test_handshake_message_is_unsigned_and_carries_the_validation_url(
    ctx: EmulatorContext,
) -> None:
    with stub_endpoint(echo=True) as stub:
        subscription_id = create(ctx, stub.url)
        provision(ctx, subscription_id, "Succeeded")
    (message,) = stub.requests
    assert message["EventType"] == "subscription.validation"
    assert (message["SubscriptionId"], message["ClientId"]) == (subscription_id, ACCOUNT)
    assert message["data"]["validationUrl"].startswith(API_URL + "/validation/")
    assert "service-webhook" not in {name.lower() for name in stub.headers[0]}


def test_handshake_manual_receiver_awaits_then_get_succeeds(
    ctx: EmulatorContext, manual_receiver: Receiver
) -> None:
    subscription_id = create(ctx, manual_receiver.url)
    waiting = provision(ctx, subscription_id, "AwaitingManualAction", clock=SystemClock())
    (verdict,) = manual_receiver.handshakes(subscription_id)
    token = (verdict.validation_url or "").rsplit("/", 1)[-1]
    assert waiting.handshake.validation_expires_at == pytest.approx(time.time() + 300, abs=5)

    outcome, record = confirm_validation(ctx.connection(), token, now=time.time())
    assert outcome is ManualValidation.SUCCEEDED
    assert record is not None
    assert record.provisioning_state == "Succeeded"
    again, _ = confirm_validation(ctx.connection(), token, now=time.time())
    assert again is ManualValidation.UNKNOWN


def test_handshake_manual_without_get_fails_after_five_minutes(
    ctx: EmulatorContext, manual_receiver: Receiver
) -> None:
    clock = fake_clock()
    started = clock.now()
    subscription_id = create(ctx, manual_receiver.url)
    record = provision(ctx, subscription_id, "Failed", clock=clock)
    assert record.handshake.last_error == MANUAL_EXPIRED
    assert (clock.now() - started).total_seconds() >= 300
    # The link is kept: a GET after the window learns it expired (410), not "unknown" (404).
    token = record.handshake.validation_token
    assert token is not None
    outcome, _ = confirm_validation(ctx.connection(), token, now=epoch(clock.now()))
    assert outcome is ManualValidation.EXPIRED
    assert read(ctx, subscription_id).provisioning_state == "Failed"


def test_validation_get_after_the_window_fails_the_subscription(
    ctx: EmulatorContext, manual_receiver: Receiver
) -> None:
    subscription_id = create(ctx, manual_receiver.url)
    waiting = provision(ctx, subscription_id, "AwaitingManualAction", clock=SystemClock())
    expires_at = waiting.handshake.validation_expires_at
    assert expires_at is not None
    assert waiting.handshake.validation_token is not None

    outcome, _ = confirm_validation(
        ctx.connection(), waiting.handshake.validation_token, now=expires_at + 1
    )
    assert outcome is ManualValidation.EXPIRED
    assert read(ctx, subscription_id).provisioning_state == "Failed"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"status": 202}, "answered 202, not 200 (202 is not accepted: only 200 is)"),
        ({"body": b'{"validationResponse": "not-the-code"}'}, "is not the validationCode sent"),
        ({"hang": True}, "no answer within 0.3 s"),
    ],
    ids=["202", "wrong-code", "no-answer"],
)
def test_handshake_bad_answers_fail_after_three_attempts(
    ctx: EmulatorContext, answer: dict[str, object], reason: str
) -> None:
    clock = fake_clock()
    started = clock.now()
    with stub_endpoint(**answer) as stub:  # type: ignore[arg-type]
        subscription_id = create(ctx, stub.url)
        record = provision(
            ctx, subscription_id, "Failed", clock=clock, timings=HandshakeTimings(0.3)
        )
    assert len(stub.requests) == 3
    assert record.handshake.attempts == 3
    assert record.handshake.last_error is not None
    assert record.handshake.last_error.startswith("3 handshake attempts failed; the last ")
    assert reason in record.handshake.last_error
    assert (clock.now() - started).total_seconds() == pytest.approx(10)  # two 5 s pauses


def test_handshake_under_a_time_scale_names_the_rules_30_s_not_the_scaled_wait(
    ctx: EmulatorContext,
) -> None:
    timings = HandshakeTimings.scaled(lambda seconds: seconds / 100)  # --time-scale 100
    with stub_endpoint(hang=True) as stub:
        subscription_id = create(ctx, stub.url)
        record = provision(ctx, subscription_id, "Failed", clock=fake_clock(), timings=timings)
    assert record.handshake.last_error is not None
    assert record.handshake.last_error.endswith("the last no answer within 30 s")


def test_handshake_refused_connection_fails_after_three_attempts(ctx: EmulatorContext) -> None:
    url = f"http://127.0.0.1:{free_port()}/hooks"
    subscription_id = create(ctx, url)
    record = provision(ctx, subscription_id, "Failed")
    assert record.handshake.attempts == 3
    assert record.handshake.last_error == (
        "3 handshake attempts failed; the last could not connect: "
        f"nothing is listening at {url} (connection refused)"
    )


def test_handshake_runner_resumes_creating_and_updating_after_restart(
    ctx: EmulatorContext, receiver: Receiver
) -> None:
    creating = create(ctx, receiver.url, name="a")
    updating = create(ctx, "http://127.0.0.1:9/old", name="b")
    conn = ctx.connection()
    with transaction(conn):
        store.replace_subscription(
            conn,
            ACCOUNT,
            updating,
            subscription_body(receiver.url + "?name=b", name="b"),
            actor="admin",
            now=time.time(),
        )
    assert read(ctx, updating).provisioning_state == "Updating"

    async def main() -> None:
        async with runner_for(ctx, fake_clock()).running():
            await reaches(ctx, creating, "Succeeded")
            await reaches(ctx, updating, "Succeeded")

    asyncio.run(main())


def test_handshake_runner_restart_keeps_the_manual_window(
    ctx: EmulatorContext, manual_receiver: Receiver
) -> None:
    subscription_id = create(ctx, manual_receiver.url)
    waiting = provision(ctx, subscription_id, "AwaitingManualAction", clock=SystemClock())
    expires_at = waiting.handshake.validation_expires_at
    assert expires_at is not None

    clock = fake_clock()  # the restarted runner waits out the stored window, not a new one
    record = provision(ctx, subscription_id, "Failed", clock=clock)
    assert epoch(clock.now()) == pytest.approx(expires_at, abs=0.01)
    assert record.handshake.last_error == MANUAL_EXPIRED
    assert len(manual_receiver.handshakes(subscription_id)) == 1  # no second handshake


def test_handshake_url_change_mid_run_drops_the_stale_run(
    ctx: EmulatorContext, receiver: Receiver
) -> None:
    with stub_endpoint(hang=True) as stub:
        subscription_id = create(ctx, stub.url)

        async def main() -> SubscriptionRecord:
            runner = runner_for(ctx, SystemClock(), HandshakeTimings(response_timeout=5.0))
            async with runner.running():
                await asyncio.to_thread(wait_until, lambda: stub.requests)
                conn = ctx.connection()
                with transaction(conn):
                    store.replace_subscription(
                        conn,
                        ACCOUNT,
                        subscription_id,
                        subscription_body(receiver.url),
                        actor="admin",
                        now=time.time(),
                    )
                runner.notify(ACCOUNT, subscription_id)
                return await reaches(ctx, subscription_id, "Succeeded")

        record = asyncio.run(main())
    assert record.url == receiver.url
    assert record.handshake.last_error is None
    assert len(stub.requests) == 1


def test_handshake_runner_notify_provisions_a_new_subscription(
    ctx: EmulatorContext, receiver: Receiver
) -> None:
    async def main() -> SubscriptionRecord:
        runner = runner_for(ctx, fake_clock())
        async with runner.running():
            subscription_id = await asyncio.to_thread(create, ctx, receiver.url)
            runner.notify(ACCOUNT, subscription_id)
            return await reaches(ctx, subscription_id, "Succeeded")

    assert asyncio.run(main()).receives_events


def test_handshake_url_httpx_cannot_send_fails_with_the_reason(ctx: EmulatorContext) -> None:
    subscription_id = create(ctx, "http://hooks.example/\x00")
    record = provision(ctx, subscription_id, "Failed")
    assert "the Url cannot be requested" in (record.handshake.last_error or "")
