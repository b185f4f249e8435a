"""The suite's settings and results: ``CheckConfig``, ``CaseResult``, ``Report`` and JUnit XML.

The JUnit form follows the common schema CI systems read (Jenkins, GitLab, GitHub actions): one
``testsuite`` with ``tests``/``failures``/``errors`` counts and one ``testcase`` per case, a
``failure`` element carrying the reason of each failed case. JUnit has no "warning": a case that
passes with a warning is a passing ``testcase`` whose ``system-out`` starts ``WARNING:`` and says
why with its figures, and the ``testsuite`` carries a ``warnings`` property with their count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from xml.etree import ElementTree

from prefctl.errors import UsageError
from prefctl.webhooks.signature import SigningCredentials

__all__ = [
    "CASE_NAMES",
    "MANUAL_VALIDATION_WINDOW",
    "SERVICE_TIMEOUT",
    "SLOW_AFTER",
    "STALE_AGE",
    "CaseResult",
    "CheckConfig",
    "Report",
    "junit_xml",
    "unreachable_junit_xml",
]

CASE_NAMES = (
    "sync_handshake",
    "manual_handshake",
    "signed_event",
    "bad_signature",
    "stale_timestamp",
    "duplicate_event",
    "out_of_order",
    "response_time",
)
SERVICE_TIMEOUT = 30.0  # the service abandons a request after this (spec, Limits)
SLOW_AFTER = 10.0  # answers slower than this pass with a warning (a failure with strict)
MANUAL_VALIDATION_WINDOW = 300.0  # the validationUrl is valid 5 minutes (spec, Limits)
STALE_AGE = 3600.0  # how old the Timestamp of the stale_timestamp case is


@dataclass(frozen=True)
class CheckConfig:
    """What to check and how: the endpoint, the credentials it verifies with, TLS and limits."""

    url: str
    credentials: SigningCredentials
    timeout: float = SERVICE_TIMEOUT
    manual_window: float = MANUAL_VALIDATION_WINDOW  # how long a GET of validationUrl may take
    slow_after: float = SLOW_AFTER
    manual_validation: bool = False
    strict: bool = False
    insecure: bool = False
    ca_bundle: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    stale_age: float = STALE_AGE
    subscription_id: int = 1

    def __post_init__(self) -> None:
        hint = "example: prefctl endpoint check https://hooks.example.com/webhooks"
        try:
            parts = urlsplit(self.url)
        except ValueError as exc:  # e.g. "Invalid IPv6 URL"
            raise UsageError(f"'{self.url}' is not a valid URL: {exc}", hint=hint) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"'{self.url}' is not an http:// or https:// URL with a host", hint=hint
            )
        try:
            port = parts.port
        except ValueError:  # not a number, or above 65535
            port = -1
        if port is not None and not 1 <= port <= 65535:
            raise UsageError(f"'{self.url}': the port must be a number from 1 to 65535", hint=hint)
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise UsageError(f"--timeout must be a number of seconds above 0, not {self.timeout:g}")
        if not (math.isfinite(self.slow_after) and 0 < self.slow_after <= SERVICE_TIMEOUT):
            raise UsageError(
                f"--slow-after must be a number of seconds above 0 and at most "
                f"{SERVICE_TIMEOUT:g} (the service's wait), not {self.slow_after:g}"
            )
        if not (
            math.isfinite(self.manual_window) and 0 < self.manual_window <= MANUAL_VALIDATION_WINDOW
        ):
            raise UsageError(
                f"--manual-window must be a number of seconds above 0 and at most "
                f"{MANUAL_VALIDATION_WINDOW:g} (the service's 5 minutes for the GET of "
                f"validationUrl), not {self.manual_window:g}"
            )


@dataclass(frozen=True)
class CaseResult:
    """The verdict on one case; ``status`` is the HTTP status that decided it, if any.

    ``warning``: the endpoint does what the spec accepts but not what most integrations want
    (manual validation, slow answers); such a case passes, or fails when the run is strict.
    ``figures`` are the measurements behind the verdict (seconds, counts).
    """

    name: str
    passed: bool
    reason: str
    duration_ms: float
    status: int | None = None
    warning: bool = False
    figures: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False  # not run (``reason`` says why); counts as passed
    evidence: dict[str, Any] = field(default_factory=dict)  # request, answer, expected, setting

    @property
    def result(self) -> str:
        """``pass``, ``warn`` (passed with a warning), ``skip`` or ``fail``."""
        if self.skipped:
            return "skip"
        return "fail" if not self.passed else "warn" if self.warning else "pass"

    def as_dict(self) -> dict[str, Any]:
        record = {
            "name": self.name,
            "passed": self.passed,
            "result": self.result,
            "reason": self.reason,
            "duration_ms": self.duration_ms,
            "status": self.status,
            "figures": self.figures,
        }
        if self.evidence:
            record["evidence"] = self.evidence
        return record


@dataclass(frozen=True)
class Report:
    """Every case of one run against ``url``."""

    url: str
    started_at: str
    duration_ms: float
    cases: tuple[CaseResult, ...]
    strict: bool = False
    suite: str = "prefctl endpoint check"  # the JUnit suite's name (``prefctl service check``)

    @property
    def passed(self) -> bool:
        return all(case.passed for case in self.cases)

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        return tuple(case for case in self.cases if not case.passed)

    @property
    def warnings(self) -> tuple[CaseResult, ...]:
        """Cases that passed with a warning (none in a strict run: they fail instead)."""
        return tuple(case for case in self.cases if case.result == "warn")

    @property
    def skipped(self) -> tuple[CaseResult, ...]:
        return tuple(case for case in self.cases if case.skipped)

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "passed": self.passed,
            "strict": self.strict,
            "total": len(self.cases),
            "failed": len(self.failures),
            "warnings": len(self.warnings),
            "skipped": len(self.skipped),
            "started_at": self.started_at,
            "duration_ms": self.duration_ms,
            "cases": [case.as_dict() for case in self.cases],
        }


_SUITE_NAME = "prefctl endpoint check"


def _class_name(suite: str) -> str:
    """``prefctl endpoint check`` → ``prefctl.endpoint_check``."""
    return suite.replace(" ", ".", 1).replace(" ", "_")


def junit_xml(report: Report) -> bytes:
    """The report as a JUnit XML document."""
    failures = len(report.failures)
    class_name = _class_name(report.suite)
    root, suite = _junit_skeleton(report.url, report.started_at, report.duration_ms, report.suite)
    for element in (root, suite):
        element.set("tests", str(len(report.cases)))
        element.set("failures", str(failures))
        element.set("skipped", str(len(report.skipped)))
    properties = suite.find("properties")
    assert properties is not None
    ElementTree.SubElement(properties, "property", name="strict", value=str(report.strict).lower())
    ElementTree.SubElement(properties, "property", name="warnings", value=str(len(report.warnings)))
    for case in report.cases:
        testcase = ElementTree.SubElement(
            suite,
            "testcase",
            name=case.name,
            classname=class_name,
            time=_seconds(case.duration_ms),
        )
        if case.skipped:
            ElementTree.SubElement(testcase, "skipped", message=case.reason)
        elif not case.passed:
            failure = ElementTree.SubElement(
                testcase, "failure", message=case.reason, type=_failure_type(case)
            )
            failure.text = case.reason
        elif case.warning:
            figures = ", ".join(f"{key}={value}" for key, value in case.figures.items())
            text = f"WARNING: {case.reason}" + (f"\nfigures: {figures}" if figures else "")
            ElementTree.SubElement(testcase, "system-out").text = text
    return _document(root)


def unreachable_junit_xml(
    url: str, message: str, started_at: str, suite_name: str = _SUITE_NAME
) -> bytes:
    """A JUnit document for a run that could not reach the endpoint: one errored case."""
    root, suite = _junit_skeleton(url, started_at, 0.0, suite_name)
    for element in (root, suite):
        element.set("tests", "1")
        element.set("errors", "1")
    testcase = ElementTree.SubElement(
        suite, "testcase", name="reachability", classname=_class_name(suite_name), time="0.000"
    )
    error = ElementTree.SubElement(testcase, "error", message=message, type="unreachable")
    error.text = message
    return _document(root)


def _junit_skeleton(
    url: str, started_at: str, duration_ms: float, name: str
) -> tuple[ElementTree.Element, ElementTree.Element]:
    time = _seconds(duration_ms)
    counts = {"tests": "0", "failures": "0", "errors": "0", "skipped": "0"}
    root = ElementTree.Element("testsuites", {"name": name, "time": time, **counts})
    attributes = {
        "name": f"{name} {url}",
        "timestamp": started_at[:19],  # the schema's xs:dateTime, without a zone
        "hostname": urlsplit(url).hostname or "",
        "time": time,
        **counts,
    }
    suite = ElementTree.SubElement(root, "testsuite", attributes)
    properties = ElementTree.SubElement(suite, "properties")
    ElementTree.SubElement(properties, "property", name="url", value=url)
    return root, suite


def _failure_type(case: CaseResult) -> str:
    return "no answer" if case.status is None else f"HTTP {case.status}"


def _seconds(milliseconds: float) -> str:
    return f"{milliseconds / 1000:.3f}"


def _document(root: ElementTree.Element) -> bytes:
    ElementTree.indent(root)
    document: bytes = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"
