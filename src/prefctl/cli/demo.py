"""``prefctl demo``: the whole loop on a throwaway emulator and receiver, in seconds.

Steps go to stderr as they happen (a spinner while the demo waits); the summary table, or the
report with ``-o json``, goes to stdout. Exit 0 only when every expected outcome happened.

    prefctl demo
    prefctl demo --keep --seed 7
    prefctl demo -o json | jq .retries
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import get_state
from prefctl.demo.model import DEFAULT_TIME_SCALE, DemoStep, StepKind
from prefctl.errors import PrefctlError

if TYPE_CHECKING:
    from prefctl.cli._output import Output
    from prefctl.demo.model import DemoReport


def register(root: typer.Typer) -> None:
    root.command("demo")(demo)


def demo(
    keep: Annotated[
        bool,
        typer.Option(
            "--keep",
            help="Keep the temp dir (the emulator's store and alerts.mbox) and print where it is.",
        ),
    ] = False,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale",
            metavar="X",
            help="Divide every delivery-rule duration by X (backoff, timeouts, alert windows; 0.001 to 10000).",
        ),
    ] = DEFAULT_TIME_SCALE,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Seed the emulator's random choices (backoff jitter) to repeat a run.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the whole loop on a throwaway emulator and receiver, in seconds.

    Starts an emulator and a webhook receiver on free ports in a temp dir, subscribes the receiver, changes a profile through the REST API and shows the events arrive verified.
    Then the receiver fails (503) and the dispatcher retries with backoff; an event too large for the receiver gets a 413, is dead-lettered at once and causes an alert email.
    Your configuration, token cache and data dir are not touched; everything is stopped and removed at the end, also on Ctrl-C.
    Exit 0 only when every expected outcome happened.
    """
    from prefctl.demo import DemoOptions, run_demo

    state = get_state()
    out = state.out
    steps = StepPrinter(out)
    try:
        report = run_demo(DemoOptions(time_scale=time_scale, seed=seed, keep=keep), steps)
    finally:
        steps.close()
    if state.json:
        out.json(report.to_dict())
    else:
        columns = [("what", "OUTCOME"), ("count", "COUNT"), ("detail", "DETAIL")]
        out.table(_summary_rows(report), columns, title="prefctl demo")
    if report.workdir:
        data_dir = Path(report.workdir) / "emulator"
        out.info(f"kept {report.workdir}; look around with:")
        out.info(f"  prefctl deliveries list --store {data_dir / 'emulator.db'}")
        out.info(f"  prefctl alerts list --data-dir {data_dir}")
    failed = report.failed
    if failed:
        names = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        raise PrefctlError(
            f"{len(failed)} expected outcome(s) of the demo did not happen: {names}",
            hint="run it again with --keep to look at the store and alerts.mbox",
        )
    out.success(f"every expected outcome happened, in {report.wall_seconds:.1f} s")


class StepPrinter:
    """Prints the demo's steps on stderr: a numbered title per act, a spinner while it waits
    (on a terminal), the receiver's lines as they arrive."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.acts = 0
        self._spinner = contextlib.ExitStack()
        self._styles: dict[StepKind, Callable[[str], None]] = {
            StepKind.ACTION: lambda text: self._print("  → ", text, "cyan"),
            StepKind.ARRIVAL: lambda text: self._print("    ← ", text, "dim"),
            StepKind.INFO: lambda text: self._print("    ", text, "dim"),
            StepKind.OK: lambda text: self._print("  ✓ ", text, "green"),
            StepKind.FAILED: lambda text: self._print("  ✗ ", text, "red"),
        }

    def __call__(self, step: DemoStep) -> None:
        if step.kind is not StepKind.ARRIVAL:
            self._spinner.close()  # arrivals print above a spinner; anything else ends the wait
        if step.kind is StepKind.WAIT:
            self._spinner.enter_context(self.out.status(step.text))
        elif step.kind is StepKind.PHASE:
            self.acts += 1
            self._print("\n" if self.acts > 1 else "", f"{self.acts}. {step.text}", "bold")
        else:
            self._styles[step.kind](step.text)

    def close(self) -> None:
        self._spinner.close()

    def _print(self, prefix: str, text: str, style: str) -> None:
        """``prefix`` and ``text``, wrapped at spaces to the terminal's width under the text's
        start: a URL or an id is never split across lines (as the terminal would split it)."""
        if self.out.quiet:
            return
        import re
        import textwrap

        from rich.text import Text

        blank, prefix = prefix[: len(prefix) - len(prefix.lstrip("\n"))], prefix.lstrip("\n")
        if blank:
            self.out.err.print(blank, end="")
        indent = " " * (len(prefix) + 2)  # continuation lines start under the text, indented
        # A figure stays on the line of its unit ("39.2 s"): glued for the wrap, spaced again after.
        glued = re.sub(r"(\d) (?=(?:s|ms|min|KiB|KB)\b)", "\\1\u00a0", text)
        lines = textwrap.wrap(
            glued,
            width=max(self.out.err.width - len(prefix), 20),
            subsequent_indent=indent[len(prefix) :],
            break_long_words=False,
            break_on_hyphens=False,
        ) or [""]
        for number, chunk in enumerate(lines):
            line = Text(prefix if number == 0 else " " * len(prefix))
            # Text, not markup: "[Sandbox]" prints as written.
            line.append(chunk.replace("\u00a0", " "), style=style)
            self.out.err.print(line, soft_wrap=True, highlight=False)


def _summary_rows(report: DemoReport) -> list[dict[str, Any]]:
    receiver = report.receiver
    alert = report.alerts[0] if report.alerts else None
    waits = ", ".join(f"{g:g}" for g in report.backoff_seconds)
    reasons = ", ".join(f"{n} × {reason}" for reason, n in report.dead_letter_reasons.items())
    passed = len(report.checks) - len(report.failed)
    return [
        {
            "what": "events produced",
            "count": report.events_produced,
            "detail": f"{report.events_for_subscription} of them for the subscription",
        },
        {
            "what": "delivered",
            "count": report.delivered,
            "detail": f"{receiver.get('signatures_valid', 0)} signatures verified, "
            f"{receiver.get('duplicates', 0)} duplicates, "
            f"{receiver.get('out_of_order', 0)} out of order",
        },
        {
            "what": "retries",
            "count": report.retries,
            "detail": f"waits of {waits} s on the service's clock" if waits else "",
        },
        {"what": "dead-lettered", "count": len(report.dead_letters), "detail": reasons},
        {
            "what": "alerts sent",
            "count": len(report.alerts),
            "detail": f"to {', '.join(alert['recipients'])}: {alert['subject']}" if alert else "",
        },
        {
            "what": "wall time",
            "count": f"{report.wall_seconds:.1f} s",
            "detail": f"the service's clock {report.time_scale:g}× fast",
        },
        {
            "what": "expected outcomes",
            "count": f"{passed} of {len(report.checks)}",
            "detail": ", ".join(f"{c.name} failed" for c in report.failed) or "all happened",
        },
    ]
