"""The inspector page of ``prefctl receive --ui`` open in a headless Chromium, for bench/receiver.py.

The page's update latency is measured in the page: each time the table is redrawn, the time from
the arrival of the newest request it lists (the receiver's ``time``, same machine, same clock) to
that redraw. The browser is the tests' (tests/browser.py: Debian's chromium and chromedriver).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.browser import chrome, missing

_OBSERVE = """
window.prefctlLatencies = [];
new MutationObserver(() => {
  const newest = state.records[state.records.length - 1];
  if (newest) window.prefctlLatencies.push(Date.now() - Date.parse(newest.line.time));
}).observe(document.getElementById("rows"), {childList: true});
"""
_TAKE = "const taken = window.prefctlLatencies; window.prefctlLatencies = []; return taken;"

__all__ = ["latencies", "missing", "open_page", "summary"]


@contextmanager
def open_page(url: str) -> Iterator[Any]:
    """The page at ``url``, live, with its redraws observed."""
    from selenium.webdriver.support.wait import WebDriverWait

    with chrome() as driver:
        driver.get(url)
        WebDriverWait(driver, 10).until(lambda d: d.find_element("id", "connection").text == "live")
        driver.execute_script(_OBSERVE)
        yield driver


def latencies(driver: Any) -> list[float]:
    """The update latencies (ms) since the last call."""
    return [float(v) for v in driver.execute_script(_TAKE)]


def summary(values: list[float]) -> dict[str, float | int]:
    """p50 / p99 / max of ``values`` and how many there were."""
    if not values:
        return {"updates": 0}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "updates": len(ordered),
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(p99, 1),
        "max_ms": round(ordered[-1], 1),
    }
