"""``prefctl simulate SCENARIO.toml``: hours of deliveries on a virtual clock, in seconds.

    prefctl simulate docs/examples/outage.toml
    prefctl simulate day.toml --seed 3 -o json > report.json

The run is ``sim.run.simulate`` (the real engine on a FakeClock and an in-memory store); this
module renders its report: summary tables and a chart of outcomes over time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import get_state

if TYPE_CHECKING:
    from rich.console import RenderableType

    from prefctl.sim.scenario import Scenario

# A run this big shows a progress bar (deliveries expected).
_PROGRESS_FROM = 5_000
_MIN_BAR, _MAX_BAR = 12, 60
# The counts beside the bar, with headers short enough for 80 columns.
_SHORT = {
    "delivered": "OK",
    "failed": "Fail",
    "timed_out": "T/O",
    "skipped": "Skip",
    "dead_lettered": "Dead",
}
# How each outcome is drawn in the chart: character and colour (the character alone without colour).
_MARKS = {
    "delivered": ("█", "green"),
    "failed": ("▒", "red"),
    "timed_out": ("░", "yellow"),
    "skipped": ("·", "blue"),
    "dead_lettered": ("x", "magenta"),
}


def register(root: typer.Typer) -> None:
    root.command("simulate")(simulate_scenario)


def simulate_scenario(
    scenario: Annotated[
        Path,
        typer.Argument(help="The scenario file (TOML; see docs/simulate.md).", show_default=False),
    ],
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", help="Run under this seed instead of the file's.", show_default=False
        ),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="Also write the report as one self-contained HTML file with charts.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a scenario on a virtual clock with the real dispatcher, and report what happened.

    The scenario sets the account settings, the load and each endpoint's behaviour (latency, status mix, outages).
    The report gives deliveries, the attempt histogram, dead letters by reason, alerts, latency percentiles, probation periods and outcomes over time.
    The same scenario and seed always give the same report (-o json is byte-identical).
    """
    from prefctl.sim.run import simulate
    from prefctl.sim.scenario import load_scenario

    state = get_state()
    model = load_scenario(scenario).with_seed(seed)
    expected = model.load.events_per_minute * model.load.duration_minutes
    if expected * len(model.subscriptions) < _PROGRESS_FROM:
        report = simulate(model)
    else:
        total = int(model.horizon_minutes)
        with state.out.progress("virtual minutes", total=total) as advance:
            done = 0

            def on_progress(minutes: float) -> None:
                nonlocal done
                step = min(int(minutes), total) - done
                if step > 0:
                    advance(step)
                    done += step

            report = simulate(model, progress=on_progress)
            advance(total - done)
    if html is not None:
        _write_html(html, report, model)
    if state.json:
        state.out.json(report)
        return
    _render(report)


def _write_html(path: Path, report: dict[str, Any], model: Scenario) -> None:
    from prefctl.errors import UsageError
    from prefctl.sim.html import outages_of, render_html

    try:
        path.write_text(render_html(report, outages_of(model)), encoding="utf-8")
    except OSError as exc:
        from prefctl.private_files import os_reason

        raise UsageError(f"cannot write the HTML report {path}: {os_reason(exc)}") from None
    get_state().out.info(f"HTML report written to {path}")


def _render(report: dict[str, Any]) -> None:
    out = get_state().out
    deliveries, latency = report["deliveries"], report["latency_seconds"]
    total = deliveries["total"] or 1
    out.record(
        {
            "scenario": report["scenario"]["name"],
            "seed": report["scenario"]["seed"],
            "virtual time": f"{report['run']['start']} → {report['run']['end']}"
            f" ({_minutes(report['run']['minutes'])})",
            "events": report["events"],
            "deliveries": deliveries["total"],
            "delivered": f"{deliveries['delivered']} ({100 * deliveries['delivered'] / total:.1f}%)",
            "first attempt": deliveries["delivered_first_time"],
            "retried": deliveries["retried"],
            "dead-lettered": f"{deliveries['dead_lettered']}"
            f" ({100 * deliveries['dead_lettered'] / total:.1f}%)",
            "duplicate 200s": f"{deliveries['duplicates']} (for deliveries already delivered)",
            **(
                {"200s after a dead letter": deliveries["delivered_after_dead_letter"]}
                if deliveries["delivered_after_dead_letter"]
                else {}
            ),
            "attempts": f"{report['attempts']['counted']} sent, {report['attempts']['skipped']}"
            " skipped on probation",
            "latency p50 / p90 / p99 / max": " / ".join(
                _seconds(latency[key]) for key in ("p50", "p90", "p99", "max")
            ),
            "alerts": len(report["alerts"]),
        },
        title="Simulation",
    )
    _tables(report)
    if out.stdout_is_terminal:  # a pipe gets the tables' fields; the bars are for eyes
        out.line("")
        out.render(_chart(report["timeline"], out.out.width))


def _tables(report: dict[str, Any]) -> None:
    out = get_state().out
    out.line("")
    out.table(
        report["attempts"]["histogram"],
        [("attempts", "ATTEMPTS"), ("delivered", "DELIVERED"), ("dead_lettered", "DEAD-LETTERED")],
        title="Attempts per delivery",
    )
    reasons = report["dead_letters"]["by_reason"]
    if reasons:
        out.line("")
        out.table(
            [{"reason": k, "count": v} for k, v in reasons.items()],
            [("reason", "REASON"), ("count", "DEAD LETTERS")],
            title="Dead letters by reason",
        )
    if report["alerts"]:
        out.line("")
        out.table(
            [{**a, "minute": _minutes(a["minute"])} for a in report["alerts"]],
            [
                ("minute", "AT"),
                ("subscription", "SUBSCRIPTION"),
                ("kind", "KIND"),
                ("subject", "SUBJECT"),
            ],
            title="Alerts",
        )
    if report["probation"]:
        out.line("")
        out.table(
            [
                {
                    **p,
                    "from": _minutes(p["start_minute"]),
                    "to": "end of run" if p["end_minute"] is None else _minutes(p["end_minute"]),
                    "length": "" if p["minutes"] is None else _minutes(p["minutes"]),
                }
                for p in report["probation"]
            ],
            [
                ("subscription", "SUBSCRIPTION"),
                ("from", "FROM"),
                ("to", "TO"),
                ("length", "LENGTH"),
            ],
            title="Probation periods",
        )
    if len(report["subscriptions"]) > 1:
        out.line("")
        out.table(
            [
                {
                    "name": s["name"],
                    "total": s["deliveries"]["total"],
                    "delivered": s["deliveries"]["delivered"],
                    "retried": s["deliveries"]["retried"],
                    "dead": s["deliveries"]["dead_lettered"],
                    "p99": _seconds(s["latency_seconds"]["p99"]),
                }
                for s in report["subscriptions"]
            ],
            [
                ("name", "SUBSCRIPTION"),
                ("total", "DELIVERIES"),
                ("delivered", "DELIVERED"),
                ("retried", "RETRIED"),
                ("dead", "DEAD-LETTERED"),
                ("p99", "Latency p99"),
            ],
            title="Per subscription",
        )


def _chart(timeline: dict[str, Any], width: int) -> RenderableType:
    """Outcomes over time: one row per bucket, a stacked bar of the deliveries delivered and
    dead-lettered in it and of the attempts that failed, timed out or were skipped."""
    from rich.table import Table
    from rich.text import Text

    from prefctl.sim.report import OUTCOME_KEYS

    buckets = timeline["buckets"]
    peak = max((sum(b[k] for k in OUTCOME_KEYS) for b in buckets), default=0) or 1
    # What the other columns take, so the table fits the terminal.
    bar_width = max(_MIN_BAR, min(_MAX_BAR, width - 52))
    legend = "  ".join(f"{mark} {key.replace('_', ' ')}" for key, (mark, _) in _MARKS.items())
    table = Table(
        title=f"Outcomes per {_minutes(timeline['bucket_minutes'])} of virtual time",
        caption=legend,
        show_edge=False,
        header_style="bold",
        pad_edge=False,
    )
    table.add_column("From", justify="right", no_wrap=True)
    table.add_column("Events", justify="right", no_wrap=True)
    table.add_column("Outcomes", no_wrap=True, min_width=bar_width)
    for header in _SHORT.values():
        table.add_column(header, justify="right", no_wrap=True)
    for bucket in buckets:
        bar = Text()
        for key in OUTCOME_KEYS:
            mark, style = _MARKS[key]
            bar.append(mark * _cells(bucket[key], peak, bar_width), style=style)
        table.add_row(
            _minutes(bucket["start_minute"]),
            str(bucket["events"]),
            bar,
            *[str(bucket[key]) for key in _SHORT],
        )
    return table


def _cells(count: int, peak: int, width: int) -> int:
    """Bar cells for ``count``: proportional, and at least one for anything at all."""
    if count <= 0:
        return 0
    return max(1, round(count * (width - len(_MARKS)) / peak))


def _minutes(minutes: float) -> str:
    from prefctl.sim.explain import format_minutes

    return format_minutes(minutes)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    from prefctl.sim.explain import format_duration

    return format_duration(value)
