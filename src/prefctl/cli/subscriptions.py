"""``prefctl subscriptions``: webhook subscriptions over the REST API.

    prefctl subscriptions create --name crm --url https://crm.example.com/hooks \\
        --event contacts.email.added --event preference.added:Weekly\\ Digest
    prefctl subscriptions list | get SUB | update SUB --url … | pause SUB | resume SUB | delete SUB

``SUB`` is a subscription's Id or its Name. ``create`` (and ``update`` of the Url) waits for the
validation handshake with a spinner and exits 0 only when ProvisioningState reaches Succeeded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.api.shapes import object_at, objects_at, scalar, text, texts_at
from prefctl.cli._api import WaitTimeoutOption, YesOption, api_client, read_object, source_name
from prefctl.cli._complete import event_types, subscription_refs
from prefctl.cli._context import get_state
from prefctl.cli._tables import columns
from prefctl.cli.app import examples, new_group
from prefctl.errors import UsageError

if TYPE_CHECKING:
    from prefctl.api.subscriptions import SubscriptionsApi
    from prefctl.cli._context import State

SubscriptionArgument = Annotated[
    str,
    typer.Argument(
        metavar="SUB", help="The subscription's Id or Name.", autocompletion=subscription_refs
    ),
]
NameOption = Annotated[
    str | None, typer.Option("--name", help="A name, unique in the account.", show_default=False)
]
UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="The https:// (or http://) webhook URL.", show_default=False),
]
EventOption = Annotated[
    list[str] | None,
    typer.Option(
        "--event",
        "-e",
        metavar="TYPE[:FILTER,…]",
        autocompletion=event_types,
        help="An event type to send (repeat). For Preferences, Consents, Contacts, Groups and "
        "CustomFields, ':' and comma-separated values narrow it (default: all, e.g. AllFilters).",
        show_default=False,
    ),
]
DescriptionOption = Annotated[
    str | None, typer.Option("--description", help="Free text.", show_default=False)
]
CatchUpOption = Annotated[
    bool | None,
    typer.Option(
        "--catch-up/--no-catch-up",
        help="While paused, keep events and send them on resume (default: drop them).",
        show_default=False,
    ),
]
FileOption = Annotated[
    str | None,
    typer.Option(
        "--file",
        "-f",
        metavar="FILE",
        help="A JSON subscription body ('-': stdin); the other flags override its fields.",
        show_default=False,
    ),
]
NoWaitOption = Annotated[
    bool, typer.Option("--no-wait", help="Return at once, without waiting for the handshake.")
]


def register(root: typer.Typer) -> None:
    group = new_group(
        "subscriptions",
        "Webhook subscriptions: which event types go to which URL.",
        epilog=examples(
            (
                "prefctl subscriptions create --name crm -e profile.created \\\n"
                "    --url https://crm.example/webhooks",
                "subscribe the URL, then wait until it answered the validation handshake",
            ),
            ("prefctl subscriptions list", "every subscription, its state and event types"),
        ),
    )
    group.command("create")(create)
    group.command("list")(list_subscriptions)
    group.command("get")(get)
    group.command("update")(update)
    group.command("pause")(pause)
    group.command("resume")(resume)
    group.command("delete")(delete)
    root.add_typer(group)


def create(
    name: NameOption = None,
    url: UrlOption = None,
    event: EventOption = None,
    description: DescriptionOption = None,
    catch_up: CatchUpOption = None,
    file: FileOption = None,
    no_wait: NoWaitOption = False,
    wait_timeout: WaitTimeoutOption = 120.0,
) -> None:
    """Subscribe a URL to event types, then wait for its validation handshake.

    Exit 0 only when ProvisioningState reaches Succeeded; 1 when it Failed (with the reason) or is not done within --wait-timeout.
    An endpoint that answers the handshake without the code must GET the validationUrl it received within 5 minutes.
    Failure alerts are enabled by the support team: prefctl emulator alerts enable.
    """
    from prefctl.api.subscriptions import SubscriptionsApi, selection, without_read_only

    state = get_state()
    body = without_read_only(read_object(file, "a subscription")) if file else {}
    body = _apply_flags(body, name, url, description, catch_up)
    if event:
        body["Subscriptions"] = [selection(spec) for spec in event]
    missing = [flag for flag, key in _REQUIRED if not body.get(key)]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}", hint="or pass --file with a body")
    with api_client(state) as client:
        api = SubscriptionsApi(client)
        record = api.create(body)
        state.out.info(f"created subscription {record.get('Id')} ({record.get('Name')})")
        _finish(state, api, record, wait=not no_wait, timeout=wait_timeout)


_REQUIRED = (("--name", "Name"), ("--url", "Url"), ("--event", "Subscriptions"))


# Narrow terminals keep the Id, Name and states; the URL goes first.
LIST_COLUMNS = columns(
    ("Id", "ID"),
    ("Name", "NAME"),
    ("State", "STATE"),
    ("ProvisioningState", "PROVISIONING"),
    ("Url", "URL"),
    ("events", "EVENTS"),
    drop_first=["Url", "events", "ProvisioningState"],
)


def list_subscriptions() -> None:
    """List the subscriptions with their state and event types."""
    from prefctl.api.subscriptions import SubscriptionsApi

    state = get_state()
    with api_client(state) as client:
        records = SubscriptionsApi(client).list()
    state.out.table(
        [_row(record) for record in records],
        LIST_COLUMNS,
        json_rows=records,
        empty="no subscriptions",
    )


def get(subscription: SubscriptionArgument) -> None:
    """Show one subscription, its provisioning state and its event selection."""
    from prefctl.api.subscriptions import SubscriptionsApi

    state = get_state()
    with api_client(state) as client:
        record = SubscriptionsApi(client).resolve(subscription)
    _show(state, record)


def update(
    subscription: SubscriptionArgument,
    name: NameOption = None,
    url: UrlOption = None,
    event: Annotated[
        list[str] | None,
        typer.Option(
            "--event",
            "-e",
            metavar="TYPE[:FILTER,…]",
            help="Replace the event selection with these (repeat).",
            show_default=False,
        ),
    ] = None,
    add_event: Annotated[
        list[str] | None,
        typer.Option(
            "--add-event",
            metavar="TYPE[:FILTER,…]",
            help="Add (or re-filter) an event type (repeat).",
            show_default=False,
        ),
    ] = None,
    remove_event: Annotated[
        list[str] | None,
        typer.Option(
            "--remove-event",
            metavar="TYPE",
            help="Stop sending a type (repeat).",
            show_default=False,
        ),
    ] = None,
    description: DescriptionOption = None,
    catch_up: CatchUpOption = None,
    file: FileOption = None,
    no_wait: NoWaitOption = False,
    wait_timeout: WaitTimeoutOption = 120.0,
) -> None:
    """Change a subscription: the flags are applied to the current record, which is then replaced.

    A new Url runs the handshake again; the command then waits like create.
    """
    from prefctl.api.subscriptions import (
        SubscriptionsApi,
        input_body,
        selections_to_edit,
        subscription_id,
        without_read_only,
    )

    state = get_state()
    with api_client(state) as client:
        api = SubscriptionsApi(client)
        current = api.resolve(subscription)
        body = input_body(current)
        from_file = without_read_only(read_object(file, "a subscription")) if file else {}
        body.update(from_file)
        body = _apply_flags(body, name, url, description, catch_up)
        where = (
            f"in {source_name(file)}"
            if file and "Subscriptions" in from_file
            else f"of subscription {current.get('Id')} (as the service answered)"
        )
        body["Subscriptions"] = _selections(
            [] if event else selections_to_edit(body.get("Subscriptions"), where),
            event,
            add_event,
            remove_event,
        )
        if body == input_body(current):
            given = (
                file is not None
                or any(v is not None for v in (name, url, description, catch_up, event))
                or bool(add_event or remove_event)
            )
            raise UsageError(
                "nothing to change: the subscription already has these values"
                if given
                else "nothing to change",
                hint="pass --url, --name, --event… with new values",
            )
        record = api.replace(subscription_id(current), body)
        url_changed = record.get("Url") != current.get("Url")
        _finish(state, api, record, wait=url_changed and not no_wait, timeout=wait_timeout)


def pause(subscription: SubscriptionArgument) -> None:
    """Stop deliveries; with CatchUpOnResume events are kept for the resume, else dropped."""
    _set_state(subscription, "Paused")


def resume(subscription: SubscriptionArgument) -> None:
    """Start deliveries again (kept events are queued with a new EventTime)."""
    _set_state(subscription, "Active")


def delete(subscription: SubscriptionArgument, yes: YesOption = False) -> None:
    """Delete a subscription: notifications stop at once; asks first on a terminal."""
    from prefctl.api.subscriptions import SubscriptionsApi
    from prefctl.api.subscriptions import subscription_id as id_of

    state = get_state()
    with api_client(state) as client:
        api = SubscriptionsApi(client)
        record = api.resolve(subscription)
        subscription_id = id_of(record)
        state.out.confirm(
            f"Delete subscription {subscription_id} ({record.get('Name')}) and its pending"
            " deliveries (its dead letters stay)?",
            assume_yes=yes,
        )
        api.delete(subscription_id)
    if state.json:
        # "id" first, as it always was; "subscription_id" as prefctl's other records name it.
        state.out.json({"id": subscription_id, "subscription_id": subscription_id, "deleted": True})
    state.out.success(f"deleted subscription {subscription_id}")


# -- helpers ---------------------------------------------------------------------------------------
def _apply_flags(
    body: dict[str, Any],
    name: str | None,
    url: str | None,
    description: str | None,
    catch_up: bool | None,
) -> dict[str, Any]:
    if url is not None:
        _check_url(url)
    flags = {"Name": name, "Url": url, "Description": description, "CatchUpOnResume": catch_up}
    return {**body, **{key: value for key, value in flags.items() if value is not None}}


def _check_url(url: str) -> None:
    """UsageError, before any request, for a --url that is no http(s) URL with a host."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        usable = parts.scheme in ("https", "http") and bool(parts.hostname)
    except ValueError:  # a bracketed host that is no IPv6 address, a port that is no number
        usable = False
    if not usable:
        raise UsageError(
            f"--url {url!r} is not an https:// (or http://) URL with a host",
            hint="e.g. --url https://hooks.example.com/prefctl",
        )


def _selections(
    current: list[dict[str, Any]],
    replace: list[str] | None,
    add: list[str] | None,
    remove: list[str] | None,
) -> list[dict[str, Any]]:
    from prefctl.api.subscriptions import selection

    chosen = {s["EventType"]: s for s in current} if not replace else {}
    for spec in [*(replace or []), *(add or [])]:
        item = selection(spec)
        chosen[item["EventType"]] = item
    for event_type in remove or []:
        if chosen.pop(event_type.strip(), None) is None:
            raise UsageError(f"--remove-event {event_type}: the subscription does not send it")
    if not chosen:
        raise UsageError("a subscription needs at least one event type")
    return list(chosen.values())


def _set_state(subscription: str, wanted: str) -> None:
    from prefctl.api.subscriptions import SubscriptionsApi, input_body, subscription_id

    state = get_state()
    with api_client(state) as client:
        api = SubscriptionsApi(client)
        current = api.resolve(subscription)
        record = api.replace(subscription_id(current), {**input_body(current), "State": wanted})
    _show(state, record)
    state.out.success(f"subscription {record.get('Id')} is {wanted}")


def _finish(
    state: State, api: SubscriptionsApi, record: dict[str, Any], *, wait: bool, timeout: float
) -> None:
    """Wait for provisioning (when asked), show the record, and exit 1 unless Succeeded."""
    from prefctl.api.subscriptions import FINAL_STATES, provisioning_error, subscription_id
    from prefctl.clock import SystemClock

    if not wait:
        _show(state, record)
        return
    record_id = subscription_id(record)
    if text(record.get("ProvisioningState")) not in FINAL_STATES:
        with state.out.status(_waiting(record)) as show:

            def on_state(current: dict[str, Any]) -> None:
                show(_waiting(current))
                if current.get("ProvisioningState") == "AwaitingManualAction":
                    until = text(current.get("ValidationExpiresAt"))
                    state.out.warn(
                        "the endpoint answered the handshake without the validation code: "
                        "a GET of the validationUrl it received is needed"
                        + (f" before {until}" if until else " within 5 minutes")
                        + "; still waiting"
                    )

            record = api.wait_until_provisioned(
                record_id, timeout=timeout, clock=SystemClock(), on_state=on_state
            )
    _show(state, record)
    error = provisioning_error(record, timeout)
    if error is not None:
        raise error
    state.out.success(f"subscription {record_id} is provisioned (Succeeded)")


def _waiting(record: dict[str, Any]) -> str:
    provisioning = text(record.get("ProvisioningState")) or "state unknown"
    return f"subscription {record.get('Id')}: {provisioning}, waiting…"


def _row(record: dict[str, Any]) -> dict[str, Any]:
    """The record's row in the list (fields in another shape: empty, see api/shapes)."""
    keys = ("Id", "Name", "State", "ProvisioningState", "Url")
    return {**{key: scalar(record.get(key)) for key in keys}, "events": _event_summary(record)}


def _event_summary(record: dict[str, Any]) -> str:
    types = [
        shown
        for item in objects_at(record, "Subscriptions")
        if (shown := text(item.get("EventType"))) is not None
    ]
    if len(types) <= 3:
        return ", ".join(types)
    return f"{', '.join(types[:2])} +{len(types) - 2} more"


def _selection_text(item: dict[str, Any]) -> str | None:
    """``TYPE:FILTER,…`` (None without a readable EventType). The filter key is the Entity's,
    or the event type's when the Entity is not one prefctl knows."""
    from prefctl.webhooks import catalog

    event_type = text(item.get("EventType"))
    if event_type is None:
        return None
    entity = text(item.get("Entity"))
    if entity not in catalog.ENTITIES:
        entity = catalog.entity_of(event_type) if catalog.is_event_type(event_type) else None
    key = catalog.filter_key(entity) if entity is not None else None
    values = texts_at(item, key.name) if key else []
    return f"{event_type}:{','.join(values)}" if values else event_type


def _alerts_text(record: dict[str, Any]) -> str | None:
    """The alert recipients, ``off`` (also when the record has no Alerts: the default), or None
    when the service sent them in another shape."""
    alerts = record.get("Alerts")
    if alerts is None:
        return "off"
    enabled = alerts.get("Enabled", False) if isinstance(alerts, dict) else None
    if enabled is True:
        return ", ".join(texts_at(alerts, "Recipients"))
    return "off" if enabled is False else None


def _show(state: State, record: dict[str, Any]) -> None:
    """The record in key/value lines; a field the service sent in another shape is left out."""
    edited = object_at(record, "Edited")
    selections = objects_at(record, "Subscriptions")
    rows = {
        "Id": scalar(record.get("Id")),
        "name": text(record.get("Name")),
        "description": text(record.get("Description")),
        "url": text(record.get("Url")),
        "state": text(record.get("State")),
        "provisioning": text(record.get("ProvisioningState")),
        "provisioning error": text(record.get("ProvisioningError")),
        "validation expires": text(record.get("ValidationExpiresAt")),
        "catch up on resume": scalar(record.get("CatchUpOnResume")),
        "events": [shown for item in selections if (shown := _selection_text(item)) is not None],
        "alerts": _alerts_text(record),
        "created": text(edited.get("CreateDate")),
        "modified": text(edited.get("ModifiedDate")),
    }
    state.out.record(
        {key: value for key, value in rows.items() if value not in (None, "", [])},
        json_data=record,
    )
