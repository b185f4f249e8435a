"""The cases that write: a test profile, a temporary subscription to the check's own receiver
(its handshake), one update of the profile and the events it brings (their signature encoding,
envelope, types and PreviousData), and the clean-up of both. ``--no-writes`` skips them all."""

from __future__ import annotations

import json
import queue
from typing import Any
from urllib.parse import urlsplit

from prefctl.hosts import is_loopback
from prefctl.models.setting_ranges import EMIT_UPDATED_FULL
from prefctl.receiver import Kind, ReceiverConfig, Verdict, start_in_thread
from prefctl.servicecheck.evidence import (
    envelope_problems,
    header,
    is_int,
    json_body,
    message_of,
    missing,
    shown_request,
)
from prefctl.servicecheck.rest_cases import check_subscription_record
from prefctl.servicecheck.session import NAME_PREFIX, Case, Differs, Session, Skipped
from prefctl.webhooks.signature import (
    ENCODINGS,
    HEADER_NAME,
    RAW,
    SignatureError,
    SigningCredentials,
    Verifier,
)

EXTRA_EVENT_WAIT = 5.0  # after rule 4's events came, how long to wait for profile.updatedfull

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


def profile_shape(session: Session) -> str:
    session.require_writes()
    session.expect(
        f"HTTP 201, Location, {{{', '.join(_PROFILE_KEYS)}, …}} with ProfileId an integer"
    )
    name = session.config.name
    body = {"CustomerName": {"FirstName": "Service", "LastName": "Check"}, "Tags": [name]}
    response = session.api("POST", "/profiles", body=body)
    created = json_body(response)
    if response.is_success and isinstance(created, dict) and is_int(created.get("ProfileId")):
        session.profile_id = created["ProfileId"]
    if response.status_code != 201 or session.profile_id is None:
        raise Differs(
            f"creating a profile answered HTTP {response.status_code}, not 201 with a ProfileId"
        )
    problems = [f"no {key}" for key in missing(created, _PROFILE_KEYS)]
    if not response.headers.get("location"):
        problems.append("no Location header")
    if problems:
        raise Differs("; ".join(problems))
    session.figures["profile_id"] = session.profile_id
    return f"profile {session.profile_id} ({name}) created: 201, Location, the profile's fields"


def _receiver_url(session: Session) -> str:
    if session.config.public_url is not None:
        return session.config.public_url
    if is_loopback(session.base):
        return ""
    raise Skipped("needs --public-url: the deployment cannot reach a receiver on this machine")


def handshake(session: Session) -> str:
    session.require_writes()
    if session.profile_id is None:
        raise Skipped("no test profile (profile_shape did not create one)")
    config = session.config
    public = _receiver_url(session)
    path = (urlsplit(public).path or "/webhooks") if public else "/webhooks"
    session.receiver = start_in_thread(
        ReceiverConfig(port=config.receiver_port, path=path, verify=False, keep_requests=True)
    )
    url = public or session.receiver.webhook_url
    session.figures["webhook_url"] = url
    body = {
        "Name": config.name,
        "Description": "temporary, made by prefctl service check; deleted when it ends",
        "Url": url,
        "State": "Active",
        "CatchUpOnResume": False,
        "Subscriptions": list(_SUBSCRIBED),
    }
    response = session.api("POST", "/subscriptions", body=body)
    created = json_body(response)
    if isinstance(created, dict) and is_int(created.get("Id")):
        session.subscription_id = created["Id"]
    if response.status_code != 201 or session.subscription_id is None:
        raise Differs(f"creating a subscription answered HTTP {response.status_code}, not 201")
    check_subscription_record(created)
    session.on_case(f"handshake: waiting up to {config.wait:g} s for the validation message")
    received = _next(session, Kind.HANDSHAKE, config.wait)
    session.expect(
        "a POST without a Service-Webhook header, JSON {EventId, EventType: "
        "subscription.validation, SubscriptionId, ClientId, ProfileId: null, EventTime, "
        "OriginalEventTime, data: {validationCode, validationUrl}}; then ProvisioningState "
        "Succeeded"
    )
    if received is None:
        raise Differs(f"no validation message within {config.wait:g} s at {url}")
    verdict, message = received
    session.evidence["received"] = shown_request(verdict)
    problems = envelope_problems(message, expected_type="subscription.validation")
    if message.get("ProfileId", "absent") is not None:
        problems.append(f"ProfileId is {message.get('ProfileId', 'absent')!r}, not null")
    data = message.get("data")
    if not isinstance(data, dict):
        problems.append(
            "no data object (camel case)" + (": it is Data" if "Data" in message else "")
        )
    else:
        problems += [f"no data.{key}" for key in missing(data, ("validationCode", "validationUrl"))]
    if header(verdict, HEADER_NAME) is not None:
        problems.append(f"a {HEADER_NAME} header (the spec: the handshake carries none)")
    if problems:
        raise Differs("; ".join(problems))
    state = _wait_provisioned(session)
    if state != "Succeeded":
        raise Differs(f"ProvisioningState {state} after the receiver answered the code")
    return "validation message as the spec shows it; the subscription reached Succeeded"


def _wait_provisioned(session: Session) -> str:
    deadline = session.clock.monotonic() + session.config.wait
    state = "unknown"
    while session.clock.monotonic() < deadline:
        response = session.api("GET", f"/subscriptions/{session.subscription_id}", record=False)
        body = json_body(response)
        state = body.get("ProvisioningState", "unknown") if isinstance(body, dict) else "unknown"
        if state in ("Succeeded", "Failed"):
            return str(state)
        _pause(session, 0.2)
    return str(state)


def _pause(session: Session, seconds: float) -> None:
    """Wait between two polls of the provisioning state: on the receiver's queue, so a request
    that arrives meanwhile is not late."""
    assert session.receiver is not None
    try:
        verdict = session.receiver.verdicts.get(timeout=seconds)
    except queue.Empty:
        return
    session.receiver.verdicts.put(verdict)


def _next(session: Session, kind: str, timeout: float) -> tuple[Verdict, dict[str, Any]] | None:
    """The next request of ``kind`` (for events: about the test profile) within ``timeout``."""
    assert session.receiver is not None
    deadline = session.clock.monotonic() + timeout
    while (left := deadline - session.clock.monotonic()) > 0:
        try:
            verdict = session.receiver.verdicts.get(timeout=left)
        except queue.Empty:
            return None
        message = message_of(verdict)
        if verdict.kind != kind or message is None:
            continue
        if kind == Kind.EVENT and message.get("ProfileId") != session.profile_id:
            continue  # another profile's change on a shared account
        return verdict, message
    return None


def _events(session: Session) -> list[tuple[Verdict, dict[str, Any]]]:
    """The events of the check's update of its profile (made once, on first use)."""
    session.require_writes()
    if session.receiver is None or session.subscription_id is None:
        raise Skipped("no temporary subscription (see handshake)")
    if session.events:
        return session.events
    wait = session.config.wait
    if not session.updated:
        session.updated = True
        patch = {
            "CustomerName": {"FirstName": _NEW_FIRST_NAME},
            "Emails": [{"Address": _NEW_EMAIL, "Type": "Personal", "IsDefault": True}],
        }
        response = session.api(
            "PATCH",
            f"/profiles/{session.profile_id}",
            body=patch,
            content_type="application/merge-patch+json",
            record=False,
        )
        if not response.is_success:
            raise Differs(f"updating the test profile answered HTTP {response.status_code}")
        session.on_case(f"waiting up to {wait:g} s for the update's events")
        deadline = session.clock.monotonic() + wait
        types: set[str] = set()
        while not types >= _RULE4_EVENTS:
            got = _next(session, Kind.EVENT, deadline - session.clock.monotonic())
            if got is None:
                break
            session.events.append(got)
            types.add(str(got[1].get("EventType")))
        if types >= _RULE4_EVENTS and _UPDATED_FULL not in types:
            got = _next(session, Kind.EVENT, EXTRA_EVENT_WAIT)
            if got is not None:
                session.events.append(got)
    if not session.events:
        raise Differs(
            f"no event about profile {session.profile_id} within {wait:g} s of its update"
        )
    return session.events


def signature_encoding(session: Session) -> str:
    events = _events(session)
    signing = session.config.signing
    if signing is None:
        raise Skipped(
            "the profile has no webhook credentials (signature_user_id and a Hashkey in its "
            "webhooks table)"
        )
    verdict, _message = events[0]
    value = header(verdict, HEADER_NAME)
    session.evidence["received"] = shown_request(verdict)
    configured = signing.encoding
    session.expect(
        f"a {HEADER_NAME} header whose Signature is Base64 of the raw HMAC-SHA512 digest (the "
        f'emulator\'s default reading; the profile says signature_encoding = "{configured}")'
    )
    if value is None:
        raise Differs(f"the event carries no {HEADER_NAME} header")
    matched = []
    for encoding in ENCODINGS:
        creds = SigningCredentials(
            signing.client_id, signing.signature_user_id, signing.hashkey, encoding
        )
        try:
            Verifier(creds, tolerance=86400).verify(value, now=session.clock.now())
            matched.append(encoding)
        except SignatureError:
            continue
    session.figures["verified_as"] = matched
    if not matched:
        raise Differs(
            "the Signature verifies neither as Base64 of the raw digest nor of the hex "
            "digest: check the profile's webhooks signature_user_id and Hashkey, and the "
            "service client id"
        )
    used = matched[0]
    setting = f'signature_encoding = "{used}"'
    if used != RAW:
        raise Differs(
            f"Base64 of the {used} digest, not of the raw digest (the emulator's default; "
            f"'prefctl emulator start --signature-encoding {used}' plays it)"
            + ("; the profile already says so" if configured == used else ""),
            setting=setting,
        )
    if configured != used:
        raise Differs(
            f'Base64 of the raw digest, but the profile says signature_encoding = "{configured}"',
            setting=setting,
        )
    return "Base64 of the raw HMAC-SHA512 digest (verified both ways; raw matched)"


def event_shape(session: Session) -> str:
    events = _events(session)
    session.evidence["received"] = shown_request(events[0][0])
    session.expect(
        "JSON {EventId, EventType, SubscriptionId, ClientId, ProfileId, EventTime, "
        "OriginalEventTime (RFC 3339 UTC with milliseconds), Data}"
    )
    problems: list[str] = []
    for _verdict, event in events:
        problems += envelope_problems(event, expected_type=None)
        if event.get("SubscriptionId") != session.subscription_id:
            problems.append(f"SubscriptionId {event.get('SubscriptionId')!r}")
        if "Data" not in event:
            problems.append(f"{event.get('EventType')}: no Data")
    if problems:
        raise Differs("; ".join(sorted(set(problems))))
    return f"{len(events)} events with the spec's envelope"


def event_types(session: Session) -> str:
    events = _events(session)
    types = sorted({str(event.get("EventType")) for _v, event in events})
    session.figures["event_types"] = types
    expected = sorted(_RULE4_EVENTS | {_UPDATED_FULL})
    session.evidence["received"] = ", ".join(types)
    session.expect(
        "for a new first name and a new email: the service documentation's example ("
        "Events → Rules) "
        + ", ".join(sorted(_RULE4_EVENTS))
        + f", and {_UPDATED_FULL} beside profile.updated (the emulator's default: "
        f"{EMIT_UPDATED_FULL}=true)"
    )
    absent = sorted(_RULE4_EVENTS - set(types))
    if absent:
        raise Differs(f"no {', '.join(absent)}")
    if _UPDATED_FULL not in types:
        # The deployment made the other choice the spec leaves open: its list is the example's
        # exactly. The setting that makes the emulator play it is the account's, not the profile's.
        raise Differs(
            f"no {_UPDATED_FULL} beside profile.updated: the deployment sends the documentation's "
            f"list exactly; the emulator plays it with 'prefctl settings set "
            f"{EMIT_UPDATED_FULL}=false' (subscribe to profile.updated rather than counting "
            f"on {_UPDATED_FULL})",
            setting=f"{EMIT_UPDATED_FULL}=false",
        )
    return "as the emulator: " + ", ".join(expected)


def previous_data(session: Session) -> str:
    events = _events(session)
    session.expect(
        "standardfield.firstname.updated with PreviousData holding the prior FirstName ('Service')"
    )
    for verdict, event in events:
        if event.get("EventType") == "standardfield.firstname.updated":
            session.evidence["received"] = shown_request(verdict)
            previous = event.get("PreviousData")
            if not isinstance(previous, dict):
                raise Differs("no PreviousData object")
            if "Service" not in json.dumps(previous):
                raise Differs(f"PreviousData does not hold the prior FirstName: {previous}")
            return "PreviousData holds the prior FirstName"
    raise Differs("no standardfield.firstname.updated event to look at")


def cleanup(session: Session) -> str:
    session.require_writes()
    session.expect("DELETE of the subscription and the profile: 2xx")
    problems = session.delete_created()
    if problems:
        raise Differs("; ".join(problems))
    if not session.created:
        return "nothing to delete"
    return "deleted " + " and ".join(session.created)


WRITE_CASES: dict[str, Case] = {
    "profile_shape": profile_shape,
    "handshake": handshake,
    "signature_encoding": signature_encoding,
    "event_shape": event_shape,
    "event_types": event_types,
    "previous_data": previous_data,
    "cleanup": cleanup,
}
