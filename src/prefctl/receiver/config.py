"""``ReceiverConfig``: every option of the receiver, checked as a whole when it is built.

``prefctl receive`` turns its flags into one; tests and other commands build one directly. An
inconsistent combination (``--client-ca`` without a certificate, ``--redact`` without
``--record``…) is a ``UsageError`` raised by the constructor, before anything starts.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefctl.clock import Clock, SystemClock
from prefctl.errors import PrefctlError, UsageError
from prefctl.receiver.app import DEFAULT_MAX_BODY_BYTES, HEALTH_PATH, UI_PATH
from prefctl.receiver.faults import FaultPlan
from prefctl.receiver.pump import Sink
from prefctl.receiver.validation import DEFAULT_TIMEOUT_SECONDS as DEFAULT_VALIDATION_TIMEOUT
from prefctl.receiver.validation import TrustedHosts
from prefctl.servers.connections import ConnectionLimits
from prefctl.webhooks.signature import DEFAULT_TOLERANCE_SECONDS, SigningCredentials

__all__ = ["DEFAULT_PORT", "ExitAfterNotReached", "ReceiverConfig", "ReceiverSummary"]

DEFAULT_PORT = 8751
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")


@dataclass(frozen=True)
class ReceiverConfig:
    """Everything ``serve`` needs, checked as a whole when it is built (``UsageError``).

    ``verify=True`` (the default) needs ``credentials``; verification is turned off only by an
    explicit ``verify=False`` (``--no-verify``). ``on_verdicts`` receives batches of completed
    verdicts on the event loop (it must not block; see ``pump.BackgroundWriter``).
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    path: str = "/webhooks"
    verify: bool = True
    credentials: SigningCredentials | None = None
    tolerance: float = DEFAULT_TOLERANCE_SECONDS
    manual_validation: bool = False
    auto_validate: bool = False
    # HOST or HOST:PORT entries whose validationUrls --auto-validate GETs (receiver.validation).
    validation_hosts: tuple[str, ...] = ()
    validation_timeout: float = DEFAULT_VALIDATION_TIMEOUT
    faults: FaultPlan | None = None
    record: Path | None = None
    redact: bool = False
    forward_to: str | None = None
    forward_timeout: float = 25.0
    exit_after: int | None = None
    timeout: float | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    client_ca: Path | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    clock: Clock = field(default_factory=SystemClock)
    rng: random.Random = field(default_factory=random.Random)
    on_verdicts: Sink | None = None
    ui: bool = False  # the inspector page at /_prefctl/ (receiver.inspector)
    ui_token: str | None = None
    # Verdicts keep each request's raw headers and body (``Verdict.headers``/``.body``), for a
    # caller that inspects them (``service check``); recording and the inspector keep them anyway.
    keep_requests: bool = False

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem is not None:
            raise UsageError(problem[0], hint=problem[1])

    def _problem(self) -> tuple[str, str | None] | None:
        if not 0 <= self.port <= 65535:
            return f"port {self.port} is not a TCP port (0–65535)", None
        if not self.path.startswith("/") or self.path == HEALTH_PATH or " " in self.path:
            return f"path '{self.path}' must start with / and not be {HEALTH_PATH}", None
        if self.verify and self.credentials is None:
            return (
                "signature verification needs a ClientId, signature user id and Hashkey",
                "configure the profile's [webhooks] section, or pass --no-verify to accept "
                "unsigned events",
            )
        if not 0 < self.tolerance <= 86400:
            return "tolerance must be between 0 and 86400 seconds", None
        if self.auto_validate and not self.manual_validation:
            return "auto_validate needs manual_validation", None
        for entry in self.validation_hosts:
            problem = TrustedHosts.check_entry(entry)
            if problem is not None:
                return f"--validation-host {problem}", "e.g. api.example.com or 127.0.0.1:8750"
        if not 0 < self.validation_timeout <= 60:
            return "the validation timeout must be between 0 and 60 seconds", None
        if self.auto_validate and not self.validation_hosts:
            return (
                "--auto-validate needs a trusted host to GET validationUrls from",
                "set the profile's api_url, or pass --validation-host HOST[:PORT]",
            )
        if self.redact and self.record is None and not self.ui:
            return "--redact applies to --record and --ui: pass --record FILE or --ui too", None
        ui_problem = self._ui_problem()
        if ui_problem is not None:
            return ui_problem
        if self.forward_to is not None and not self.forward_to.startswith(("http://", "https://")):
            return f"--forward-to must be an http(s) URL, not '{self.forward_to}'", None
        if not 0 < self.forward_timeout <= 300:
            return "the forward timeout must be between 0 and 300 seconds", None
        if self.exit_after is not None and self.exit_after < 1:
            return "--exit-after must be 1 or more", None
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            return f"--timeout must be a number of seconds above 0, not {self.timeout:g}", None
        if (self.tls_cert is None) != (self.tls_key is None):
            return "--tls-cert and --tls-key go together", None
        if self.client_ca is not None and self.tls_cert is None:
            return "--client-ca (mTLS) needs --tls-cert and --tls-key", None
        if self.max_body_bytes < 1024:
            return "the body limit must be at least 1024 bytes", None
        limits = self.limits.problem()
        if limits is not None:
            return limits, None
        return None

    def _ui_problem(self) -> tuple[str, str | None] | None:
        from prefctl.hosts import is_loopback

        if self.ui_token is not None and not self.ui:
            return "--ui-token applies to --ui: pass --ui too", None
        if self.ui_token is not None and not _TOKEN.fullmatch(self.ui_token):
            return (
                "--ui-token must be 16 to 256 letters, digits or ._~+/=-",
                "for example: openssl rand -hex 16",
            )
        if self.ui and self.path.startswith(UI_PATH):
            return f"path '{self.path}' is the inspector's (--ui): choose another --path", None
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.ui and self.ui_token is None and not is_loopback(f"http://{host}/"):
            return (
                f"--ui on --host {self.host} shows personal data to the network: "
                "pass --ui-token TOKEN too",
                "or listen on 127.0.0.1",
            )
        return None

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert is not None else "http"

    def ready_info(self, port: int) -> dict[str, Any]:
        """The ``{"type": "ready", …}`` line: where to send events and how they are judged."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        base = f"{self.scheme}://{host}:{port}"
        creds = self.credentials if self.verify else None
        return {
            "type": "ready",
            "url": base + self.path,
            "health_url": base + HEALTH_PATH,
            "ui_url": base + UI_PATH + "/" if self.ui else None,
            "verify": self.verify,
            "client_id": creds.client_id if creds else None,
            "signature_user_id": creds.signature_user_id if creds else None,
            "signature_encoding": creds.encoding if creds else None,
            "tolerance": self.tolerance,
            "validation": "auto"
            if self.auto_validate
            else "manual"
            if self.manual_validation
            else "sync",
            "validation_hosts": list(self.validation_hosts) if self.auto_validate else None,
            "tls": self.tls_cert is not None,
            "mtls": self.client_ca is not None,
            "faults": self.faults.describe() if self.faults else None,
            "record": str(self.record) if self.record else None,
            "forward_to": self.forward_to,
            "exit_after": self.exit_after,
            "timeout": self.timeout,
        }


@dataclass(frozen=True)
class ReceiverSummary:
    """How a run ended: ``reason`` is exit_after, timeout, signal or stopped."""

    requests: int
    events: int
    reason: str


class ExitAfterNotReached(PrefctlError):
    """The receiver stopped (timeout, signal) before ``exit_after`` events arrived (exit 1).

    ``summary`` is how the run ended, so that ``prefctl receive -o json`` can still print its
    ``{"type": "stopped"}`` line before the error.
    """

    def __init__(self, message: str, summary: ReceiverSummary) -> None:
        super().__init__(message)
        self.summary = summary
