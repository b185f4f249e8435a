"""The REST API's cases that need no test data: the error body shapes (400, 401, 403, 404 as
RFC 9457 problem details) and the resource shapes of programs, settings and subscriptions, with
the settings' ranges."""

from __future__ import annotations

from typing import Any

import httpx

from prefctl.models.setting_ranges import SETTING_RANGES
from prefctl.servicecheck.evidence import is_int, json_body, missing
from prefctl.servicecheck.session import Case, Differs, Session

PROBLEM_KEYS = ("type", "title", "status", "detail")
SUBSCRIPTION_KEYS = ("Id", "Name", "Url", "State", "ProvisioningState", "Subscriptions")
PROVISIONING_STATES = ("Creating", "Updating", "AwaitingManualAction", "Succeeded", "Failed")


# -- error bodies ----------------------------------------------------------------------------------
def error_400(session: Session) -> str:
    response = session.api("GET", "/profiles?limit=0")
    return _problem(session, response, 400, "a search with limit=0", field_errors=True)


def error_401(session: Session) -> str:
    response = session.api("GET", "/programs", token="not-a-token")
    reason = _problem(session, response, 401, "a malformed bearer token")
    challenge = response.headers.get("www-authenticate", "")
    if not challenge.lower().startswith("bearer") or "invalid_token" not in challenge:
        raise Differs(f'no WWW-Authenticate: Bearer error="invalid_token" (got {challenge!r})')
    return reason + ', WWW-Authenticate: Bearer error="invalid_token"'


def error_403(session: Session) -> str:
    other = f"{session.api_url}/{session.profile.service_client_id}-{session.config.name}"
    response = session.api("GET", "/programs", base=other)
    return _problem(session, response, 403, "another account's path with this token")


def error_404(session: Session) -> str:
    response = session.api("GET", "/profiles/2147483600")
    return _problem(session, response, 404, "a profile that does not exist")


def _problem(
    session: Session,
    response: httpx.Response,
    status: int,
    what: str,
    *,
    field_errors: bool = False,
) -> str:
    shape = "{type, title, status, detail" + (
        ", errors: [{field, message}]}" if field_errors else "}"
    )
    session.expect(f"HTTP {status}, application/problem+json {shape} (RFC 9457)")
    if response.status_code != status:
        raise Differs(f"{what}: HTTP {response.status_code}, not {status}")
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    body = json_body(response)
    problems = []
    if kind != "application/problem+json":
        problems.append(f"Content-Type {kind or 'none'}, not application/problem+json")
    if not isinstance(body, dict):
        problems.append("the body is not a JSON object")
    else:
        absent = [key for key in PROBLEM_KEYS if key not in body]
        if absent:
            problems.append(f"no {', '.join(absent)}")
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
        raise Differs(f"{what}: " + "; ".join(problems))
    return f"{what}: HTTP {status} problem+json"


# -- resource shapes -------------------------------------------------------------------------------
def programs_shape(session: Session) -> str:
    session.expect(
        "{Programs: [{ProgramId, Name, ProgramType, Filters: [{FilterId, Name}], Channels}]}"
    )
    body = session.get_object("/programs", "{Programs: [...]}")
    programs = body.get("Programs")
    if not isinstance(programs, list):
        raise Differs("no Programs list")
    for program in programs:
        absent = missing(program, ("ProgramId", "Name", "ProgramType", "Filters", "Channels"))
        filters = program.get("Filters") if isinstance(program, dict) else None
        if not absent and isinstance(filters, list):
            absent = [f"Filters[].{k}" for f in filters for k in missing(f, ("FilterId", "Name"))]
        if absent:
            raise Differs(f"a program has no {', '.join(sorted(set(absent)))}")
    session.figures["programs"] = len(programs)
    return f"{len(programs)} programs, each with ProgramId, Name, ProgramType, Filters, Channels"


def _settings(session: Session) -> dict[str, Any]:
    return session.get_object("/settings/webhooks", "the settings")


def settings_shape(session: Session) -> str:
    session.expect(f"{{{', '.join(SETTING_RANGES)}}}, integers")
    body = _settings(session)
    absent = [name for name in SETTING_RANGES if not is_int(body.get(name))]
    if absent:
        raise Differs(f"no integer {', '.join(absent)}")
    extra = sorted(set(body) - set(SETTING_RANGES))
    if extra:
        session.figures["other_settings"] = extra
    return f"all {len(SETTING_RANGES)} settings, integers"


def settings_ranges(session: Session) -> str:
    ranges = ", ".join(
        f"{r.name} {r.minimum}–{r.maximum if r.maximum is not None else '…'}"
        for r in SETTING_RANGES.values()
    )
    session.expect(f"values within the spec's ranges ({ranges}); an out-of-range PUT gets 400")
    current = _settings(session)
    values = {k: v for k, v in current.items() if k in SETTING_RANGES and is_int(v)}
    outside = [
        problem
        for name, value in values.items()
        if (problem := SETTING_RANGES[name].check(value, values)) is not None
    ]
    if outside:
        raise Differs("; ".join(outside))
    if session.config.no_writes:
        return "current values within range (the refused out-of-range PUT: skipped, --no-writes)"
    low = SETTING_RANGES["MaxConcurrentRequests"].minimum - 1
    response = session.api(
        "PUT", "/settings/webhooks", body={**current, "MaxConcurrentRequests": low}
    )
    if response.is_success:
        session.api("PUT", "/settings/webhooks", body=current, record=False)  # put it back
        raise Differs(
            f"MaxConcurrentRequests={low} (below the spec's 50) was accepted "
            "(the settings were put back)"
        )
    if response.status_code != 400:
        raise Differs(f"MaxConcurrentRequests={low}: HTTP {response.status_code}, not 400")
    return f"current values within range; MaxConcurrentRequests={low} refused with 400"


def subscriptions_shape(session: Session) -> str:
    session.expect(f"{{Subscriptions: [{{{', '.join(SUBSCRIPTION_KEYS)}, …}}]}}")
    body = session.get_object("/subscriptions", "{Subscriptions: [...]}")
    items = body.get("Subscriptions")
    if not isinstance(items, list):
        raise Differs("no Subscriptions list")
    for item in items:
        check_subscription_record(item)
    count = "1 subscription" if len(items) == 1 else f"{len(items)} subscriptions"
    return f"{count}, each with {', '.join(SUBSCRIPTION_KEYS)}"


def check_subscription_record(item: Any) -> None:
    """Raise Differs when a subscription resource lacks a field or has an unknown state."""
    absent = missing(item, SUBSCRIPTION_KEYS)
    if absent:
        raise Differs(f"a subscription has no {', '.join(absent)}")
    if item["ProvisioningState"] not in PROVISIONING_STATES:
        raise Differs(
            f"ProvisioningState {item['ProvisioningState']!r} is none of the emulator's "
            f"{', '.join(PROVISIONING_STATES)}"
        )


REST_CASES: dict[str, Case] = {
    "error_400": error_400,
    "error_401": error_401,
    "error_403": error_403,
    "error_404": error_404,
}
SHAPE_CASES: dict[str, Case] = {
    "programs_shape": programs_shape,
    "settings_shape": settings_shape,
    "settings_ranges": settings_ranges,
    "subscriptions_shape": subscriptions_shape,
}
