"""``prefctl profiles``: customer profiles over the REST API.

    prefctl profiles create --file profile.json          → the new profile (event profile.created)
    prefctl profiles get 1001
    prefctl profiles search --email ada@example.com [--all]
    prefctl profiles replace 1001 --file profile.json
    prefctl profiles update 1001 --set CustomerName.FirstName=Ada --set Emails.0.IsDefault=true
    prefctl profiles deactivate 1001 --reason Moved | reactivate 1001 | delete 1001 --yes
    prefctl profiles import profiles.ndjson              → bulk upsert, no events

Tables for people; ``-o json`` prints profiles exactly as the API returns them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.api.shapes import object_at, objects_at, scalar, text, texts_at
from prefctl.cli._api import (
    AllPagesOption,
    CursorOption,
    WithCursorOption,
    YesOption,
    api_client,
    read_object,
)
from prefctl.cli._complete import profile_ids
from prefctl.cli._context import get_state
from prefctl.cli._tables import columns
from prefctl.cli.app import examples, new_group
from prefctl.cli.profiles_import import import_profiles
from prefctl.errors import UsageError

if TYPE_CHECKING:
    from prefctl.api.patches import Assignment
    from prefctl.cli._context import State

ProfileIdArgument = Annotated[
    int,
    typer.Argument(
        metavar="ID", help="The profile's ProfileId.", min=1, autocompletion=profile_ids
    ),
]
FileOption = Annotated[
    str,
    typer.Option(
        "--file", "-f", metavar="FILE", help="JSON file with the profile ('-': read stdin)."
    ),
]

# Narrow terminals keep the ProfileId, name and email.
SEARCH_COLUMNS = columns(
    ("ProfileId", "PROFILE"),
    ("active", "ACTIVE"),
    ("name", "NAME"),
    ("email", "EMAIL"),
    ("phone", "PHONE"),
    ("modified", "MODIFIED"),
    drop_first=["modified", "phone", "active"],
)


def register(root: typer.Typer) -> None:
    group = new_group(
        "profiles",
        "Create, read, search, change and import customer profiles.",
        epilog=examples(
            ("prefctl profiles search --email ada@example.com", "find profiles by email"),
            (
                "prefctl profiles update 1001 --set CustomerName.FirstName=Ada",
                "change one field; subscribers get the events it causes",
            ),
        ),
    )
    group.command("create")(create)
    group.command("get")(get)
    group.command("search")(search)
    group.command("replace")(replace)
    group.command("update")(update)
    group.command("deactivate")(deactivate)
    group.command("reactivate")(reactivate)
    group.command("delete")(delete)
    group.command("import")(import_profiles)
    root.add_typer(group)


def create(file: FileOption) -> None:
    """Create a profile from a JSON file; the service assigns its ProfileId.

    Subscribers of profile.created are notified.
    Example: prefctl profiles create --file ada.json
    """
    from prefctl.api.profiles import ProfilesApi

    state = get_state()
    body = read_object(file, "a profile")
    with api_client(state) as client:
        profile = ProfilesApi(client).create(body)
    _show(state, profile, f"created profile {profile.get('ProfileId')}")


def get(profile_id: ProfileIdArgument) -> None:
    """Show one profile (exit 4 when it does not exist)."""
    from prefctl.api.profiles import ProfilesApi

    state = get_state()
    with api_client(state) as client:
        profile = ProfilesApi(client).get(profile_id)
    _show(state, profile)


def search(
    email: Annotated[
        str | None, typer.Option("--email", help="An email address.", show_default=False)
    ] = None,
    phone: Annotated[
        str | None, typer.Option("--phone", help="A phone number.", show_default=False)
    ] = None,
    alternate_id_type: Annotated[
        str | None,
        typer.Option(
            "--alternate-id-type", help="Type of --alternate-id (e.g. Loyalty).", show_default=False
        ),
    ] = None,
    alternate_id: Annotated[
        str | None,
        typer.Option("--alternate-id", help="An alternate id Value.", show_default=False),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=1,
            max=500,
            help="Profiles per page (the service's default: 50).",
            show_default=False,
        ),
    ] = None,
    cursor: CursorOption = None,
    all_pages: AllPagesOption = False,
    with_cursor: WithCursorOption = False,
) -> None:
    """Find profiles by email, phone or alternate id (all given criteria must match).

    Without criteria every profile matches.
    One page is listed unless --all is given; the next page's cursor is shown on stderr.
    """
    from prefctl.api.profiles import ProfileQuery, ProfilesApi

    state = get_state()
    query = ProfileQuery(email, phone, alternate_id_type, alternate_id)
    next_cursor = None
    with api_client(state) as client:
        api = ProfilesApi(client)
        if all_pages:
            state.out.listing(
                api.search_all(query, page_size=limit or 500),
                SEARCH_COLUMNS,
                noun="profiles",
                summary=_summary,
                empty="no profiles",
            )
            return
        page = api.search(query, limit=limit, cursor=cursor)
        profiles, next_cursor = page.items, page.next_cursor
    state.out.page(
        [_summary(p) for p in profiles],
        SEARCH_COLUMNS,
        json_rows=profiles,
        next_cursor=next_cursor,
        with_cursor=with_cursor,
        more="more profiles: --cursor {cursor}, or --all",
        empty="no profiles",
    )


def replace(profile_id: ProfileIdArgument, file: FileOption) -> None:
    """Replace a whole profile with the one in a JSON file (GET, edit, replace works).

    ProfileId, IsActive, ReasonCode and Edited in the file are ignored.
    Subscribers of profile.replaced are notified, and of no other event.
    """
    from prefctl.api.profiles import ProfilesApi

    state = get_state()
    body = read_object(file, "a profile")
    with api_client(state) as client:
        profile = ProfilesApi(client).replace(profile_id, body)
    _show(state, profile, f"replaced profile {profile_id}")


def update(
    profile_id: ProfileIdArgument,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            "-f",
            metavar="FILE",
            help="A JSON Patch (an array) or a merge patch (an object); '-' reads stdin.",
            show_default=False,
        ),
    ] = None,
    assignments: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            "-s",
            metavar="PATH=VALUE",
            help="Set one field (repeat): a dotted PascalCase path, digits index lists, '-' "
            "appends; the value is JSON when it parses, else text.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Change part of a profile with a JSON Patch, a merge patch, or --set pairs.

    Example: prefctl profiles update 1001 --set CustomerName.FirstName=Ada --set Emails.0.IsDefault=true
    Without list indexes the pairs become a merge patch (null clears a field); with one they become a JSON Patch.
    Subscribers get profile.updated, profile.updatedfull and one event per changed element.
    """
    from prefctl.api.patches import parse_assignment, patch_from_assignments
    from prefctl.api.profiles import ProfilesApi
    from prefctl.cli._api import read_json

    state = get_state()
    if (file is None) == (not assignments):
        raise UsageError("pass either --file or --set pairs", hint="e.g. --set Tags.-=vip")
    parsed = [parse_assignment(text) for text in assignments or []]
    _check_fields(parsed)
    with api_client(state) as client:
        api = ProfilesApi(client)
        patch = (
            read_json(file, "a JSON Patch or a merge patch")
            if file is not None
            else patch_from_assignments(parsed, lambda: api.get(profile_id))
        )
        profile = api.patch(profile_id, patch)
    _show(state, profile, f"updated profile {profile_id}")


def _check_fields(assignments: list[Assignment]) -> None:
    """UsageError, before any request, for a ``--set`` whose first name is no profile field."""
    from prefctl.errors import did_you_mean
    from prefctl.models.profile import Profile

    known = [field.alias or name for name, field in Profile.model_fields.items()]
    for assignment in assignments:
        name = str(assignment.path[0])
        if name not in known:
            raise UsageError(
                f"--set {name}=…: {name!r} is not a profile field{did_you_mean(name, known)}",
                hint=f"profile fields: {', '.join(known)}",
            )


def deactivate(
    profile_id: ProfileIdArgument,
    reason: Annotated[
        str | None,
        typer.Option("--reason", help="Why (stored as the ReasonCode).", show_default=False),
    ] = None,
) -> None:
    """Deactivate a profile (event profile.deactivated)."""
    from prefctl.api.profiles import ProfilesApi

    state = get_state()
    with api_client(state) as client:
        profile = ProfilesApi(client).deactivate(profile_id, reason)
    _show(state, profile, f"deactivated profile {profile_id}")


def reactivate(profile_id: ProfileIdArgument) -> None:
    """Reactivate a deactivated profile (event profile.reactivated)."""
    from prefctl.api.profiles import ProfilesApi

    state = get_state()
    with api_client(state) as client:
        profile = ProfilesApi(client).reactivate(profile_id)
    _show(state, profile, f"reactivated profile {profile_id}")


def delete(
    profile_id: ProfileIdArgument,
    reason_code: Annotated[
        str | None,
        typer.Option("--reason-code", help="Why it is deleted.", show_default=False),
    ] = None,
    yes: YesOption = False,
) -> None:
    """Delete a profile for good (event profile.deleted); asks first on a terminal."""
    from prefctl.api.profiles import ProfilesApi

    state = get_state()
    state.out.confirm(f"Delete profile {profile_id} for good?", assume_yes=yes)
    with api_client(state) as client:
        ProfilesApi(client).delete(profile_id, reason_code)
    if state.json:
        state.out.json({"profile_id": profile_id, "deleted": True})
    state.out.success(f"deleted profile {profile_id}")


# -- rendering -------------------------------------------------------------------------------------
def _show(state: State, profile: dict[str, Any], done: str | None = None) -> None:
    state.out.record(_details(profile), json_data=profile)
    if done:
        state.out.success(done)


def _name(profile: dict[str, Any]) -> str:
    name = object_at(profile, "CustomerName")
    parts = ("Prefix", "FirstName", "MiddleName", "LastName", "Suffix")
    return " ".join(shown for p in parts if (shown := text(name.get(p))))


def _is_default(item: dict[str, Any]) -> bool:
    return item.get("IsDefault") is True


def _default(profile: dict[str, Any], list_key: str, key: str) -> str | None:
    items = objects_at(profile, list_key)
    chosen = next((i for i in items if _is_default(i)), items[0] if items else None)
    return None if chosen is None else text(chosen.get(key))


def _summary(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile's row in the search table (fields in another shape: empty, see api/shapes)."""
    edited = object_at(profile, "Edited")
    return {
        "ProfileId": scalar(profile.get("ProfileId")),
        "active": scalar(profile.get("IsActive", True)),
        "name": _name(profile),
        "email": _default(profile, "Emails", "Address"),
        "phone": _default(profile, "PhoneNumbers", "Number"),
        "modified": text(edited.get("ModifiedDate")) or text(edited.get("CreateDate")),
    }


def _details(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile in key/value lines: the fields people look for, each list on one line.

    A field the service sent in another shape is left out, as are list items without the field
    that names them (api/shapes)."""
    edited = object_at(profile, "Edited")

    def named(key: str, name: str, describe: Callable[[dict[str, Any], str], str]) -> list[str]:
        return [
            describe(item, shown)
            for item in objects_at(profile, key)
            if (shown := text(item.get(name))) is not None
        ]

    def marked(key: str, name: str) -> list[str]:
        return named(key, name, lambda i, n: f"{n} (default)" if _is_default(i) else n)

    def valued(key: str, name: str, value: str, separator: str, missing: Any = None) -> list[str]:
        return named(key, name, lambda i, n: f"{n}{separator}{text(i.get(value, missing)) or ''}")

    contacts = ("Emails", "PhoneNumbers", "Addresses")
    preferences = len(objects_at(profile, "ProfilePreferences")) + sum(
        len(objects_at(contact, "Preferences"))
        for key in contacts
        for contact in objects_at(profile, key)
    )
    rows: dict[str, Any] = {
        "ProfileId": scalar(profile.get("ProfileId")),
        "active": scalar(profile.get("IsActive", True)),
        "reason code": text(profile.get("ReasonCode")),
        "name": _name(profile),
        "customer type": text(profile.get("CustomerType")),
        "locale": text(profile.get("DefaultLocale")),
        "registration": text(profile.get("RegistrationStatus")),
        "emails": marked("Emails", "Address"),
        "phones": marked("PhoneNumbers", "Number"),
        "addresses": marked("Addresses", "Type"),
        "alternate ids": valued("AlternateIds", "Type", "Value", "="),
        "preferences": preferences,
        "consents": valued("Consents", "ConsentType", "ConsentStatus", ": ", "NotSet"),
        "custom fields": valued("CustomFields", "Name", "Value", "="),
        "groups": named(
            "Groups", "Name", lambda g, n: f"{n} (inactive)" if g.get("IsActive") is False else n
        ),
        "tags": texts_at(profile, "Tags"),
        "created": text(edited.get("CreateDate")),
        "modified": text(edited.get("ModifiedDate")),
    }
    return {key: value for key, value in rows.items() if value not in (None, "", [])}
