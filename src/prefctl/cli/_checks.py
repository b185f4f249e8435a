"""What ``endpoint check`` and ``service check`` share: the report as a table or JSON, and the
JUnit file. Both reports are ``prefctl.receiver.conformance.Report``s, one row per case."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prefctl.cli._context import get_state
from prefctl.errors import UsageError

if TYPE_CHECKING:
    from prefctl.receiver.conformance import Report

JunitOption = Annotated[
    Path | None,
    typer.Option(
        "--junit",
        metavar="FILE",
        help="Also write the report as JUnit XML to FILE (for CI; missing folders are created).",
        show_default=False,
    ),
]

# How each ``CaseResult.result`` reads in the Result column.
ENDPOINT_LABELS = {"pass": "pass", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def render_report(
    report: Report,
    title: str,
    *,
    labels: Mapping[str, str] = ENDPOINT_LABELS,
    setting_column: bool = False,
) -> None:
    """Print ``report``: JSON as ``Report.as_dict``, or a table with one row per case.
    ``setting_column`` adds what to set in profiles.toml to match (``evidence["setting"]``)."""
    out = get_state().out
    if out.json_mode:
        out.json(report.as_dict())
        return
    rows = [
        {
            "case": case.name,
            "result": labels[case.result],
            "status": case.status,
            "time": f"{case.duration_ms:.0f} ms",
            "reason": case.reason,
            "setting": case.evidence.get("setting") or "",
        }
        for case in report.cases
    ]
    columns = [
        ("case", "CASE"),
        ("result", "RESULT"),
        ("status", "STATUS"),
        ("time", "TIME"),
        ("reason", "REASON"),
    ]
    if setting_column:
        columns.append(("setting", "TO MATCH, SET"))
    out.table(rows, columns, title=title)


def write_junit(path: Path, document: bytes) -> None:
    """Write a JUnit document to ``path``, creating missing folders; UsageError when it cannot."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(document)
    except OSError as exc:
        from prefctl.private_files import os_reason

        raise UsageError(f"cannot write the JUnit report to {path}: {os_reason(exc)}") from None
