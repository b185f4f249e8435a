"""`prefctl simulate … --html FILE`: one self-contained HTML file whose charts carry the report's
numbers, checked against `-o json` of the same run, as text and in a real headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from prefctl.sim.report import OUTCOME_KEYS
from tests import browser
from tests.helpers import run_cli

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
_MARK = re.compile(
    r"data-series='([^']*)'(?: data-(?:bucket|key|minute)='([^']*)')? data-value='([^']*)'"
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The ttl example (dead letters, alerts, probation, an outage): its JSON and its HTML."""
    html = tmp_path_factory.mktemp("html") / "report.html"
    result = run_cli("-o", "json", "simulate", EXAMPLES / "ttl.toml", "--html", html)
    assert result.exit_code == 0, result.output
    return result.json, html


def _marks(text: str) -> list[tuple[str, str, str]]:
    return [(m[1] or "", m[2] or "", m[3] or "") for m in _MARK.finditer(text)]


def test_simulate_html_charts_carry_the_reports_numbers(run: tuple[dict[str, Any], Path]) -> None:
    report, html = run
    marks = _marks(html.read_text(encoding="utf-8"))
    buckets = report["timeline"]["buckets"]
    for key in OUTCOME_KEYS:
        drawn = {int(b): int(v) for series, b, v in marks if series == key}
        assert drawn == {i: b[key] for i, b in enumerate(buckets) if b[key]}, key
    latency = {k: float(v) for series, k, v in marks if series == "latency"}
    assert latency == {k: v for k, v in report["latency_seconds"].items() if v is not None}
    reasons = {k: int(v) for series, k, v in marks if series == "dead_letters"}
    assert reasons == report["dead_letters"]["by_reason"]
    alerts = [float(v) for series, _, v in marks if series == "alert"]
    assert alerts == [a["minute"] for a in report["alerts"]]
    assert report["dead_letters"]["total"] > 0
    assert alerts


def test_simulate_html_is_self_contained(run: tuple[dict[str, Any], Path]) -> None:
    text = run[1].read_text(encoding="utf-8")
    assert "<script" not in text
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", text)


def test_simulate_html_unwritable_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    result = run_cli("simulate", EXAMPLES / "outage.toml", "--html", tmp_path)
    assert result.exit_code == 2
    assert "cannot write the HTML report" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.browser
@pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))
def test_simulate_html_renders_in_chromium_without_console_errors_and_with_its_numbers(
    run: tuple[dict[str, Any], Path],
) -> None:
    report, html = run
    with browser.chrome() as driver:
        driver.get(html.as_uri())
        assert driver.title == "prefctl simulate · ttl"
        assert browser.console_errors(driver) == []

        def drawn(series: str) -> int:
            script = (
                "return [...document.querySelectorAll(arguments[0])]"
                ".reduce((sum, e) => sum + Number(e.dataset.value), 0)"
            )
            return int(driver.execute_script(script, f"rect[data-series='{series}']"))

        assert drawn("delivered") == report["deliveries"]["delivered"]
        assert drawn("dead_lettered") == report["deliveries"]["dead_lettered"]
        assert drawn("dead_letters") == report["dead_letters"]["total"]
        bands = driver.find_elements("css selector", "rect.band")
        # On both time charts: the probation periods and the scenario's one outage.
        assert len(bands) == 2 * (len(report["probation"]) + 1)
        for bar in driver.find_elements("css selector", "rect.bar"):
            assert bar.size["height"] > 0


@pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))
def test_simulate_html_legend_colours_are_the_drawn_bands_and_both_show_where_they_overlap(
    run: tuple[dict[str, Any], Path],
) -> None:
    _, html = run
    with browser.chrome() as driver:
        driver.get(html.as_uri())
        found = driver.execute_script(
            """
            const rgb = (c) => { const e = document.createElement('i'); e.style.color = c;
              document.body.append(e); const v = getComputedStyle(e).color; e.remove(); return v; };
            const swatch = (kind) => getComputedStyle(
              document.querySelector(`.legend [data-kind='${kind}'] i`));
            const band = (kind) => document.querySelector(`rect.band[data-kind='${kind}']`);
            const outage = band('outage'), probation = band('probation');
            const hatch = document.querySelector(
              probation.getAttribute('fill').match(/url\\((#[^)]+)\\)/)[1]);
            const stripe = hatch.querySelector('rect');
            outage.scrollIntoView({block: 'center'});
            const box = outage.getBoundingClientRect(), over = probation.getBoundingClientRect();
            const x = (Math.max(box.left, over.left) + Math.min(box.right, over.right)) / 2;
            const bands = document.elementsFromPoint(x, box.top + box.height / 2)
              .filter(e => e.classList.contains('band'));
            return {
              outageFill: rgb(outage.getAttribute('fill')),
              outageSwatch: swatch('outage').backgroundColor,
              outageOpacity: getComputedStyle(outage).opacity,
              stripeFill: rgb(stripe.getAttribute('fill')),
              probationSwatch: swatch('probation').backgroundImage,
              stripeWidth: Number(stripe.getAttribute('width')),
              hatchWidth: Number(hatch.getAttribute('width')),
              atOverlap: bands.map(e => e.dataset.kind),
              xTitles: [...document.querySelectorAll('svg text.x-title')].map(t => t.textContent),
            };
            """
        )
    # Outage: a solid band, drawn in the legend's colour.
    assert found["outageFill"] == found["outageSwatch"] == "rgb(254, 202, 202)"
    assert found["outageOpacity"] == "1"
    # Probation: stripes of the legend's colour, with gaps through which an outage under it shows.
    assert found["stripeFill"] in found["probationSwatch"]
    assert found["stripeWidth"] < found["hatchWidth"] / 2
    # Where they overlap, the stripes are on top and the pink band under them.
    assert found["atOverlap"] == ["probation", "outage"]
    assert found["xTitles"] == ["time since the start of the run (on the simulated clock)"] * 2
