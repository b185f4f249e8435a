"""The conformance suite behind ``prefctl endpoint check URL`` (docs/receiver.md).

It plays the service against a webhook endpoint, one request at a time, and judges each answer as
the service would. The cases, in order:

    sync_handshake     a handshake: expects 200 with the right validationResponse
    manual_handshake   a second handshake (a new code): a synchronous answer with *that* code
                       passes; 200 without a code passes when a GET of its validationUrl follows
    signed_event       a correctly signed event: expects 200
    bad_signature      a forged Signature: expects anything but 200
    stale_timestamp    a correct signature over a Timestamp an hour old: expects anything but 200
    duplicate_event    the same EventId twice, each signed afresh: expects 200 both times
    out_of_order       a profile's newer event, then its older one: expects 200 for both
    response_time      the slowest answer of the run: must come within the service's 30 s

A case passes, fails, or passes with a **warning**: the endpoint does what the spec accepts but
what most integrations avoid. Two things warn, with their figures (``CaseResult.figures``):

- a 200 *without* a code to ``sync_handshake`` (the spec's AwaitingManualAction path), unless the
  endpoint is declared manual (``manual_validation``); ``manual_handshake`` then needs the GET;
- a slowest answer above ``slow_after`` (10 s) but within the service's 30 s: one slow
  dependency away from retries.

``strict`` turns every warning into a failure, for teams that want the stricter rule. The
validationUrl points at a listener of the suite on 127.0.0.1, so the manual path can be completed
only from this machine (``prefctl receive --manual-validation --auto-validate``, or a person with
a browser). An endpoint that answers synchronously passes ``manual_handshake`` as the service
would accept it.

    >>> report = check_endpoint(CheckConfig(url, credentials), clock=SystemClock(), rng=Random())
    >>> report.passed, [case.name for case in report.failures]
"""

from __future__ import annotations

from prefctl.receiver.conformance.report import (
    CASE_NAMES,
    MANUAL_VALIDATION_WINDOW,
    SERVICE_TIMEOUT,
    SLOW_AFTER,
    STALE_AGE,
    CaseResult,
    CheckConfig,
    Report,
    junit_xml,
    unreachable_junit_xml,
)
from prefctl.receiver.conformance.suite import check_endpoint

__all__ = [
    "CASE_NAMES",
    "MANUAL_VALIDATION_WINDOW",
    "SERVICE_TIMEOUT",
    "SLOW_AFTER",
    "STALE_AGE",
    "CaseResult",
    "CheckConfig",
    "Report",
    "check_endpoint",
    "junit_xml",
    "unreachable_junit_xml",
]
