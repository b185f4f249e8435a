"""The run of ``prefctl service check``: every case in order on one session, each ending in a
``CaseResult`` with its evidence, and the test data deleted at the end whatever happens."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from prefctl.clock import Clock, utc_timestamp
from prefctl.errors import UnreachableError
from prefctl.receiver.conformance import CaseResult, Report
from prefctl.servicecheck.rest_cases import REST_CASES, SHAPE_CASES
from prefctl.servicecheck.session import Case, Differs, ServiceCheckConfig, Session, Skipped
from prefctl.servicecheck.token_cases import TOKEN_CASES
from prefctl.servicecheck.write_cases import WRITE_CASES

SUITE_NAME = "prefctl service check"

CASES: dict[str, Case] = {**TOKEN_CASES, **REST_CASES, **SHAPE_CASES, **WRITE_CASES}
CASE_NAMES = tuple(CASES)


def check_service(
    config: ServiceCheckConfig,
    *,
    clock: Clock,
    on_case: Callable[[str], None] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Report:
    """Run every case against the profile's deployment; ``on_case(text)`` follows progress.

    Raises UnreachableError (the token endpoint or the API cannot be reached) and AuthError (the
    profile's own credentials are refused) before any case, as the CLI's exit codes 5 and 3.
    """
    session = Session(config, clock, on_case or (lambda _text: None), transport)
    try:
        started_at, start = utc_timestamp(clock.now()), clock.monotonic()
        session.start()
        results: list[CaseResult] = []
        for name, case in CASES.items():
            session.on_case(name)
            results.append(_play(session, name, case))
        elapsed = round((clock.monotonic() - start) * 1000, 1)
        return Report(session.base, started_at, elapsed, tuple(results), suite=SUITE_NAME)
    finally:
        session.close()


def _play(session: Session, name: str, case: Case) -> CaseResult:
    clock = session.clock
    start = clock.monotonic()
    session.new_case()
    skipped, passed = False, True
    try:
        reason = case(session)
    except Differs as differs:
        reason, passed = differs.reason, False
        if differs.setting is not None:
            session.evidence["setting"] = differs.setting
    except Skipped as skip:
        reason, skipped = skip.reason, True
    except UnreachableError as exc:
        reason, passed = f"no answer: {exc.message}", False
    duration = round((clock.monotonic() - start) * 1000, 1)
    evidence = {key: value for key, value in session.evidence.items() if value is not None}
    return CaseResult(
        name,
        passed,
        reason,
        duration,
        session.status,
        figures=dict(session.figures),
        skipped=skipped,
        evidence=evidence,
    )
