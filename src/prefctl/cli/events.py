"""``prefctl events``: the event catalog and history, triggered changes, and the offline
``Service-Webhook`` signature tools.

    prefctl events types [--entity E]
    prefctl events list [--profile-id] [--subscription] [--type] [--since] [--until]   (REST)
    prefctl events trigger TYPE [--profile-id ID]        → the EventIds of a real change (REST)
    prefctl events sign [--timestamp T]                  → Timestamp=…,Signature=…
    prefctl events verify --header H [--explain]         → exit 0 valid, 1 invalid

Each command is one function registered in ``register``; commands that need the REST client or the
emulator join the same group the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._context import get_state
from prefctl.cli._signing import (
    ClientIdOption,
    HashkeyEnvOption,
    HashkeyFileOption,
    SignatureEncodingOption,
    SignatureUserIdOption,
    signing_credentials,
)
from prefctl.cli._tables import columns
from prefctl.cli.app import examples, new_group
from prefctl.cli.events_rest import list_events, trigger_event
from prefctl.errors import PrefctlError, UsageError

if TYPE_CHECKING:
    from prefctl.webhooks.catalog import EventType
    from prefctl.webhooks.signature import Explanation

_HEADER_PREFIX = "service-webhook:"

_HINTS = {
    "missing": "pass the Service-Webhook header value with --header",
    "malformed": "the value reads Timestamp=<RFC 3339>,Signature=<base64>",
    "bad_timestamp": "the Timestamp must be RFC 3339 with a zone, e.g. 2026-11-21T19:20:30.123Z",
    "too_old": "check both clocks, or widen --tolerance",
    "in_future": "check both clocks, or widen --tolerance",
    "mismatch": "check the ClientId, signature user id and Hashkey; --explain shows what was signed",
}


def register(root: typer.Typer) -> None:
    group = new_group(
        "events",
        "The event catalog and history, real changes that trigger events, and tools to sign "
        "and verify Service-Webhook headers.",
        epilog=examples(
            ("prefctl events types", "every event type, with what causes it"),
            ("prefctl events trigger tag.added", "make a real change that sends tag.added"),
        ),
    )
    group.command("types")(event_types)
    group.command("list")(list_events)
    group.command("trigger")(trigger_event)
    group.command("sign")(sign_event_header)
    group.command("verify")(verify_event_header)
    root.add_typer(group)


# Narrow terminals keep the type and the whole description, wrapped (the type names its entity).
TYPES_COLUMNS = columns(
    ("type", "TYPE"),
    ("entity", "ENTITY"),
    ("filter_key", "FILTER KEY"),
    ("previous_data", "PREVIOUS DATA"),
    ("description", "DESCRIPTION"),
    drop_first=["previous_data", "filter_key", "entity"],
    wrap=["description"],
)


def event_types(
    entity: Annotated[
        str | None,
        typer.Option(
            "--entity",
            "-e",
            help="Only this entity's types: Profile, Preferences, Consents, Contacts, "
            "StandardFields, CustomFields, Groups or Tags (any case).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """List the event types a subscription can select, with their entity and filter key."""
    from prefctl.webhooks import catalog

    state = get_state()
    types = catalog.ALL_TYPES if entity is None else catalog.types_for(_entity(entity))
    rows = [_type_row(event_type) for event_type in types]
    table_rows = [{**row, "filter_key": row["filter_key"] or "(global)"} for row in rows]
    state.out.table(
        table_rows,
        TYPES_COLUMNS,
        json_rows=rows,
    )


def _entity(name: str) -> str:
    from prefctl.webhooks.catalog import ENTITIES

    for entity in ENTITIES:
        if entity.lower() == name.strip().lower():
            return entity
    raise UsageError(f"unknown entity '{name}'", hint=f"use one of {', '.join(ENTITIES)}")


def _type_row(event_type: EventType) -> dict[str, Any]:
    from prefctl.webhooks.catalog import filter_key

    key = filter_key(event_type.entity)
    return {
        "type": event_type.name,
        "entity": event_type.entity,
        "filter_key": key.name if key else None,
        "wildcard": key.wildcard if key else None,
        "previous_data": event_type.has_previous_data,
        "description": event_type.description,
    }


def sign_event_header(
    timestamp: Annotated[
        str | None,
        typer.Option(
            "--timestamp",
            "-t",
            help="Sign this RFC 3339 Timestamp, used exactly as written (default: now, "
            "e.g. 2026-11-21T19:20:30.123Z).",
            show_default=False,
        ),
    ] = None,
    client_id: ClientIdOption = None,
    signature_user_id: SignatureUserIdOption = None,
    hashkey_file: HashkeyFileOption = None,
    hashkey_env: HashkeyEnvOption = None,
    signature_encoding: SignatureEncodingOption = None,
) -> None:
    """Print a Service-Webhook header value signed with the profile's webhook credentials.

    Example: curl -H "Service-Webhook: $(prefctl events sign)" -d @event.json URL
    """
    from prefctl.clock import SystemClock, utc_timestamp
    from prefctl.webhooks.signature import HEADER_NAME, format_header, sign, signing_string

    state = get_state()
    credentials = signing_credentials(
        client_id, signature_user_id, hashkey_file, hashkey_env, signature_encoding
    )
    if timestamp is None:
        timestamp = utc_timestamp(SystemClock().now())
    else:
        _parse_time(timestamp, "--timestamp")
    signature = sign(credentials, timestamp)
    header = format_header(timestamp, signature)
    if state.json:
        state.out.json(
            {
                "header_name": HEADER_NAME,
                "header": header,
                "timestamp": timestamp,
                "signature": signature,
                "encoding": credentials.encoding,
                "signed_string": signing_string(
                    credentials.client_id, credentials.signature_user_id, timestamp
                ),
            }
        )
    else:
        state.out.line(header)


def verify_event_header(
    header: Annotated[
        str,
        typer.Option(
            "--header",
            "-H",
            help="The Service-Webhook header value (a leading 'Service-Webhook:' is ignored).",
            show_default=False,
        ),
    ],
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Print each step: the parsed Timestamp, the signed string, its age against the "
            "tolerance, the expected and the given Signature (never the Hashkey), and whether "
            "the given one is in the other encoding.",
        ),
    ] = False,
    tolerance: Annotated[
        float,
        typer.Option("--tolerance", min=0, help="Seconds the Timestamp may differ from the clock."),
    ] = 300.0,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="Verify as if the clock read this RFC 3339 time (default: now).",
            show_default=False,
        ),
    ] = None,
    client_id: ClientIdOption = None,
    signature_user_id: SignatureUserIdOption = None,
    hashkey_file: HashkeyFileOption = None,
    hashkey_env: HashkeyEnvOption = None,
    signature_encoding: SignatureEncodingOption = None,
) -> None:
    """Check a Service-Webhook header value: exit 0 when it verifies, 1 (with the reason) if not.

    With -o json the explanation is printed as a JSON object in both cases.
    """
    from prefctl.clock import SystemClock
    from prefctl.webhooks.signature import explain as explain_header

    state = get_state()
    credentials = signing_credentials(
        client_id, signature_user_id, hashkey_file, hashkey_env, signature_encoding
    )
    moment = SystemClock().now() if now is None else _parse_time(now, "--now")
    value = header.strip()
    if value.lower().startswith(_HEADER_PREFIX):
        value = value[len(_HEADER_PREFIX) :]
    result = explain_header(value, credentials, now=moment, tolerance=tolerance)
    if state.json:
        state.out.json(result.as_dict())
    elif explain:
        state.out.record(_explanation_rows(result))
    if result.ok:
        if not state.json and not explain:
            state.out.success("signature verifies")
        return
    reason = result.reason or "mismatch"
    hint = _HINTS.get(reason)
    if result.matches_encoding is not None:
        hint = (
            f'or set signature_encoding = "{result.matches_encoding}" in the profile\'s '
            "webhooks table"
        )
    elif explain and reason == "mismatch":
        hint = "check the ClientId, signature user id and Hashkey"
    raise PrefctlError(f"signature does not verify: {result.message}", hint=hint)


def _parse_time(text: str, flag: str) -> datetime:
    from prefctl.webhooks.signature import SignatureError, parse_timestamp

    try:
        return parse_timestamp(text)
    except SignatureError:
        raise UsageError(
            f"{flag} '{text}' is not an RFC 3339 time with a zone",
            hint="example: 2026-11-21T19:20:30.123Z",
        ) from None


def _explanation_rows(result: Explanation) -> dict[str, Any]:
    from prefctl.webhooks.signature import SignatureError, parse_timestamp

    rows: dict[str, Any] = {
        "result": "valid" if result.ok else f"invalid ({result.reason})",
        "reason": result.message,
    }
    if result.timestamp is not None:
        rows["timestamp"] = result.timestamp
        try:
            parsed = parse_timestamp(result.timestamp).astimezone(UTC)
            rows["parsed as"] = parsed.isoformat(timespec="milliseconds")
        except SignatureError:
            rows["parsed as"] = "not an RFC 3339 time with a zone"
    if result.signed_string is not None:
        rows["signed string"] = result.signed_string
    if result.age_seconds is not None:
        age = result.age_seconds
        when = f"{age:.3f} s old" if age >= 0 else f"{-age:.3f} s in the future"
        rows["age"] = f"{when} (tolerance {result.tolerance_seconds:g} s)"
    if result.expected_signature is not None:
        rows["encoding"] = f"Base64 of the {result.encoding} digest"
        rows["expected signature"] = result.expected_signature
        rows["given signature"] = result.given_signature
    if result.matches_encoding is not None:
        rows["given matches"] = f"Base64 of the {result.matches_encoding} digest"
    return rows
