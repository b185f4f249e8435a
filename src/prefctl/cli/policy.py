"""``prefctl policy explain``: the attempt timeline and what each answer causes.

    prefctl policy explain                            defaults: 30 attempts, TTL 240 min
    prefctl policy explain --max-attempts 5 --seed 7  one delivery's jittered timeline
    prefctl policy explain -o json
    prefctl policy explain --alert-frequency-max 60   when the alerts of a failing endpoint go

The attempt tables are computed by ``dispatcher/policy.py`` itself, the alerts by the real alert
monitor (``sim/explain.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import get_state
from prefctl.cli._tables import columns
from prefctl.cli.app import new_group
from prefctl.errors import UsageError

if TYPE_CHECKING:
    from prefctl.sim.explain import Explanation

_DEFAULT_MAX_ATTEMPTS = 30
_DEFAULT_TTL_MINUTES = 240
_ALERT_HELP = "(minutes; default: the account default)."


def register(root: typer.Typer) -> None:
    group = new_group(
        "policy", "The delivery policy: retries, dead letters and what each answer causes."
    )
    group.command("explain")(explain_policy)
    root.add_typer(group)


def explain_policy(
    max_attempts: Annotated[
        int,
        typer.Option(
            "--max-attempts",
            help="MaxDeliveryAttempts to explain (1 to 30).",
        ),
    ] = _DEFAULT_MAX_ATTEMPTS,
    ttl: Annotated[
        int,
        typer.Option(
            "--ttl",
            help="EventTimeToLiveMinutes to explain (1 to 240).",
        ),
    ] = _DEFAULT_TTL_MINUTES,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Draw the jitter from random.Random(SEED); without it the nominal delays show.",
            show_default=False,
        ),
    ] = None,
    alert_frequency_min: Annotated[
        int | None,
        typer.Option(
            "--alert-frequency-min",
            help="AlertFrequencyMin: the window in which AlertThresholdMin dead letters alert "
            + _ALERT_HELP,
            show_default=False,
        ),
    ] = None,
    alert_frequency_max: Annotated[
        int | None,
        typer.Option(
            "--alert-frequency-max",
            help="AlertFrequencyMax: at most one alert per this many minutes " + _ALERT_HELP,
            show_default=False,
        ),
    ] = None,
    alert_threshold_min: Annotated[
        int | None,
        typer.Option(
            "--alert-threshold-min",
            help="AlertThresholdMin: dead letters within the window that alert (default 1).",
            show_default=False,
        ),
    ] = None,
    alert_threshold_max: Annotated[
        int | None,
        typer.Option(
            "--alert-threshold-max",
            help="AlertThresholdMax: dead letters after which alerting pauses (default 15).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Print the exact attempt timeline of a delivery that keeps failing, what each answer causes, and when its failure alerts go.

    Every delay comes from the dispatcher's own backoff function and every cut-off from its own check, for one delivery whose attempts all fail at once.
    Earliest and latest show the jitter's bounds.
    In the emulator, each due attempt waits for the next cycle (up to Duration seconds more).
    The alerts are those the emulator's alert rules write when events fail like that one a minute: one dead letter a minute from the cut-off on.
    """
    from prefctl.dispatcher.policy import Limits
    from prefctl.models.setting_ranges import SETTING_RANGES
    from prefctl.sim.explain import explain

    alerts = {
        name: value
        for name, value in (
            ("AlertFrequencyMin", alert_frequency_min),
            ("AlertFrequencyMax", alert_frequency_max),
            ("AlertThresholdMin", alert_threshold_min),
            ("AlertThresholdMax", alert_threshold_max),
        )
        if value is not None
    }
    given = {
        "MaxDeliveryAttempts": max_attempts,
        "EventTimeToLiveMinutes": ttl,
        **alerts,
    }
    floors = {name: SETTING_RANGES[name].default for name in SETTING_RANGES} | given
    for name, value in given.items():
        problem = SETTING_RANGES[name].check(value, floors)
        if problem:
            raise UsageError(f"{_flag(name)}: {problem}")
    explanation = explain(Limits(max_attempts=max_attempts, ttl_minutes=ttl), seed, alerts)
    state = get_state()
    if state.json:
        state.out.json(explanation.to_dict())
        return
    _render(explanation)


# The jitter's bounds go first; the result and why wrap: they are the point of the table.
TIMELINE_COLUMNS = columns(
    ("attempt", "ATTEMPT"),
    ("delay", "DELAY"),
    ("at", "AT"),
    ("earliest", "EARLIEST"),
    ("latest", "LATEST"),
    ("result", "RESULT"),
    drop_first=["earliest", "latest"],
    wrap=["result"],
)
OUTCOME_COLUMNS = columns(
    ("outcome", "ANSWER"),
    ("effect", "EFFECT"),
    ("retry", "NEXT ATTEMPT"),
    ("probation", "PROBATION COUNT"),
    ("explanation", "WHY"),
    drop_first=["probation", "retry"],
    wrap=["explanation"],
)
ALERT_COLUMNS = columns(
    ("alert", "ALERT"),
    ("kind", "KIND"),
    ("at", "AT"),
    ("since", "SINCE PREVIOUS"),
    ("reports", "DEAD LETTERS REPORTED"),
    wrap=["reports"],
)


def _render(explanation: Explanation) -> None:
    from prefctl.sim.explain import format_duration

    out = get_state().out
    limits, cut_off = explanation.limits, explanation.cut_off
    rows: list[dict[str, Any]] = [
        {
            "attempt": str(row.attempt),
            "delay": format_duration(row.delay_seconds) if row.attempt > 1 else "-",
            "at": format_duration(row.at_seconds),
            "earliest": format_duration(row.earliest_at_seconds),
            "latest": format_duration(row.latest_at_seconds),
            "result": "sent at EventTime" if row.attempt == 1 else "sent",
        }
        for row in explanation.timeline
    ]
    last_at = explanation.timeline[-1].at_seconds if explanation.timeline else 0.0
    rows.append(
        {
            "attempt": f"({cut_off.after_attempts + 1})",
            "delay": format_duration(cut_off.at_seconds - last_at),
            "at": format_duration(cut_off.at_seconds),
            "earliest": "",
            "latest": "",
            "result": f"{cut_off.reason}: {_why(explanation)}",
        }
    )
    jitter = "nominal jitter" if explanation.seed is None else f"jitter of seed {explanation.seed}"
    out.table(
        rows,
        TIMELINE_COLUMNS,
        title=(
            f"MaxDeliveryAttempts {limits.max_attempts}, TTL {limits.ttl_minutes} min, {jitter};"
            " times after EventTime"
        ),
    )
    low, high = cut_off.attempts_range
    if low != high:
        out.line(f"With the jitter at its bounds, {low} to {high} attempts go out.")
    out.line("")
    out.table(
        [
            {
                **row.to_dict(),
                "retry": ""
                if row.retry_after_seconds is None
                else format_duration(row.retry_after_seconds),
                "probation": row.counts_toward_probation,
            }
            for row in explanation.outcomes
        ],
        OUTCOME_COLUMNS,
        title="What each answer to a first attempt causes",
    )
    out.line("")
    _render_alerts(explanation)


def _flag(setting: str) -> str:
    """The option of a setting: ``--max-attempts``, ``--ttl``, ``--alert-frequency-min``…"""
    special = {"MaxDeliveryAttempts": "--max-attempts", "EventTimeToLiveMinutes": "--ttl"}
    if setting in special:
        return special[setting]
    import re

    return "--" + re.sub(r"(?<!^)(?=[A-Z])", "-", setting).lower()


def _render_alerts(explanation: Explanation) -> None:
    from prefctl.sim.explain import format_duration

    out = get_state().out
    settings = explanation.alert_settings
    rows: list[dict[str, Any]] = []
    previous: float | None = None
    for alert in explanation.alerts:
        rows.append(
            {
                "alert": str(alert.sequence),
                "kind": alert.kind,
                "at": format_duration(alert.at_seconds),
                "since": "-" if previous is None else format_duration(alert.at_seconds - previous),
                "reports": f"{alert.dead_letters} ({alert.incident_dead_letters} in the incident)",
            }
        )
        previous = alert.at_seconds
    out.table(
        rows,
        ALERT_COLUMNS,
        title="Failure alerts if one event a minute fails so; times after EventTime",
    )
    # Notes, not rows: on stderr, so that a pipe gets the tables' tab-separated lines alone.
    out.info(
        f"AlertFrequencyMin {settings['AlertFrequencyMin']}, AlertFrequencyMax"
        f" {settings['AlertFrequencyMax']}, AlertThresholdMin {settings['AlertThresholdMin']},"
        f" AlertThresholdMax {settings['AlertThresholdMax']}."
    )
    out.info(
        f"At most one alert per {settings['AlertFrequencyMax']} min;"
        " a paused alert is the incident's last."
    )


def _why(explanation: Explanation) -> str:
    cut_off = explanation.cut_off
    if cut_off.reason == "MaxDeliveryAttemptsExceeded":
        return f"dead-lettered, {cut_off.after_attempts} attempts made"
    return f"dead-lettered, {explanation.limits.ttl_minutes} min since EventTime"
