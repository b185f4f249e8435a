"""Fault plans: the flags, the TOML file and the event-by-event walk."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from prefctl.errors import UsageError
from prefctl.receiver.faults import FaultPlan, FaultState, FaultStep, load_plan, plan_from_options


def statuses(plan: FaultPlan | None, count: int, seed: int = 7) -> list[object]:
    assert plan is not None
    state = FaultState(plan, random.Random(seed))
    out: list[object] = []
    for _ in range(count):
        action = state.next()
        if action is None:
            out.append("ok")
        elif action.close:
            out.append("close")
        else:
            out.append(action.status if action.status is not None else f"ok+{action.delay:g}s")
    return out


def test_plan_from_options_without_faults_is_none() -> None:
    assert plan_from_options() is None


def test_fail_first_then_respond_applies_in_order() -> None:
    plan = plan_from_options(fail_first=2, fail_status=503, respond=404)
    assert statuses(plan, 4) == [503, 503, 404, 404]


def test_fail_rate_is_seeded_and_roughly_the_share_asked() -> None:
    plan = plan_from_options(fail_rate=0.3)
    first, again = statuses(plan, 1000, seed=3), statuses(plan, 1000, seed=3)
    assert first == again
    assert 250 <= first.count(500) <= 350


def test_delay_applies_to_every_event() -> None:
    assert statuses(plan_from_options(delay=2), 2) == ["ok+2s", "ok+2s"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fail_rate": 1.5}, "--fail-rate"),
        ({"fail_first": -1}, "--fail-first"),
        ({"respond": 700}, "--respond"),
        ({"fail_status": 99}, "--fail-status"),
        ({"delay": -1}, "--delay"),
    ],
)
def test_plan_from_options_rejects_bad_values(options: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        plan_from_options(**options)  # type: ignore[arg-type]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def test_load_plan_runs_the_steps_then_answers_normally(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
steps = [
  { count = 3, status = 503 },
  { count = 1, delay = 35 },
  { count = 2, status = 200 },
  { close = true },
]
""",
    )
    plan = load_plan(path)
    assert statuses(plan, 9) == [503, 503, 503, "ok+35s", 200, 200, "close", "ok", "ok"]


def test_load_plan_after_repeat_and_after_step(tmp_path: Path) -> None:
    repeat = write(tmp_path, 'steps = [{ status = 500 }, { count = 1 }]\nafter = "repeat"\n')
    assert statuses(load_plan(repeat), 5) == [500, "ok", 500, "ok", 500]
    forever = write(tmp_path, "steps = [{ status = 429 }]\nafter = { status = 503, delay = 1 }\n")
    assert statuses(load_plan(forever), 3) == [429, 503, 503]


def test_load_plan_as_array_of_tables(tmp_path: Path) -> None:
    path = write(tmp_path, "[[steps]]\ncount = 2\nstatus = 502\n")
    assert statuses(load_plan(path), 3) == [502, 502, "ok"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("steps = [{ status = 503 }, { staus = 500 }]", "step 2: unknown key 'staus'"),
        ("steps = [{ count = 0, status = 503 }]", "step 1: count must be"),
        ("steps = [{ status = 99 }]", "step 1: status must be"),
        ("steps = [{ close = true, status = 500 }]", "step 1: close resets"),
        ("steps = [{ delay = 'long' }]", "step 1: delay must be"),
        ("steps = []", "non-empty list 'steps'"),
        ('steps = [{ status = 500 }]\nafter = "sometimes"', "after must be"),
        ("steps = [{ status = 500 }]\nafter = { count = 2 }", "after: unknown key 'count'"),
        ("step = []", "unknown key 'step'"),
        ("steps = [", "not valid TOML"),
    ],
)
def test_load_plan_bad_file_is_one_line_naming_the_step(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(UsageError) as info:
        load_plan(write(tmp_path, text))
    assert message in info.value.message
    assert "\n" not in info.value.message.strip()


def test_load_plan_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        load_plan(tmp_path / "absent.toml")


def test_fault_plan_file_with_respond_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "steps = [{ status = 500 }]")
    with pytest.raises(UsageError, match="cannot be combined"):
        plan_from_options(plan_file=path, respond=503)


def test_plan_description_reads_like_the_plan() -> None:
    plan = FaultPlan(
        steps=(FaultStep(count=3, status=503), FaultStep(close=True)),
        after=FaultStep(status=500, name="respond"),
        fail_rate=0.1,
    )
    assert plan.describe() == "3×503, 1×reset, then 500, fail-rate 0.1 → 500"
