"""The cases of ``prefctl service check`` and the run that plays them (see the package).

Requests go out with httpx as the raw requests they are, so that the evidence shows exactly what
came back; the bearer token for the REST cases comes from the profile's usual token provider.
Everything the run creates (a profile and a subscription, both named ``NAME_PREFIX-<random>``) is
deleted in a ``finally``, so an exception, Ctrl-C or SIGTERM (which the CLI raises as an
exception) still cleans up.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import queue
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from prefctl.auth.credentials import SecretBasic, SecretPost, credentials_for
from prefctl.auth.http_policy import http_client
from prefctl.auth.provider import TokenProvider
from prefctl.auth.tls import context_for
from prefctl.clock import Clock, utc_timestamp
from prefctl.config import Profile
from prefctl.errors import UnreachableError, UsageError
from prefctl.hosts import is_loopback
from prefctl.logs import redact, register_secret
from prefctl.models.setting_ranges import SETTING_RANGES
from prefctl.receiver import Kind, ReceiverConfig, RunningReceiver, Verdict, start_in_thread
from prefctl.receiver.conformance import CaseResult, Report
from prefctl.webhooks.signature import (
    ENCODINGS,
    HEADER_NAME,
    RAW,
    SignatureError,
    SigningCredentials,
    Verifier,
)

__all__ = ["CASE_NAMES", "NAME_PREFIX", "SUITE_NAME", "ServiceCheckConfig", "check_service"]

log = logging.getLogger(__name__)

SUITE_NAME = "prefctl service check"
NAME_PREFIX = "prefctl-service-check"
TOKEN_PATH = "/oauth2/v1/token"
DEFAULT_WAIT = 120.0  # seconds for the handshake and for the events (3 handshake tries of 30 s)
EXTRA_EVENT_WAIT = 5.0  # after rule 4's events came, how long to wait for profile.updatedfull
_BODY_LIMIT = 600  # characters of an answer kept as evidence

TOKEN_CASES = (
    "token_basic",
    "token_body",
    "token_expires_in",
    "token_wrong_secret",
    "token_wrong_scope",
)
REST_CASES = ("error_400", "error_401", "error_403", "error_404")
SHAPE_CASES = ("programs_shape", "settings_shape", "settings_ranges", "subscriptions_shape")
WRITE_CASES = (
    "profile_shape",
    "handshake",
    "signature_encoding",
    "event_shape",
    "event_types",
    "previous_data",
    "cleanup",
)
CASE_NAMES = TOKEN_CASES + REST_CASES + SHAPE_CASES + WRITE_CASES

# The update the check makes to its profile, and the events the emulator sends for it by default:
# rule 4's list for these changes, and profile.updatedfull beside profile.updated.
_NEW_FIRST_NAME = "Changed"
_NEW_EMAIL = f"{NAME_PREFIX}@example.com"
_RULE4_EVENTS = frozenset(
    {"profile.updated", "standardfield.firstname.updated", "contacts.email.added"}
)
_UPDATED_FULL = "profile.updatedfull"
_SUBSCRIBED = (
    {"Entity": "Profile", "EventType": "profile.updated"},
    {"Entity": "Profile", "EventType": _UPDATED_FULL},
    {"Entity": "StandardFields", "EventType": "standardfield.firstname.updated"},
    {
        "Entity": "Contacts",
        "EventType": "contacts.email.added",
        "ContactTypes": ["AllContactTypes"],
    },
)
_ENVELOPE_KEYS = ("EventId", "EventType", "SubscriptionId", "ClientId", "ProfileId")
_TIME_KEYS = ("EventTime", "OriginalEventTime")
_PROBLEM_KEYS = ("type", "title", "status", "detail")
_PROFILE_KEYS = (
    "ProfileId",
    "IsActive",
    "CustomerName",
    "Emails",
    "PhoneNumbers",
    "Addresses",
    "AlternateIds",
    "Consents",
    "CustomFields",
    "Groups",
    "Tags",
    "Edited",
)
_SUBSCRIPTION_KEYS = ("Id", "Name", "Url", "State", "ProvisioningState", "Subscriptions")
_PROVISIONING_STATES = ("Creating", "Updating", "AwaitingManualAction", "Succeeded", "Failed")


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


class _Differs(Exception):
    """The deployment does something else than expected; ``setting`` is what matches it."""

    def __init__(self, reason: str, *, setting: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.setting = setting


class _Skipped(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
    run = _Run(config, clock, on_case or (lambda _text: None), transport)
    try:
        return run.play()
    finally:
        run.close()


class _Run:
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
        self.profile_id: int | None = None
        self.subscription_id: int | None = None
        self.receiver: RunningReceiver | None = None
        self.events: list[tuple[Verdict, dict[str, Any]]] = []
        self.created: list[str] = []
        self.updated = False
        self.evidence: dict[str, Any] = {}
        self.figures: dict[str, Any] = {}
        self.status: int | None = None
        if config.signing is not None:
            register_secret(config.signing.hashkey)

    # -- the run --------------------------------------------------------------------------------
    def play(self) -> Report:
        started_at, start = utc_timestamp(self.clock.now()), self.clock.monotonic()
        self.token = self.provider.token().access_token  # AuthError / UnreachableError: exit 3 / 5
        register_secret(self.token)
        cases: list[CaseResult] = []
        for name in CASE_NAMES:
            self.on_case(name)
            cases.append(self._case(name))
        elapsed = round((self.clock.monotonic() - start) * 1000, 1)
        return Report(self.base, started_at, elapsed, tuple(cases), suite=SUITE_NAME)

    def _case(self, name: str) -> CaseResult:
        start = self.clock.monotonic()
        self.evidence, self.figures, self.status = {}, {}, None
        skipped, passed = False, True
        try:
            reason = getattr(self, f"_{name}")()
        except _Differs as differs:
            reason, passed = differs.reason, False
            if differs.setting is not None:
                self.evidence["setting"] = differs.setting
        except _Skipped as skip:
            reason, skipped = skip.reason, True
        except UnreachableError as exc:
            reason, passed = f"no answer: {exc.message}", False
        duration = round((self.clock.monotonic() - start) * 1000, 1)
        evidence = {key: value for key, value in self.evidence.items() if value is not None}
        return CaseResult(
            name,
            passed,
            reason,
            duration,
            self.status,
            figures=dict(self.figures),
            skipped=skipped,
            evidence=evidence,
        )

    def close(self) -> None:
        """Delete what the run created (also after an exception, Ctrl-C or SIGTERM)."""
        try:
            self._delete_created()
        finally:
            if self.receiver is not None:
                self.receiver.stop()
                self.receiver = None
            self.http.close()
            self.auth_http.close()

    def _delete_created(self) -> list[str]:
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
            response = self._api("DELETE", path, record=False)
        except UnreachableError as exc:
            return [f"{what} not deleted: {exc.message}"]
        if response.status_code not in (200, 202, 204, 404):
            return [f"{what} not deleted: HTTP {response.status_code}"]
        log.info("deleted %s (%s)", what, self.config.name)
        self.created.append(what)
        return []

    # -- requests -------------------------------------------------------------------------------
    def _api(
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
            self._answered(response)
        return response

    def _token(
        self, form: dict[str, str], headers: dict[str, str], shown: str
    ) -> tuple[httpx.Response, Any]:
        try:
            response = self.auth_http.post(
                self.token_url, data=form, headers={"Accept": "application/json", **headers}
            )
        except httpx.TransportError as exc:
            raise UnreachableError(f"POST {self.token_url} failed: {exc}") from None
        self.evidence["request"] = f"POST {self.token_url} ({shown})"
        self._answered(response)
        return response, _json(response)

    def _answered(self, response: httpx.Response) -> None:
        self.status = response.status_code
        kind = response.headers.get("content-type", "no content type")
        text = response.text
        if len(text) > _BODY_LIMIT:
            text = text[:_BODY_LIMIT] + "…"
        self.evidence["response"] = redact(f"HTTP {response.status_code} ({kind}) {text}".strip())

    def _expect(self, expected: str) -> None:
        self.evidence["expected"] = expected

    # -- token endpoint -------------------------------------------------------------------------
    def _secret(self) -> str:
        if self.profile.auth_method == "certificate":
            raise _Skipped("the profile authenticates with a certificate: no secret to send")
        secret = self.profile.resolve_client_secret()
        register_secret(secret)
        return secret

    def _token_form(self) -> dict[str, str]:
        return {"grant_type": "client_credentials", "scope": self.profile.scope}

    def _token_basic(self) -> str:
        parts = SecretBasic(self.profile.client_id, self._secret()).token_request(
            self.token_url, self.clock.now()
        )
        response, body = self._token(
            self._token_form(), parts.headers, "Authorization: Basic ***; grant_type, scope"
        )
        return self._token_answer(response, body, "with the Basic header")

    def _token_body(self) -> str:
        parts = SecretPost(self.profile.client_id, self._secret()).token_request(
            self.token_url, self.clock.now()
        )
        form = {**self._token_form(), **parts.form}
        response, body = self._token(form, {}, "grant_type, scope, client_id, client_secret=***")
        return self._token_answer(response, body, "with client_id and client_secret in the body")

    def _token_answer(self, response: httpx.Response, body: Any, how: str) -> str:
        self._expect(
            "HTTP 200, JSON {access_token, token_type: Bearer, scope: <the scope asked for>, "
            "expires_in: integer}, Cache-Control: no-store"
        )
        if response.status_code != 200 or not isinstance(body, dict):
            raise _Differs(f"a token request {how} was refused (HTTP {response.status_code})")
        problems = []
        if not isinstance(body.get("access_token"), str):
            problems.append("no access_token")
        if body.get("token_type") != "Bearer":
            problems.append(f"token_type is {body.get('token_type')!r}, not 'Bearer'")
        if body.get("scope") != self.profile.scope:
            problems.append(f"scope is {body.get('scope')!r}, not {self.profile.scope!r}")
        if not _is_int(body.get("expires_in")):
            problems.append(f"expires_in is {body.get('expires_in')!r}, not an integer")
        if "no-store" not in response.headers.get("cache-control", ""):
            problems.append("no Cache-Control: no-store (RFC 6749 5.1)")
        if problems:
            raise _Differs(f"token response {how}: " + "; ".join(problems))
        return f"a token {how}: access_token, token_type Bearer, scope, expires_in"

    def _token_expires_in(self) -> str:
        parts = credentials_for(self.profile).token_request(self.token_url, self.clock.now())
        response, body = self._token(
            {**self._token_form(), **parts.form},
            parts.headers,
            f"the profile's {self.profile.auth_method}",
        )
        self._expect(
            "expires_in: an integer of seconds, equal to the token's exp - iat (60 minutes by "
            "default; configurable per client)"
        )
        if response.status_code != 200 or not isinstance(body, dict):
            raise _Differs(f"the token request was refused (HTTP {response.status_code})")
        expires_in = body.get("expires_in")
        if not isinstance(expires_in, int) or isinstance(expires_in, bool) or expires_in <= 0:
            raise _Differs(f"expires_in is {expires_in!r}, not a positive integer")
        self.figures["expires_in"] = expires_in
        claims = _jwt_claims(body.get("access_token"))
        if claims is None:
            raise _Differs("the access_token is not a JWT: the spec says a JWT")
        lifetime = claims.get("exp", 0) - claims.get("iat", 0)
        self.figures["token_lifetime"] = lifetime
        if not _is_int(lifetime) or abs(lifetime - expires_in) > 5:
            raise _Differs(f"expires_in {expires_in} s, but the JWT's exp - iat is {lifetime} s")
        default = " (the default 60 minutes)" if expires_in == 3600 else ""
        return f"expires_in {expires_in} s{default}, as the JWT's exp - iat"

    def _token_wrong_secret(self) -> str:
        secret = self._secret()
        wrong = secret[::-1] if secret[::-1] != secret else secret + "x"
        parts = SecretBasic(self.profile.client_id, wrong).token_request(
            self.token_url, self.clock.now()
        )
        response, body = self._token(
            self._token_form(), parts.headers, "Authorization: Basic <a wrong secret>"
        )
        self._expect(
            "HTTP 401, JSON {error: invalid_client, error_description}, WWW-Authenticate: Basic "
            "(RFC 6749 5.2)"
        )
        return self._oauth_error(response, body, 401, "invalid_client", basic=True)

    def _token_wrong_scope(self) -> str:
        parts = credentials_for(self.profile).token_request(self.token_url, self.clock.now())
        scope = f"{self.profile.service_client_id}/{self.config.name}-no-such-user"
        form = {"grant_type": "client_credentials", "scope": scope, **parts.form}
        response, body = self._token(form, parts.headers, f"scope {scope} (no such user)")
        self._expect("HTTP 400, JSON {error: invalid_scope, error_description} (RFC 6749 5.2)")
        return self._oauth_error(response, body, 400, "invalid_scope", basic=False)

    def _oauth_error(
        self, response: httpx.Response, body: Any, status: int, error: str, *, basic: bool
    ) -> str:
        problems = []
        if response.status_code != status:
            problems.append(f"HTTP {response.status_code}, not {status}")
        if not isinstance(body, dict):
            problems.append("the body is not a JSON object")
        else:
            if body.get("error") != error:
                problems.append(f"error is {body.get('error')!r}, not {error!r}")
            if not isinstance(body.get("error_description"), str):
                problems.append("no error_description")
        if basic and not response.headers.get("www-authenticate", "").lower().startswith("basic"):
            problems.append("no WWW-Authenticate: Basic header")
        if problems:
            raise _Differs("; ".join(problems))
        return f"HTTP {status} {error} with error_description"

    # -- REST errors ----------------------------------------------------------------------------
    def _error_400(self) -> str:
        response = self._api("GET", "/profiles?limit=0")
        return self._problem(response, 400, "a search with limit=0", field_errors=True)

    def _error_401(self) -> str:
        response = self._api("GET", "/programs", token="not-a-token")
        reason = self._problem(response, 401, "a malformed bearer token")
        challenge = response.headers.get("www-authenticate", "")
        if not challenge.lower().startswith("bearer") or "invalid_token" not in challenge:
            raise _Differs(f'no WWW-Authenticate: Bearer error="invalid_token" (got {challenge!r})')
        return reason + ', WWW-Authenticate: Bearer error="invalid_token"'

    def _error_403(self) -> str:
        other = f"{self.api_url}/{self.profile.service_client_id}-{self.config.name}"
        response = self._api("GET", "/programs", base=other)
        return self._problem(response, 403, "another account's path with this token")

    def _error_404(self) -> str:
        response = self._api("GET", "/profiles/2147483600")
        return self._problem(response, 404, "a profile that does not exist")

    def _problem(
        self, response: httpx.Response, status: int, what: str, *, field_errors: bool = False
    ) -> str:
        shape = "{type, title, status, detail" + (
            ", errors: [{field, message}]}" if field_errors else "}"
        )
        self._expect(f"HTTP {status}, application/problem+json {shape} (RFC 9457)")
        if response.status_code != status:
            raise _Differs(f"{what}: HTTP {response.status_code}, not {status}")
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        body = _json(response)
        problems = []
        if kind != "application/problem+json":
            problems.append(f"Content-Type {kind or 'none'}, not application/problem+json")
        if not isinstance(body, dict):
            problems.append("the body is not a JSON object")
        else:
            missing = [key for key in _PROBLEM_KEYS if key not in body]
            if missing:
                problems.append(f"no {', '.join(missing)}")
            if "status" in body and body["status"] != status:
                problems.append(f"status {body['status']!r} in the body")
            errors = body.get("errors")
            if field_errors and not (
                isinstance(errors, list)
                and errors
                and all(isinstance(e, dict) and "field" in e and "message" in e for e in errors)
            ):
                problems.append("no errors: [{field, message}]")
        if problems:
            raise _Differs(f"{what}: " + "; ".join(problems))
        return f"{what}: HTTP {status} problem+json"

    # -- resource shapes ------------------------------------------------------------------------
    def _get_object(self, path: str, what: str) -> dict[str, Any]:
        response = self._api("GET", path)
        body = _json(response)
        if response.status_code != 200 or not isinstance(body, dict):
            raise _Differs(f"GET {path} answered HTTP {response.status_code}, not 200 with {what}")
        return body

    def _programs_shape(self) -> str:
        self._expect(
            "{Programs: [{ProgramId, Name, ProgramType, Filters: [{FilterId, Name}], Channels}]}"
        )
        body = self._get_object("/programs", "{Programs: [...]}")
        programs = body.get("Programs")
        if not isinstance(programs, list):
            raise _Differs("no Programs list")
        for program in programs:
            missing = _missing(program, ("ProgramId", "Name", "ProgramType", "Filters", "Channels"))
            filters = program.get("Filters") if isinstance(program, dict) else None
            if not missing and isinstance(filters, list):
                missing = [
                    f"Filters[].{k}" for f in filters for k in _missing(f, ("FilterId", "Name"))
                ]
            if missing:
                raise _Differs(f"a program has no {', '.join(sorted(set(missing)))}")
        self.figures["programs"] = len(programs)
        return (
            f"{len(programs)} programs, each with ProgramId, Name, ProgramType, Filters, Channels"
        )

    def _settings(self) -> dict[str, Any]:
        return self._get_object("/settings/webhooks", "the settings")

    def _settings_shape(self) -> str:
        self._expect(f"{{{', '.join(SETTING_RANGES)}}}, integers")
        body = self._settings()
        missing = [name for name in SETTING_RANGES if not _is_int(body.get(name))]
        if missing:
            raise _Differs(f"no integer {', '.join(missing)}")
        extra = sorted(set(body) - set(SETTING_RANGES))
        if extra:
            self.figures["other_settings"] = extra
        return f"all {len(SETTING_RANGES)} settings, integers"

    def _settings_ranges(self) -> str:
        ranges = ", ".join(
            f"{r.name} {r.minimum}–{r.maximum if r.maximum is not None else '…'}"
            for r in SETTING_RANGES.values()
        )
        self._expect(f"values within the spec's ranges ({ranges}); an out-of-range PUT gets 400")
        current = self._settings()
        values = {k: v for k, v in current.items() if k in SETTING_RANGES and _is_int(v)}
        outside = [
            problem
            for name, value in values.items()
            if (problem := SETTING_RANGES[name].check(value, values)) is not None
        ]
        if outside:
            raise _Differs("; ".join(outside))
        if self.config.no_writes:
            return (
                "current values within range (the refused out-of-range PUT: skipped, --no-writes)"
            )
        low = SETTING_RANGES["MaxConcurrentRequests"].minimum - 1
        response = self._api(
            "PUT", "/settings/webhooks", body={**current, "MaxConcurrentRequests": low}
        )
        if response.is_success:
            self._api("PUT", "/settings/webhooks", body=current, record=False)  # put it back
            raise _Differs(
                f"MaxConcurrentRequests={low} (below the spec's 50) was accepted "
                "(the settings were put back)"
            )
        if response.status_code != 400:
            raise _Differs(f"MaxConcurrentRequests={low}: HTTP {response.status_code}, not 400")
        return f"current values within range; MaxConcurrentRequests={low} refused with 400"

    def _subscriptions_shape(self) -> str:
        self._expect(f"{{Subscriptions: [{{{', '.join(_SUBSCRIPTION_KEYS)}, …}}]}}")
        body = self._get_object("/subscriptions", "{Subscriptions: [...]}")
        items = body.get("Subscriptions")
        if not isinstance(items, list):
            raise _Differs("no Subscriptions list")
        for item in items:
            self._subscription_record(item)
        count = "1 subscription" if len(items) == 1 else f"{len(items)} subscriptions"
        return f"{count}, each with {', '.join(_SUBSCRIPTION_KEYS)}"

    def _subscription_record(self, item: Any) -> None:
        missing = _missing(item, _SUBSCRIPTION_KEYS)
        if missing:
            raise _Differs(f"a subscription has no {', '.join(missing)}")
        if item["ProvisioningState"] not in _PROVISIONING_STATES:
            raise _Differs(
                f"ProvisioningState {item['ProvisioningState']!r} is none of the emulator's "
                f"{', '.join(_PROVISIONING_STATES)}"
            )

    # -- the writes: a profile, a subscription, an update ---------------------------------------
    def _writes(self) -> None:
        if self.config.no_writes:
            raise _Skipped("--no-writes: this case creates or changes data")

    def _profile_shape(self) -> str:
        self._writes()
        self._expect(
            f"HTTP 201, Location, {{{', '.join(_PROFILE_KEYS)}, …}} with ProfileId an integer"
        )
        body = {
            "CustomerName": {"FirstName": "Service", "LastName": "Check"},
            "Tags": [self.config.name],
        }
        response = self._api("POST", "/profiles", body=body)
        created = _json(response)
        if response.is_success and isinstance(created, dict) and _is_int(created.get("ProfileId")):
            self.profile_id = created["ProfileId"]
        if response.status_code != 201 or self.profile_id is None:
            raise _Differs(
                f"creating a profile answered HTTP {response.status_code}, not 201 with a ProfileId"
            )
        problems = [f"no {key}" for key in _missing(created, _PROFILE_KEYS)]
        if not response.headers.get("location"):
            problems.append("no Location header")
        if problems:
            raise _Differs("; ".join(problems))
        self.figures["profile_id"] = self.profile_id
        return f"profile {self.profile_id} ({self.config.name}) created: 201, Location, the profile's fields"

    def _receiver_url(self) -> str:
        if self.config.public_url is not None:
            return self.config.public_url
        if is_loopback(self.base):
            return ""
        raise _Skipped("needs --public-url: the deployment cannot reach a receiver on this machine")

    def _handshake(self) -> str:
        self._writes()
        if self.profile_id is None:
            raise _Skipped("no test profile (profile_shape did not create one)")
        public = self._receiver_url()
        path = (urlsplit(public).path or "/webhooks") if public else "/webhooks"
        self.receiver = start_in_thread(
            ReceiverConfig(
                port=self.config.receiver_port, path=path, verify=False, keep_requests=True
            )
        )
        url = public or self.receiver.webhook_url
        self.figures["webhook_url"] = url
        body = {
            "Name": self.config.name,
            "Description": "temporary, made by prefctl service check; deleted when it ends",
            "Url": url,
            "State": "Active",
            "CatchUpOnResume": False,
            "Subscriptions": list(_SUBSCRIBED),
        }
        response = self._api("POST", "/subscriptions", body=body)
        created = _json(response)
        if isinstance(created, dict) and _is_int(created.get("Id")):
            self.subscription_id = created["Id"]
        if response.status_code != 201 or self.subscription_id is None:
            raise _Differs(f"creating a subscription answered HTTP {response.status_code}, not 201")
        self._subscription_record(created)
        self.on_case(f"handshake: waiting up to {self.config.wait:g} s for the validation message")
        handshake = self._next(Kind.HANDSHAKE, self.config.wait)
        self._expect(
            "a POST without a Service-Webhook header, JSON {EventId, EventType: "
            "subscription.validation, SubscriptionId, ClientId, ProfileId: null, EventTime, "
            "OriginalEventTime, data: {validationCode, validationUrl}}; then ProvisioningState "
            "Succeeded"
        )
        if handshake is None:
            raise _Differs(f"no validation message within {self.config.wait:g} s at {url}")
        verdict, message = handshake
        self.evidence["received"] = _shown_request(verdict)
        problems = _envelope_problems(message, expected_type="subscription.validation")
        if message.get("ProfileId", "absent") is not None:
            problems.append(f"ProfileId is {message.get('ProfileId', 'absent')!r}, not null")
        data = message.get("data")
        if not isinstance(data, dict):
            problems.append(
                "no data object (camel case)" + (": it is Data" if "Data" in message else "")
            )
        else:
            problems += [
                f"no data.{key}" for key in _missing(data, ("validationCode", "validationUrl"))
            ]
        if _header(verdict, HEADER_NAME) is not None:
            problems.append(f"a {HEADER_NAME} header (the spec: the handshake carries none)")
        if problems:
            raise _Differs("; ".join(problems))
        state = self._wait_provisioned()
        if state != "Succeeded":
            raise _Differs(f"ProvisioningState {state} after the receiver answered the code")
        return "validation message as the spec shows it; the subscription reached Succeeded"

    def _wait_provisioned(self) -> str:
        deadline = self.clock.monotonic() + self.config.wait
        state = "unknown"
        while self.clock.monotonic() < deadline:
            response = self._api("GET", f"/subscriptions/{self.subscription_id}", record=False)
            body = _json(response)
            state = (
                body.get("ProvisioningState", "unknown") if isinstance(body, dict) else "unknown"
            )
            if state in ("Succeeded", "Failed"):
                return str(state)
            self._pause(0.2)
        return str(state)

    def _pause(self, seconds: float) -> None:
        """Wait between two polls of the provisioning state: on the receiver's queue, so a
        request that arrives meanwhile is not late."""
        assert self.receiver is not None
        try:
            verdict = self.receiver.verdicts.get(timeout=seconds)
        except queue.Empty:
            return
        self.receiver.verdicts.put(verdict)

    def _next(self, kind: str, timeout: float) -> tuple[Verdict, dict[str, Any]] | None:
        """The next request of ``kind`` (for events: about the test profile) within ``timeout``."""
        assert self.receiver is not None
        deadline = self.clock.monotonic() + timeout
        while (left := deadline - self.clock.monotonic()) > 0:
            try:
                verdict = self.receiver.verdicts.get(timeout=left)
            except queue.Empty:
                return None
            message = _message(verdict)
            if verdict.kind != kind or message is None:
                continue
            if kind == Kind.EVENT and message.get("ProfileId") != self.profile_id:
                continue  # another profile's change on a shared account
            return verdict, message
        return None

    def _events(self) -> list[tuple[Verdict, dict[str, Any]]]:
        """The events of the check's update of its profile (made once, on first use)."""
        self._writes()
        if self.receiver is None or self.subscription_id is None:
            raise _Skipped("no temporary subscription (see handshake)")
        if self.events:
            return self.events
        if not self.updated:
            self.updated = True
            patch = {
                "CustomerName": {"FirstName": _NEW_FIRST_NAME},
                "Emails": [{"Address": _NEW_EMAIL, "Type": "Personal", "IsDefault": True}],
            }
            response = self._api(
                "PATCH",
                f"/profiles/{self.profile_id}",
                body=patch,
                content_type="application/merge-patch+json",
                record=False,
            )
            if not response.is_success:
                raise _Differs(f"updating the test profile answered HTTP {response.status_code}")
            self.on_case(f"waiting up to {self.config.wait:g} s for the update's events")
            deadline = self.clock.monotonic() + self.config.wait
            types: set[str] = set()
            while not types >= _RULE4_EVENTS:
                got = self._next(Kind.EVENT, deadline - self.clock.monotonic())
                if got is None:
                    break
                self.events.append(got)
                types.add(str(got[1].get("EventType")))
            if types >= _RULE4_EVENTS and _UPDATED_FULL not in types:
                got = self._next(Kind.EVENT, EXTRA_EVENT_WAIT)
                if got is not None:
                    self.events.append(got)
        if not self.events:
            raise _Differs(
                f"no event about profile {self.profile_id} within {self.config.wait:g} s of its update"
            )
        return self.events

    def _signature_encoding(self) -> str:
        events = self._events()
        if self.config.signing is None:
            raise _Skipped(
                "the profile has no webhook credentials (signature_user_id and a Hashkey in its "
                "webhooks table)"
            )
        verdict, _message = events[0]
        header = _header(verdict, HEADER_NAME)
        self.evidence["received"] = _shown_request(verdict)
        configured = self.config.signing.encoding
        self._expect(
            f"a {HEADER_NAME} header whose Signature is Base64 of the raw HMAC-SHA512 digest (the "
            f'emulator\'s default reading; the profile says signature_encoding = "{configured}")'
        )
        if header is None:
            raise _Differs(f"the event carries no {HEADER_NAME} header")
        matched = []
        for encoding in ENCODINGS:
            creds = SigningCredentials(
                self.config.signing.client_id,
                self.config.signing.signature_user_id,
                self.config.signing.hashkey,
                encoding,
            )
            try:
                Verifier(creds, tolerance=86400).verify(header, now=self.clock.now())
                matched.append(encoding)
            except SignatureError:
                continue
        self.figures["verified_as"] = matched
        if not matched:
            raise _Differs(
                "the Signature verifies neither as Base64 of the raw digest nor of the hex "
                "digest: check the profile's webhooks signature_user_id and Hashkey, and the "
                "service client id"
            )
        used = matched[0]
        setting = f'signature_encoding = "{used}"'
        if used != RAW:
            raise _Differs(
                f"Base64 of the {used} digest, not of the raw digest (the emulator's default; "
                f"'prefctl emulator start --signature-encoding {used}' plays it)"
                + ("; the profile already says so" if configured == used else ""),
                setting=setting,
            )
        if configured != used:
            raise _Differs(
                f"Base64 of the raw digest, but the profile says signature_encoding = "
                f'"{configured}"',
                setting=setting,
            )
        return "Base64 of the raw HMAC-SHA512 digest (verified both ways; raw matched)"

    def _event_shape(self) -> str:
        events = self._events()
        self.evidence["received"] = _shown_request(events[0][0])
        self._expect(
            "JSON {EventId, EventType, SubscriptionId, ClientId, ProfileId, EventTime, "
            "OriginalEventTime (RFC 3339 UTC with milliseconds), Data}"
        )
        problems: list[str] = []
        for _verdict, event in events:
            problems += _envelope_problems(event, expected_type=None)
            if event.get("SubscriptionId") != self.subscription_id:
                problems.append(f"SubscriptionId {event.get('SubscriptionId')!r}")
            if "Data" not in event:
                problems.append(f"{event.get('EventType')}: no Data")
        if problems:
            raise _Differs("; ".join(sorted(set(problems))))
        return f"{len(events)} events with the spec's envelope"

    def _event_types(self) -> str:
        events = self._events()
        types = sorted({str(event.get("EventType")) for _v, event in events})
        self.figures["event_types"] = types
        expected = sorted(_RULE4_EVENTS | {_UPDATED_FULL})
        self.evidence["received"] = ", ".join(types)
        self._expect(
            "for a new first name and a new email: the service documentation's example ("
            "Events → Rules) "
            + ", ".join(sorted(_RULE4_EVENTS))
            + f", and {_UPDATED_FULL} beside profile.updated (as the emulator sends them)"
        )
        missing = sorted(_RULE4_EVENTS - set(types))
        if missing:
            raise _Differs(f"no {', '.join(missing)}")
        if _UPDATED_FULL not in types:
            raise _Differs(
                f"no {_UPDATED_FULL} beside profile.updated, which the emulator always sends: "
                "subscribe to profile.updated rather than counting on it"
            )
        return "as the emulator: " + ", ".join(expected)

    def _previous_data(self) -> str:
        events = self._events()
        self._expect(
            "standardfield.firstname.updated with PreviousData holding the prior FirstName "
            "('Service')"
        )
        for verdict, event in events:
            if event.get("EventType") == "standardfield.firstname.updated":
                self.evidence["received"] = _shown_request(verdict)
                previous = event.get("PreviousData")
                if not isinstance(previous, dict):
                    raise _Differs("no PreviousData object")
                if "Service" not in json.dumps(previous):
                    raise _Differs(f"PreviousData does not hold the prior FirstName: {previous}")
                return "PreviousData holds the prior FirstName"
        raise _Differs("no standardfield.firstname.updated event to look at")

    def _cleanup(self) -> str:
        self._writes()
        self._expect("DELETE of the subscription and the profile: 2xx")
        problems = self._delete_created()
        if problems:
            raise _Differs("; ".join(problems))
        if not self.created:
            return "nothing to delete"
        return "deleted " + " and ".join(self.created)


# -- helpers -------------------------------------------------------------------------------------
def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _missing(value: Any, keys: tuple[str, ...]) -> list[str]:
    if not isinstance(value, dict):
        return list(keys)
    return [key for key in keys if key not in value]


def _jwt_claims(token: Any) -> dict[str, Any] | None:
    if not isinstance(token, str) or token.count(".") != 2:
        return None
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) else None


def _message(verdict: Verdict) -> dict[str, Any] | None:
    try:
        message = json.loads(verdict.body or b"")
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _header(verdict: Verdict, name: str) -> str | None:
    wanted = name.lower().encode()
    for key, value in verdict.headers or ():
        if key.lower() == wanted:
            return value.decode("latin-1")
    return None


def _shown_request(verdict: Verdict) -> str:
    """The request as evidence: its headers of interest and its body, secrets masked."""
    headers: Mapping[str, str] = {
        key.decode("latin-1"): value.decode("latin-1") for key, value in verdict.headers or ()
    }
    shown = {k: v for k, v in headers.items() if k.lower() in ("content-type", "service-webhook")}
    body = (verdict.body or b"").decode("utf-8", "replace")
    if len(body) > _BODY_LIMIT:
        body = body[:_BODY_LIMIT] + "…"
    return redact(f"POST {verdict.path} {json.dumps(shown)} {body}")


def _envelope_problems(message: Mapping[str, Any], *, expected_type: str | None) -> list[str]:
    problems = [f"no {key}" for key in _ENVELOPE_KEYS + _TIME_KEYS if key not in message]
    if expected_type is not None and message.get("EventType") != expected_type:
        problems.append(f"EventType {message.get('EventType')!r}, not {expected_type!r}")
    for key in _TIME_KEYS:
        value = message.get(key)
        if isinstance(value, str) and not _is_rfc3339_ms(value):
            problems.append(f"{key} {value!r} is not RFC 3339 UTC with milliseconds")
    return problems


def _is_rfc3339_ms(value: str) -> bool:
    if not value.endswith("Z") or len(value) != 24 or value[19] != ".":
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True
