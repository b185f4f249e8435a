"""The cases of the conformance suite, played against an endpoint with httpx (see the package)."""

from __future__ import annotations

import base64
import math
import random
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx

from prefctl import __version__
from prefctl.auth.http_policy import is_loopback
from prefctl.auth.token_client import cannot_reach, tls_host_mismatch, transport_error_reason
from prefctl.clock import Clock, utc_timestamp
from prefctl.errors import ConfigError, UnreachableError
from prefctl.private_files import os_reason
from prefctl.receiver.conformance.listener import ValidationListener
from prefctl.receiver.conformance.report import (
    CASE_NAMES,
    MANUAL_VALIDATION_WINDOW,
    SERVICE_TIMEOUT,
    CaseResult,
    CheckConfig,
    Report,
)
from prefctl.webhooks.envelope import build_event, encode, new_event_id
from prefctl.webhooks.handshake import Handshake, ReplyOutcome, classify_reply, new_handshake
from prefctl.webhooks.signature import HEADER_NAME, format_header, sign_header

__all__ = ["check_endpoint"]

_WAIT_TICK = 1.0  # seconds between two countdown calls while waiting for a validation GET


def check_endpoint(
    config: CheckConfig,
    *,
    clock: Clock,
    rng: random.Random,
    transport: httpx.BaseTransport | None = None,
    on_case: Callable[[str], None] | None = None,
    on_wait: Callable[[float], None] | None = None,
) -> Report:
    """Run every case against ``config.url``; raises UnreachableError if the first request fails
    to connect. ``on_case(name)`` is called as each case starts (for a spinner); ``on_wait(left)``
    about every second while the suite waits for a GET of validationUrl, with the seconds left of
    ``config.manual_window`` (for a countdown)."""
    client = httpx.Client(
        timeout=config.timeout,
        verify=_tls_context(config),
        transport=transport,
        follow_redirects=False,  # the service does not follow 3xx either
        headers={"User-Agent": f"prefctl/{__version__} endpoint-check"},
        trust_env=not is_loopback(config.url),  # an endpoint on this machine: no proxy
    )
    with client, ValidationListener() as listener:
        return _Suite(config, client, listener, clock, rng, on_wait).run(on_case)


def _tls_context(config: CheckConfig) -> ssl.SSLContext | bool:
    if config.insecure and config.client_cert is None:
        return False
    from prefctl.auth.tls import ssl_context

    context = ssl_context(config.ca_bundle)
    if config.insecure:  # no server verification, but the client certificate is still presented
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.client_cert is not None:
        try:
            context.load_cert_chain(
                str(config.client_cert), config.client_key and str(config.client_key)
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot use the client certificate {config.client_cert}: {os_reason(exc)}",
                hint="pass a PEM certificate with --client-cert and its key with --client-key",
            ) from None
    return context


@dataclass
class _Answer:
    """An HTTP status and body, or why there is none (``error``)."""

    status: int | None
    body: bytes
    error: str | None = None
    latency: float | None = None  # seconds, for an answer that came


class _CaseFailed(Exception):
    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class _CaseWarning(Exception):
    """What the spec accepts but a team may not want: a pass with a warning, or with ``strict``
    a failure."""

    def __init__(self, reason: str, status: int | None = None, **figures: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.figures = figures


@dataclass
class _Suite:
    config: CheckConfig
    client: httpx.Client
    listener: ValidationListener
    clock: Clock
    rng: random.Random
    on_wait: Callable[[float], None] | None = None
    latencies: list[float] = field(default_factory=list)
    handshake_latencies: list[float] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    timeouts: int = 0
    reached: bool = False

    def run(self, on_case: Callable[[str], None] | None) -> Report:
        started_at, start = utc_timestamp(self.clock.now()), self.clock.monotonic()
        cases: list[CaseResult] = []
        for name in CASE_NAMES:
            if on_case is not None:
                on_case(name)
            cases.append(self._case(name))
        elapsed = round((self.clock.monotonic() - start) * 1000, 1)
        return Report(self.config.url, started_at, elapsed, tuple(cases), self.config.strict)

    def _case(self, name: str) -> CaseResult:
        start = self.clock.monotonic()
        case = {
            "sync_handshake": self._sync_handshake,
            "manual_handshake": self._manual_handshake,
            "signed_event": self._signed_event,
            "bad_signature": self._bad_signature,
            "stale_timestamp": self._stale_timestamp,
            "duplicate_event": self._duplicate_event,
            "out_of_order": self._out_of_order,
            "response_time": self._response_time,
        }[name]
        self.figures = {}
        warning = False
        try:
            reason, status = case()
            passed = True
        except _CaseFailed as failed:
            reason, status, passed = failed.reason, failed.status, False
        except _CaseWarning as warned:
            reason, status, warning = warned.reason, warned.status, True
            self.figures.update(warned.figures)
            passed = not self.config.strict
            if self.config.strict:
                reason += " (a failure with --strict)"
        duration = round((self.clock.monotonic() - start) * 1000, 1)
        if name == "response_time":
            duration = round(max(self.latencies, default=0.0) * 1000, 1)
        return CaseResult(name, passed, reason, duration, status, warning, dict(self.figures))

    # -- requests -------------------------------------------------------------------------------
    def _post(self, message: dict[str, Any], header: str | None) -> _Answer:
        headers = {"Content-Type": "application/json"}
        if header is not None:
            headers[HEADER_NAME] = header
        start = self.clock.monotonic()
        try:
            response = self.client.post(self.config.url, content=encode(message), headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if not self.reached:
                raise UnreachableError(
                    cannot_reach(self.config.url, exc), hint=_unreached_hint(exc)
                ) from None
            return _Answer(None, b"", f"connection failed: {transport_error_reason(exc)}")
        except httpx.TimeoutException:
            self.reached = True
            self.timeouts += 1
            return _Answer(None, b"", f"no answer within {self.config.timeout:g} s")
        except httpx.TransportError as exc:
            if not self.reached and self._maybe_wants_client_certificate(exc):
                raise UnreachableError(
                    f"{self.config.url} closed the connection without answering",
                    hint="it may require a client certificate (mTLS): pass --client-cert FILE "
                    "and --client-key FILE",
                ) from None
            self.reached = True
            return _Answer(None, b"", f"request failed: {transport_error_reason(exc)}")
        self.reached = True
        latency = self.clock.monotonic() - start
        self.latencies.append(latency)
        return _Answer(response.status_code, response.content, latency=latency)

    def _maybe_wants_client_certificate(self, exc: httpx.TransportError) -> bool:
        """An https endpoint that hangs up on the very first request, before any answer, when no
        client certificate was given: what an mTLS receiver does to a client without one."""
        return (
            isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError)
            and self.config.url.startswith("https:")
            and self.config.client_cert is None
        )

    def _post_event(self, message: dict[str, Any]) -> _Answer:
        """An event signed afresh, as every delivery attempt is."""
        return self._post(message, sign_header(self.config.credentials, self.clock.now()))

    def _event(
        self,
        event_type: str,
        profile_id: int,
        when: datetime,
        data: dict[str, Any],
        previous: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return build_event(
            event_id=new_event_id(self.rng),
            event_type=event_type,
            subscription_id=self.config.subscription_id,
            client_id=self.config.credentials.client_id,
            profile_id=profile_id,
            event_time=when,
            original_event_time=when,
            data=data,
            previous_data=previous,
        )

    def _email_event(self, when: datetime | None = None) -> dict[str, Any]:
        profile_id = self.rng.randint(100_000, 999_999)
        data = {"Address": f"conformance-{profile_id}@example.com", "Type": "Personal"}
        return self._event("contacts.email.added", profile_id, when or self.clock.now(), data)

    def _handshake(self) -> tuple[Handshake, _Answer]:
        handshake = new_handshake(
            self.rng,
            subscription_id=self.config.subscription_id,
            client_id=self.config.credentials.client_id,
            api_url=self.listener.api_url,
            now=self.clock.now(),
        )
        self.listener.expect(handshake.token)
        answer = self._post(handshake.message, header=None)
        if answer.latency is not None:
            self.handshake_latencies.append(answer.latency)
        return handshake, answer

    # -- cases: each returns (reason, status) or raises _CaseFailed ------------------------------
    def _sync_handshake(self) -> tuple[str, int | None]:
        handshake, answer = self._handshake()
        _require_answer(answer)
        verdict = classify_reply(answer.status or 0, answer.body, handshake.code)
        if verdict.outcome is ReplyOutcome.VALIDATED:
            return verdict.message, answer.status
        if verdict.outcome is ReplyOutcome.MANUAL:
            if self.config.manual_validation:
                return verdict.message + " (manual validation, as declared)", answer.status
            raise _CaseWarning(
                verdict.message + ": the endpoint validates manually (the service waits in "
                f"AwaitingManualAction up to {MANUAL_VALIDATION_WINDOW / 60:g} minutes for the "
                "GET); pass --manual-validation if that is on purpose",
                answer.status,
                validation="manual",
                manual_window_s=self.config.manual_window,
            )
        raise _CaseFailed(verdict.message, answer.status)

    def _manual_handshake(self) -> tuple[str, int | None]:
        sent = self.clock.monotonic()
        handshake, answer = self._handshake()
        _require_answer(answer)
        verdict = classify_reply(answer.status or 0, answer.body, handshake.code)
        if verdict.outcome is ReplyOutcome.VALIDATED:
            return (
                "answered synchronously with this handshake's code (no GET needed)",
                answer.status,
            )
        if verdict.outcome is ReplyOutcome.WRONG_CODE:
            raise _CaseFailed(verdict.message + " (each handshake has a new code)", answer.status)
        if verdict.outcome is ReplyOutcome.REJECTED:
            raise _CaseFailed(verdict.message, answer.status)
        window = self.config.manual_window
        self.figures.update(validation="manual", manual_window_s=window)
        if not self._await_validation(handshake.token, sent + window):
            raise _CaseFailed(
                f"answered 200 without a code, but validationUrl was not fetched within the "
                f"manual window of {window:g} s (--manual-window; the service fails the "
                f"subscription when no GET comes within {MANUAL_VALIDATION_WINDOW / 60:g} minutes)",
                answer.status,
            )
        waited = self.clock.monotonic() - sent
        self.figures.update(validation_get_after_s=round(waited, 3))
        return (
            f"answered 200 without a code; validationUrl fetched within {_duration(waited)}",
            answer.status,
        )

    def _await_validation(self, token: str, deadline: float) -> bool:
        """Whether the GET of ``token``'s validationUrl comes before ``deadline`` (monotonic);
        the listener answers later GETs 410. Bounded in ticks too, whatever the clock does."""
        for _ in range(math.ceil(self.config.manual_window / _WAIT_TICK) + 1):
            left = deadline - self.clock.monotonic()
            if left <= 0:
                break
            if self.on_wait is not None:
                self.on_wait(left)
            if self.listener.fetched(token, min(left, _WAIT_TICK)):
                return True
        return self.listener.expire(token)

    def _signed_event(self) -> tuple[str, int | None]:
        answer = self._post_event(self._email_event())
        return _expect_200(answer, "a correctly signed event"), answer.status

    def _bad_signature(self) -> tuple[str, int | None]:
        timestamp = utc_timestamp(self.clock.now())
        forged = base64.b64encode(self.rng.randbytes(64)).decode("ascii")
        answer = self._post(self._email_event(), format_header(timestamp, forged))
        return _expect_rejection(answer, "a forged Signature", "does not verify Service-Webhook")

    def _stale_timestamp(self) -> tuple[str, int | None]:
        then = self.clock.now() - timedelta(seconds=self.config.stale_age)
        header = sign_header(self.config.credentials, then)
        answer = self._post(self._email_event(then), header)
        age = f"a Timestamp {_duration(self.config.stale_age)} old"
        return _expect_rejection(answer, age, "does not check the Timestamp against its clock")

    def _duplicate_event(self) -> tuple[str, int | None]:
        event = self._email_event()
        first = self._post_event(event)
        _expect_200(first, "the first delivery")
        repeat = self._post_event(event)
        if repeat.error is not None or repeat.status != 200:
            got = repeat.error or f"answered {repeat.status}"
            raise _CaseFailed(
                f"the repeat of EventId {event['EventId'][:8]}… {got}: deliveries are at least "
                "once, so answer 200 to a duplicate and skip the work",
                repeat.status,
            )
        return "answered 200 to both deliveries of one EventId", repeat.status

    def _out_of_order(self) -> tuple[str, int | None]:
        profile_id = self.rng.randint(100_000, 999_999)
        now = self.clock.now()
        newer = self._event(
            "standardfield.firstname.updated",
            profile_id,
            now,
            {"FirstName": "Ann"},
            {"FirstName": "Anna"},
        )
        older = self._event(
            "standardfield.firstname.updated",
            profile_id,
            now - timedelta(seconds=60),
            {"FirstName": "Anna"},
            {"FirstName": "Annie"},
        )
        _expect_200(self._post_event(newer), "the newer event")
        answer = self._post_event(older)
        if answer.error is not None or answer.status != 200:
            got = answer.error or f"answered {answer.status}"
            raise _CaseFailed(
                f"the older event (EventTime 60 s earlier) {got}: delivery order is not "
                "guaranteed, so accept it and order by EventTime",
                answer.status,
            )
        return "answered 200 to a newer and then an older event of one profile", answer.status

    def _response_time(self) -> tuple[str, int | None]:
        slow_after = self.config.slow_after
        if self.timeouts:
            raise _CaseFailed(
                f"{self.timeouts} request(s) got no answer within {self.config.timeout:g} s "
                f"(the service abandons a request after {SERVICE_TIMEOUT:g} s and retries it)"
            )
        if not self.latencies:
            raise _CaseFailed("no request was answered")
        slowest = max(self.latencies)
        slowest_handshake = max(self.handshake_latencies, default=0.0)
        self.figures.update(
            answers=len(self.latencies),
            slowest_s=round(slowest, 3),
            slowest_handshake_s=round(slowest_handshake, 3),
            slow_after_s=slow_after,
            limit_s=SERVICE_TIMEOUT,
        )
        summary = f"slowest of {len(self.latencies)} answers {_duration(slowest)}"
        if slowest_handshake == slowest:
            summary += " (a handshake)"
        if slowest > SERVICE_TIMEOUT:
            raise _CaseFailed(
                f"{summary}, beyond the {SERVICE_TIMEOUT:g} s the service waits: it would have "
                "cancelled the request and retried it"
            )
        if slowest > slow_after:
            raise _CaseWarning(
                f"{summary}: within the service's {SERVICE_TIMEOUT:g} s, but above "
                f"{slow_after:g} s, one slow dependency away from retries; answer first, "
                "work later"
            )
        return f"{summary} (slow above {slow_after:g} s, limit {SERVICE_TIMEOUT:g} s)", None


def _require_answer(answer: _Answer) -> None:
    if answer.error is not None:
        raise _CaseFailed(answer.error)


def _expect_200(answer: _Answer, what: str) -> str:
    _require_answer(answer)
    if answer.status == 200:
        return f"answered 200 to {what}"
    why = {
        400: "400 dead-letters the event at once",
        413: "413 dead-letters the event at once",
        401: "check the ClientId, signature user id and Hashkey the endpoint verifies with",
        403: "check the ClientId, signature user id and Hashkey the endpoint verifies with",
    }.get(answer.status or 0, "only 200 counts as delivered; the service retries")
    raise _CaseFailed(f"answered {answer.status} to {what}: {why}", answer.status)


def _expect_rejection(answer: _Answer, what: str, failing: str) -> tuple[str, int | None]:
    _require_answer(answer)
    if answer.status == 200:
        raise _CaseFailed(f"answered 200 to {what}: the endpoint {failing}", 200)
    return f"rejected {what} with {answer.status}", answer.status


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    return f"{seconds * 1000:.0f} ms"


def _unreached_hint(exc: BaseException) -> str:
    """What to do when the first request could not connect: a certificate for another host, one
    this machine does not trust, or nothing listening."""
    host = tls_host_mismatch(exc)
    if host is not None:
        return f"its certificate does not cover {host}: use a URL with a host it covers"
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return (
            "its certificate is not signed by a CA this machine trusts (a development CA?): "
            "pass that CA with --ca-bundle FILE"
        )
    return "is the endpoint running, on that host and port?"
