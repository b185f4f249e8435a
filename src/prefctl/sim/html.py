"""``prefctl simulate … --html FILE``: the report as one self-contained HTML file.

Everything is drawn here, in Python, as inline SVG: no script, no font, no stylesheet from the
network, so the file opens offline and can be mailed or attached to a ticket. The numbers are those
of the report ``-o json`` prints (``sim.report.build_report``); every mark of a chart carries its
value in ``data-series``/``data-value`` attributes and a tooltip, so a test (or a reader with the
browser's inspector) can check the picture against the JSON.

Charts: deliveries pending over virtual time (derived from the timeline: deliveries created less
those delivered or dead-lettered, at the end of each interval), outcomes per interval (stacked),
delivery latency percentiles, dead letters by reason; probation periods and the scenario's outages
are shaded bands on the time charts and alerts are marks on them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from prefctl.sim.explain import format_duration, format_minutes
from prefctl.sim.report import OUTCOME_KEYS
from prefctl.sim.scenario import Scenario

__all__ = ["Outage", "outages_of", "render_html"]

COLORS = {
    "delivered": "#16a34a",
    "failed": "#dc2626",
    "timed_out": "#f59e0b",
    "skipped": "#3b82f6",
    "dead_lettered": "#9333ea",
}
_BACKLOG = "#0f766e"
# An outage is a solid pink band; probation, which usually overlaps it, amber stripes over it, so
# that both show where they overlap (a blend of two solid bands showed neither colour).
_OUTAGE = "#fecaca"
_PROBATION = "#94a3b8"
_HATCH_ID = "probation-hatch"
_HATCH_SIZE, _HATCH_LINE = 8, 2.5
_HATCH = (
    "<svg width='0' height='0' style='position:absolute' aria-hidden='true'><defs>"
    f"<pattern id='{_HATCH_ID}' width='{_HATCH_SIZE}' height='{_HATCH_SIZE}' "
    "patternUnits='userSpaceOnUse' patternTransform='rotate(45)'>"
    f"<rect width='{_HATCH_LINE}' height='{_HATCH_SIZE}' fill='{_PROBATION}'/></pattern>"
    "</defs></svg>"
)
# The legend's swatch of each kind of band, drawn as the band is.
_SWATCHES = {
    "outage": _OUTAGE,
    "probation": f"repeating-linear-gradient(135deg,{_PROBATION} 0 {_HATCH_LINE}px,"
    f"transparent {_HATCH_LINE}px {_HATCH_SIZE}px)",
}
_W, _H = 880, 274  # chart size
_L, _R, _T, _B = 64, 16, 14, 48  # margins: the time ticks, then the axis title, below
X_TITLE = "time since the start of the run (on the simulated clock)"


@dataclass(frozen=True, slots=True)
class Outage:
    """An outage window of one subscription's endpoint model, in minutes from the start."""

    subscription: str
    start_minute: float
    end_minute: float
    status: str


def outages_of(scenario: Scenario) -> list[Outage]:
    """The outage windows of every subscription of ``scenario``."""
    return [
        Outage(
            subscription.name,
            window.start_minute,
            window.end_minute,
            ", ".join(str(status) for status, _ in window.status_mix or ()),
        )
        for subscription in scenario.subscriptions
        for window in subscription.endpoint.outages
    ]


def render_html(report: dict[str, Any], outages: Sequence[Outage] = ()) -> str:
    """The whole HTML document of ``report`` (and the scenario's ``outages``)."""
    scenario = report["scenario"]
    title = f"prefctl simulate · {scenario['name']}"
    timeline = report["timeline"]
    span = max(
        float(report["run"]["minutes"]), len(timeline["buckets"]) * timeline["bucket_minutes"], 1.0
    )
    bands = _bands(report, outages)
    sections = [
        f"<h1>{escape(title)}</h1>",
        f"<p class='muted'>{escape(scenario.get('description') or '')}</p>",
        _summary(report),
        _section(
            "Deliveries pending over virtual time",
            _backlog_chart(report, span, bands),
            "Deliveries created (events × subscriptions that take them) less those delivered or "
            "dead-lettered, at the end of each interval.",
        ),
        _section(
            f"Outcomes per {_minutes(timeline['bucket_minutes'])} of virtual time",
            _outcome_chart(timeline, span, bands, report["alerts"]),
            "Deliveries delivered and dead-lettered by when they became final; attempts that "
            "failed, timed out or were skipped (probation) by when they were due.",
        ),
        _section(
            "Delivery latency",
            _latency_chart(report["latency_seconds"]),
            "From the event's OriginalEventTime to its delivery, nearest-rank percentiles.",
        ),
        _section("Dead letters by reason", _reason_chart(report["dead_letters"]["by_reason"])),
        _section("Alerts sent", _alerts_table(report["alerts"])),
        _section("Probation periods and outages", _bands_table(report["probation"], outages)),
        _section("Scenario and settings", _settings_table(report)),
    ]
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>"
        f"<body>{_HATCH}<main>{''.join(sections)}</main></body></html>\n"
    )


# -- pieces -----------------------------------------------------------------------------------
def _section(title: str, body: str, note: str = "") -> str:
    note_html = f"<p class='note'>{escape(note)}</p>" if note else ""
    return f"<section><h2>{escape(title)}</h2>{note_html}{body}</section>"


def _summary(report: dict[str, Any]) -> str:
    d, latency = report["deliveries"], report["latency_seconds"]
    items = [
        ("events", report["events"]),
        ("deliveries", d["total"]),
        ("delivered", d["delivered"]),
        ("first attempt", d["delivered_first_time"]),
        ("retried", d["retried"]),
        ("dead-lettered", d["dead_lettered"]),
        ("pending at the end", d["pending"]),
        ("latency p99", _seconds(latency["p99"])),
        ("alerts", len(report["alerts"])),
    ]
    cards = "".join(
        f"<div class='card' data-series='summary' data-key='{escape(label)}' "
        f"data-value='{escape(str(value))}'><b>{escape(str(value))}</b>"
        f"<span>{escape(label)}</span></div>"
        for label, value in items
    )
    run = report["run"]
    when = f"virtual time {run['start']} → {run['end']} ({_minutes(run['minutes'])})"
    return f"<p class='muted'>{escape(when)}</p><div class='cards'>{cards}</div>"


@dataclass(frozen=True, slots=True)
class _Band:
    start: float
    end: float
    kind: str  # "outage" or "probation"
    label: str

    @property
    def fill(self) -> str:
        return _OUTAGE if self.kind == "outage" else f"url(#{_HATCH_ID})"


def _bands(report: dict[str, Any], outages: Sequence[Outage]) -> list[_Band]:
    end_of_run = float(report["run"]["minutes"])
    bands = [
        _Band(o.start_minute, o.end_minute, "outage", f"outage of {o.subscription} ({o.status})")
        for o in outages
    ]
    for period in report["probation"]:
        end = period["end_minute"] if period["end_minute"] is not None else end_of_run
        label = f"probation of {period['subscription']}"
        bands.append(_Band(period["start_minute"], end, "probation", label))
    return bands  # outages first: probation's stripes are drawn over them


class _Plot:
    """A time chart's coordinates: minutes on x, counts on y."""

    def __init__(self, span: float, peak: float) -> None:
        self.span = span
        self.top = _nice(peak)

    def x(self, minute: float) -> float:
        return _L + (_W - _L - _R) * min(max(minute, 0.0), self.span) / self.span

    def y(self, value: float) -> float:
        return _T + (_H - _T - _B) * (1 - value / self.top)

    def frame(self, bands: Iterable[_Band], y_label: str) -> list[str]:
        parts = [f"<svg viewBox='0 0 {_W} {_H}' role='img' aria-label='{escape(y_label)}'>"]
        for band in bands:
            x0, x1 = self.x(band.start), self.x(band.end)
            parts.append(
                f"<rect class='band' data-series='band' data-kind='{band.kind}' "
                f"data-start='{band.start}' data-end='{band.end}' x='{x0:.1f}' y='{_T}' "
                f"width='{max(x1 - x0, 1):.1f}' height='{_H - _T - _B}' fill='{band.fill}'>"
                f"<title>{escape(band.label)}: {_minutes(band.start)} → {_minutes(band.end)}"
                "</title></rect>"
            )
        for i in range(5):
            value = self.top * i / 4
            y = self.y(value)
            parts.append(
                f"<line x1='{_L}' x2='{_W - _R}' y1='{y:.1f}' y2='{y:.1f}' class='grid'/>"
                f"<text x='{_L - 6}' y='{y + 4:.1f}' class='tick' text-anchor='end'>"
                f"{_count(value)}</text>"
            )
        for minute in _time_ticks(self.span):
            x = self.x(minute)
            parts.append(
                f"<text x='{x:.1f}' y='{_H - _B + 16}' class='tick' text-anchor='middle'>"
                f"{_minutes(minute)}</text>"
            )
        parts.append(
            f"<text x='{(_L + _W - _R) / 2}' y='{_H - 4}' class='axis x-title' "
            f"text-anchor='middle'>{X_TITLE}</text>"
        )
        parts.append(
            f"<text x='14' y='{_T + (_H - _T - _B) / 2}' class='axis' text-anchor='middle' "
            f"transform='rotate(-90 14 {_T + (_H - _T - _B) / 2})'>{escape(y_label)}</text>"
        )
        return parts


def _backlog_chart(report: dict[str, Any], span: float, bands: Sequence[_Band]) -> str:
    timeline = report["timeline"]
    width = timeline["bucket_minutes"]
    per_event = report["deliveries"]["total"] / report["events"] if report["events"] else 0.0
    created = final = 0.0
    points = [(0.0, 0)]
    for bucket in timeline["buckets"]:
        created += bucket["events"] * per_event
        final += bucket["delivered"] + bucket["dead_lettered"]
        points.append((bucket["start_minute"] + width, max(round(created - final), 0)))
    plot = _Plot(span, max((v for _, v in points), default=0))
    parts = plot.frame(bands, "deliveries pending")
    line = " ".join(f"{plot.x(m):.1f},{plot.y(v):.1f}" for m, v in points)
    parts.append(f"<polyline points='{line}' fill='none' stroke='{_BACKLOG}' stroke-width='2'/>")
    for minute, value in points[1:]:
        parts.append(
            f"<circle class='point' data-series='backlog' data-minute='{minute}' "
            f"data-value='{value}' cx='{plot.x(minute):.1f}' cy='{plot.y(value):.1f}' r='3' "
            f"fill='{_BACKLOG}'><title>{value} pending at {_minutes(minute)}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts) + _legend([(_BACKLOG, "pending"), *_band_legend(bands)])


def _outcome_chart(
    timeline: dict[str, Any], span: float, bands: Sequence[_Band], alerts: Sequence[dict[str, Any]]
) -> str:
    width = timeline["bucket_minutes"]
    buckets = timeline["buckets"]
    plot = _Plot(span, max((sum(b[k] for k in OUTCOME_KEYS) for b in buckets), default=0))
    parts = plot.frame(bands, "per interval")
    for index, bucket in enumerate(buckets):
        x0 = plot.x(bucket["start_minute"]) + 1
        x1 = plot.x(bucket["start_minute"] + width) - 1
        base = 0
        for key in OUTCOME_KEYS:
            value = bucket[key]
            if value:
                y_top, y_base = plot.y(base + value), plot.y(base)
                parts.append(
                    f"<rect class='bar' data-series='{key}' data-bucket='{index}' "
                    f"data-value='{value}' x='{x0:.1f}' y='{y_top:.1f}' "
                    f"width='{max(x1 - x0, 1):.1f}' height='{max(y_base - y_top, 0.5):.1f}' "
                    f"fill='{COLORS[key]}'><title>{_minutes(bucket['start_minute'])}: "
                    f"{value} {key.replace('_', ' ')}</title></rect>"
                )
            base += value
    for alert in alerts:
        x = plot.x(alert["minute"])
        parts.append(
            f"<path class='alert' data-series='alert' data-value='{alert['minute']}' "
            f"d='M{x:.1f},{_T} l-5,-9 h10 z' fill='#111827'><title>alert at "
            f"{_minutes(alert['minute'])}: {escape(alert['subject'])}</title></path>"
        )
    parts.append("</svg>")
    legend = [(COLORS[k], k.replace("_", " ")) for k in OUTCOME_KEYS]
    if alerts:
        legend.append(("#111827", "▼ alert sent"))
    return "".join(parts) + _legend([*legend, *_band_legend(bands)])


def _hbars(series: str, items: Sequence[tuple[str, float | None]], fmt: Any, color: str) -> str:
    peak = max((v for _, v in items if v is not None), default=0) or 1
    row, label_w, bar_w = 28, 200, _W - 200 - 120
    height = row * len(items) + 8
    parts = [f"<svg viewBox='0 0 {_W} {height}' role='img' aria-label='{series}'>"]
    for i, (label, value) in enumerate(items):
        y = 4 + i * row
        length = 0.0 if value is None else bar_w * value / peak
        shown = "–" if value is None else fmt(value)
        parts.append(
            f"<text x='{label_w - 8}' y='{y + 17}' class='label' text-anchor='end'>"
            f"{escape(label)}</text>"
            f"<rect class='bar' data-series='{series}' data-key='{escape(label)}' "
            f"data-value='{'' if value is None else value}' x='{label_w}' y='{y + 4}' "
            f"width='{max(length, 0.5 if value else 0):.1f}' height='{row - 10}' fill='{color}'>"
            f"<title>{escape(label)}: {shown}</title></rect>"
            f"<text x='{label_w + length + 6:.1f}' y='{y + 17}' class='value'>{shown}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _latency_chart(latency: dict[str, float | None]) -> str:
    items = [(key, latency[key]) for key in ("p50", "p90", "p99", "max", "mean")]
    return _hbars("latency", items, _seconds, "#0ea5e9")


def _reason_chart(by_reason: dict[str, int]) -> str:
    if not any(by_reason.values()):
        return "<p class='muted' data-series='dead_letters' data-value='0'>No dead letters.</p>"
    return _hbars("dead_letters", list(by_reason.items()), str, COLORS["dead_lettered"])


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], empty: str) -> str:
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows
    )
    if not body:
        return f"<p class='muted'>{escape(empty)}</p>"
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _alerts_table(alerts: Sequence[dict[str, Any]]) -> str:
    return _table(
        ("At", "Subscription", "Kind", "Dead letters", "Subject"),
        (
            (_minutes(a["minute"]), a["subscription"], a["kind"], a["dead_letters"], a["subject"])
            for a in alerts
        ),
        "No alerts were sent.",
    )


def _bands_table(probation: Sequence[dict[str, Any]], outages: Sequence[Outage]) -> str:
    rows = [
        ("outage", o.subscription, _minutes(o.start_minute), _minutes(o.end_minute), o.status)
        for o in outages
    ]
    rows += [
        (
            "probation",
            p["subscription"],
            _minutes(p["start_minute"]),
            "end of run" if p["end_minute"] is None else _minutes(p["end_minute"]),
            p["url"],
        )
        for p in probation
    ]
    return _table(("What", "Subscription", "From", "To", "Detail"), rows, "None.")


def _settings_table(report: dict[str, Any]) -> str:
    scenario = report["scenario"]
    rows: list[tuple[str, Any]] = [
        ("name", scenario["name"]),
        ("seed", scenario["seed"]),
        ("events per minute", scenario["events_per_minute"]),
        ("duration", _minutes(scenario["duration_minutes"])),
        ("run", f"{report['run']['start']} → {report['run']['end']}"),
        ("engine cycles", report["run"]["cycles"]),
        *scenario["settings"].items(),
    ]
    rows += [
        (f"subscription {s['id']}", f"{s['name']}: {s['deliveries']['total']} deliveries")
        for s in report["subscriptions"]
    ]
    return _table(("Setting", "Value"), rows, "")


def _legend(items: Iterable[tuple[str, str]]) -> str:
    entries = "".join(
        f"<span data-kind='{escape(label)}'><i style='background:{color}'></i>"
        f"{escape(label)}</span>"
        for color, label in items
    )
    return f"<div class='legend'>{entries}</div>"


def _band_legend(bands: Sequence[_Band]) -> list[tuple[str, str]]:
    kinds = {band.kind for band in bands}
    return [(_SWATCHES[kind], kind) for kind in ("outage", "probation") if kind in kinds]


# -- numbers ----------------------------------------------------------------------------------
def _nice(peak: float) -> float:
    """A round axis maximum at or above ``peak`` (1, 2 or 5 × a power of ten)."""
    if peak <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(peak))
    for step in (1, 2, 5, 10):
        if step * power >= peak:
            return float(step * power)
    return float(10 * power)


def _time_ticks(span: float) -> list[float]:
    step = next((s for s in (5, 10, 15, 30, 60, 120, 180, 360, 720) if span / s <= 10), 1440)
    return [i * step for i in range(int(span // step) + 1)]


def _count(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


_minutes = format_minutes


def _seconds(value: float | None) -> str:
    return "–" if value is None else format_duration(value)


_CSS = """
body{margin:0;background:#f8fafc;color:#1f2937;font:14px/1.5 system-ui,-apple-system,'Segoe UI',
Roboto,sans-serif}main{max-width:920px;margin:0 auto;padding:20px}h1{font-size:22px;margin:0 0 4px}
h2{font-size:16px;margin:0 0 4px}section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;
padding:14px 16px;margin:14px 0}.muted{color:#6b7280}.note{color:#6b7280;font-size:12px;margin:0 0
8px}svg{width:100%;height:auto;display:block}.grid{stroke:#e5e7eb}.tick,.value,.label{font-size:11px;
fill:#4b5563}.label{font-size:12px;fill:#1f2937}.axis{font-size:11px;fill:#6b7280}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:12px;color:#374151;margin-top:4px}
.legend i{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;
vertical-align:-1px}.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(130px,1fr));
gap:8px}.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:8px 10px}
.card b{display:block;font-size:18px}.card span{color:#6b7280;font-size:12px}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{text-align:left;padding:4px 8px;
border-bottom:1px solid #e5e7eb}th{background:#f3f4f6}
"""
