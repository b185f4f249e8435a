"""The conformance suite behind ``prefctl endpoint check URL`` (DESIGN §10).

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
    response_time      the slowest answer of the run: must be under the budget (10 s)

Handshakes (DESIGN §9.3): only 200 counts. A 200 *without* a code means "validate manually by
GET"; it passes ``sync_handshake`` only when the endpoint is declared manual
(``manual_validation``), and ``manual_handshake`` then needs the GET to arrive. The validationUrl
points at a listener of the suite on 127.0.0.1, so the manual path can be completed only from
this machine (``prefctl receive --manual-validation --auto-validate``, or a person with a browser).
An endpoint that answers synchronously passes ``manual_handshake`` as the service would accept it.

The budget: the service abandons a request after 30 s; an endpoint whose slowest answer exceeds a
third of that is one slow dependency away from retries, so the suite fails above 10 s.

    >>> report = check_endpoint(CheckConfig(url, credentials), clock=SystemClock(), rng=Random())
    >>> report.passed, [case.name for case in report.failures]
"""

from __future__ import annotations

from prefctl.receiver.conformance.report import (
    CASE_NAMES,
    RESPONSE_BUDGET,
    SERVICE_TIMEOUT,
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
    "RESPONSE_BUDGET",
    "SERVICE_TIMEOUT",
    "STALE_AGE",
    "CaseResult",
    "CheckConfig",
    "Report",
    "check_endpoint",
    "junit_xml",
    "unreachable_junit_xml",
]
