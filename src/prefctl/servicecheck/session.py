"""What the cases of ``prefctl service check`` share: the configuration of a run, the session
with the deployment (its HTTP clients, the bearer token, what the run created) and the evidence
of the case being played, and the two ways a case ends other than a match.

Requests go out with httpx as the raw requests they are, so that the evidence shows exactly what
came back; the bearer token for the REST cases comes from the profile's usual token provider.
Everything the run creates (a profile and a subscription, both named ``NAME_PREFIX-<random>``) is
deleted by ``Session.close``, which the run calls in a ``finally``, so an exception, Ctrl-C or
SIGTERM (which the CLI raises as an exception) still cleans up.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from prefctl.auth.http_policy import http_client
from prefctl.auth.provider import TokenProvider
from prefctl.auth.tls import context_for
from prefctl.clock import Clock
from prefctl.config import Profile
from prefctl.errors import UnreachableError, UsageError
from prefctl.logs import redact, register_secret
from prefctl.receiver import RunningReceiver, Verdict
from prefctl.servicecheck.evidence import json_body, shown_response
from prefctl.webhooks.signature import SigningCredentials

log = logging.getLogger(__name__)

NAME_PREFIX = "prefctl-service-check"
TOKEN_PATH = "/oauth2/v1/token"
DEFAULT_WAIT = 120.0  # seconds for the handshake and for the events (3 handshake tries of 30 s)


@dataclass(frozen=True)
class ServiceCheckConfig:
    """What to check: the profile's deployment, the webhook credentials the profile verifies with
    (None when it has none), where the deployment reaches the check's receiver, and whether to
    write at all."""

    profile: Profile
    signing: SigningCredentials | None = None
    public_url: str | None = None
    no_writes: bool = False
    receiver_port: int = 0
    wait: float = DEFAULT_WAIT
    name: str = field(default_factory=lambda: f"{NAME_PREFIX}-{secrets.token_hex(4)}")

    def __post_init__(self) -> None:
        if self.public_url is not None:
            parts = urlsplit(self.public_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise UsageError(
                    f"--public-url '{self.public_url}' is not an http:// or https:// URL",
                    hint="the public address that reaches this machine's receiver, e.g. "
                    "https://hooks.example.com/webhooks",
                )
        if not 0 <= self.receiver_port <= 65535:
            raise UsageError(f"--receiver-port {self.receiver_port} is not a TCP port (0–65535)")
        if not self.wait > 0:
            raise UsageError(f"--wait must be a number of seconds above 0, not {self.wait:g}")


class Differs(Exception):
    """The deployment does something else than expected; ``setting`` is what matches it."""

    def __init__(self, reason: str, *, setting: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.setting = setting


class Skipped(Exception):
    """The case cannot be played here; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Session:
    """One run's connection to the deployment, its test data and the current case's evidence."""

    def __init__(
        self,
        config: ServiceCheckConfig,
        clock: Clock,
        on_case: Callable[[str], None],
        transport: httpx.BaseTransport | None,
    ) -> None:
        profile = config.profile
        profile.require("auth_url", "api_url", "service_client_id", "client_id")
        self.config = config
        self.profile = profile
        self.clock = clock
        self.on_case = on_case
        self.token_url = profile.auth_url.rstrip("/") + TOKEN_PATH
        self.api_url = profile.api_url.rstrip("/")
        self.base = f"{self.api_url}/{profile.service_client_id}"
        ca_bundle = profile.path(profile.ca_bundle) if profile.ca_bundle else None

        def client(url: str) -> httpx.Client:
            return http_client(
                url,
                verify=context_for(url, ca_bundle),
                transport=transport,
                timeout=httpx.Timeout(30.0, connect=10.0),
                follow_redirects=False,  # a redirect is an answer to report, not to follow
                headers={"User-Agent": f"prefctl service-check ({config.name})"},
            )

        self.http, self.auth_http = client(self.base), client(self.token_url)
        self.provider = TokenProvider.for_profile(profile, clock=clock, transport=transport)
        self.token = ""
        # The test data and what it brought: the write cases fill these, close() deletes.
        self.profile_id: int | None = None
        self.subscription_id: int | None = None
        self.receiver: RunningReceiver | None = None
        self.events: list[tuple[Verdict, dict[str, Any]]] = []
        self.updated = False
        self.created: list[str] = []
        # The current case's evidence, figures and last HTTP status.
        self.evidence: dict[str, Any] = {}
        self.figures: dict[str, Any] = {}
        self.status: int | None = None
        if config.signing is not None:
            register_secret(config.signing.hashkey)

    def start(self) -> None:
        """Get the bearer token the REST cases use (AuthError / UnreachableError: exit 3 / 5)."""
        self.token = self.provider.token().access_token
        register_secret(self.token)

    def new_case(self) -> None:
        self.evidence, self.figures, self.status = {}, {}, None

    def close(self) -> None:
        """Delete what the run created (also after an exception, Ctrl-C or SIGTERM)."""
        try:
            self.delete_created()
        finally:
            if self.receiver is not None:
                self.receiver.stop()
                self.receiver = None
            self.http.close()
            self.auth_http.close()

    def delete_created(self) -> list[str]:
        """Delete the test subscription and profile; the problems, if any, in words."""
        problems: list[str] = []
        if self.subscription_id is not None:
            sid, self.subscription_id = self.subscription_id, None
            problems += self._delete(f"/subscriptions/{sid}", f"subscription {sid}")
        if self.profile_id is not None:
            pid, self.profile_id = self.profile_id, None
            problems += self._delete(f"/profiles/{pid}", f"profile {pid}")
        return problems

    def _delete(self, path: str, what: str) -> list[str]:
        try:
            response = self.api("DELETE", path, record=False)
        except UnreachableError as exc:
            return [f"{what} not deleted: {exc.message}"]
        if response.status_code not in (200, 202, 204, 404):
            return [f"{what} not deleted: HTTP {response.status_code}"]
        log.info("deleted %s (%s)", what, self.config.name)
        self.created.append(what)
        return []

    # -- requests -------------------------------------------------------------------------------
    def api(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        token: str | None = None,
        base: str | None = None,
        content_type: str = "application/json",
        record: bool = True,
    ) -> httpx.Response:
        """A REST request; with ``record`` it and its answer become the case's evidence."""
        url = (base or self.base) + path
        headers = {"Accept": "application/json", "Authorization": f"Bearer {token or self.token}"}
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        shown = f"{method} {url}" + (f" {content.decode()}" if content else "")
        try:
            response = self.http.request(method, url, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise UnreachableError(f"{method} {url} failed: {exc}") from None
        if record:
            self.evidence["request"] = redact(shown)
            self.answered(response)
        return response

    def token_request(
        self, form: dict[str, str], headers: dict[str, str], shown: str
    ) -> tuple[httpx.Response, Any]:
        """A POST to the token endpoint (``shown`` describes it without secrets): the answer
        and its JSON."""
        try:
            response = self.auth_http.post(
                self.token_url, data=form, headers={"Accept": "application/json", **headers}
            )
        except httpx.TransportError as exc:
            raise UnreachableError(f"POST {self.token_url} failed: {exc}") from None
        self.evidence["request"] = f"POST {self.token_url} ({shown})"
        self.answered(response)
        return response, json_body(response)

    def answered(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.evidence["response"] = shown_response(response)

    def expect(self, expected: str) -> None:
        self.evidence["expected"] = expected

    def get_object(self, path: str, what: str) -> dict[str, Any]:
        """GET a JSON object; any other answer differs."""
        response = self.api("GET", path)
        body = json_body(response)
        if response.status_code != 200 or not isinstance(body, dict):
            raise Differs(f"GET {path} answered HTTP {response.status_code}, not 200 with {what}")
        return body

    def require_writes(self) -> None:
        if self.config.no_writes:
            raise Skipped("--no-writes: this case creates or changes data")


Case = Callable[[Session], str]
"""A case: plays its requests on the session and returns what matched, or raises Differs or
Skipped."""
