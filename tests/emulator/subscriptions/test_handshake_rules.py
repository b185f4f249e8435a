"""The provisioning table of docs/subscriptions.md as a pure function, and its durations."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefctl.dispatcher.handshake import AttemptReply, HandshakeTimings, next_step
from prefctl.emulator.app import EmulatorContext
from prefctl.emulator.provisioning import handshake_runner
from prefctl.webhooks.handshake import ReplyOutcome

VALIDATED = AttemptReply(ReplyOutcome.VALIDATED, "answered 200 with the right validationResponse")
MANUAL = AttemptReply(ReplyOutcome.MANUAL, "answered 200 without validationResponse")
ACCEPTED = AttemptReply(ReplyOutcome.REJECTED, "answered 202, not 200")
WRONG = AttemptReply(ReplyOutcome.WRONG_CODE, "validationResponse 'x' is not the code sent")
SILENT = AttemptReply(None, "no answer within 30 s")


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_next_step_right_code_succeeds_on_any_attempt(attempt: int) -> None:
    assert next_step(VALIDATED, attempt).state == "Succeeded"


def test_next_step_200_without_code_awaits_manual_action() -> None:
    step = next_step(MANUAL, 1)
    assert (step.state, step.error) == ("AwaitingManualAction", None)


@pytest.mark.parametrize("reply", [ACCEPTED, WRONG, SILENT])
def test_next_step_failed_attempt_retries_before_the_third(reply: AttemptReply) -> None:
    for attempt in (1, 2):
        step = next_step(reply, attempt)
        assert step.state is None
        assert step.error == f"attempt {attempt} of 3: {reply.message}"


@pytest.mark.parametrize("reply", [ACCEPTED, WRONG, SILENT])
def test_next_step_third_failed_attempt_fails_with_the_reason(reply: AttemptReply) -> None:
    step = next_step(reply, 3)
    assert step.state == "Failed"
    assert step.error == f"3 handshake attempts failed; the last {reply.message}"


def test_handshake_timings_scaled_divides_every_duration() -> None:
    timings = HandshakeTimings.scaled(lambda seconds: seconds / 60)
    assert (timings.response_timeout, timings.retry_delay, timings.validation_window) == (
        0.5,
        5 / 60,
        5.0,
    )
    assert timings.max_attempts == 3


def test_emulator_runner_scales_handshake_durations_by_time_scale(tmp_path: Path) -> None:
    ctx = EmulatorContext(store_path=tmp_path / "x.db", base_url="http://e", time_scale=60)
    assert handshake_runner(ctx).timings == HandshakeTimings(0.5, 5 / 60, 5.0, 3, 30)
    assert handshake_runner(ctx) is handshake_runner(ctx)  # one per emulator
