"""``/profiles``: create, read, search, replace, patch, deactivate, reactivate, delete.

Every write goes through ``emulator.writes.ProfileWriter`` (profile, events and deliveries all or
nothing) in the emulator's writer process (``emulator.group_writer``), so the write routes are
``async``: their request is parsed on the event loop and their write queued, as a picklable
``ProfileJob`` (a PATCH's change is the module-level ``_patched`` with its document bound). Request bodies are
validated by the strict profile model (unknown fields → 400). Read-only fields (``ProfileId``, ``IsActive``, ``ReasonCode``,
``Edited``) are accepted in a PUT body and ignored, so GET → edit → PUT works; a PATCH that would
change one of them is refused (400), because silently dropping an explicit change would mislead.

PATCH takes ``application/json-patch+json`` (RFC 6902) or ``application/merge-patch+json`` (RFC
7396), applied to the stored wire profile: a malformed patch or a result that is not a valid profile
is a 400, a patch that cannot apply (missing path, failing ``test``) a 409, and nothing is written.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Body, Depends, Path, Query, Request
from starlette.responses import Response

from prefctl.emulator.context import group_writer
from prefctl.emulator.routes._common import (
    JsonContent,
    NoBody,
    Principal,
    ProblemError,
    ProfilesRead,
    ProfilesWrite,
    RawBody,
    accepts,
    account_router,
    account_url,
    connection,
    created,
    get_ctx,
    json_response,
    no_content,
    parse_json,
    problems,
    raw_body,
    require,
    validate,
)
from prefctl.emulator.routes._lanes import direct
from prefctl.emulator.routes._patch import (
    PatchConflictError,
    PatchDocumentError,
    apply_json_patch,
    apply_merge_patch,
)
from prefctl.emulator.writes import ProfileJob, WriteResult
from prefctl.models._base import dump_wire
from prefctl.models.problem import FieldError
from prefctl.models.profile import (
    Profile,
    ProfilePage,
    StrictDeactivateRequest,
    StrictProfile,
)
from prefctl.store import profiles as store
from prefctl.store.timestamps import epoch

__all__ = ["JSON_PATCH", "MERGE_PATCH", "router"]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
MAX_ID = 2**63 - 1  # SQLite's INTEGER

router = account_router("profiles")

ProfileId = Annotated[int, Path(ge=1, le=MAX_ID, description="The profile's ProfileId.")]

_READ_ONLY_HINTS = {
    "ProfileId": "ProfileId is assigned by the service",
    "IsActive": "use POST …/deactivate or …/reactivate to change IsActive",
    "ReasonCode": "ReasonCode is set by POST …/deactivate",
    "Edited": "Edited is maintained by the service",
}

_JSON_PATCH_SCHEMA: dict[str, Any] = {
    "type": "array",
    "description": "RFC 6902 operations on the wire profile, e.g. "
    '[{"op": "add", "path": "/Emails/-", "value": {"Address": "ann@example.com"}}]',
    "items": {
        "type": "object",
        "required": ["op", "path"],
        "properties": {
            "op": {"enum": ["add", "remove", "replace", "move", "copy", "test"]},
            "path": {"type": "string", "description": "RFC 6901 JSON Pointer"},
            "from": {"type": "string", "description": "RFC 6901 JSON Pointer (move, copy)"},
            "value": {"description": "the value (add, replace, test)"},
        },
    },
}
_MERGE_PATCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 7396 merge patch of the wire profile: members merge, null removes, "
    "lists are replaced whole.",
}


@router.post(
    "/profiles",
    status_code=201,
    response_model=Profile,
    summary="Create a profile (event profile.created)",
)
async def create_profile(
    request: Request,
    principal: ProfilesWrite,
    _content: JsonContent,
    body: Annotated[StrictProfile, Body()],
) -> Response:
    result = await _write(request, principal, "create", dump_wire(body))
    profile = _written(result)
    return created(profile, account_url(request, "profiles", profile["ProfileId"]))


@router.get(
    "/profiles",
    response_model=ProfilePage,
    summary="Search profiles, one page at a time",
    description="All given criteria must match; none lists every profile. Pass the page's "
    "`NextCursor` as `cursor` for the next page (`NextCursor` is null on the last page).",
)
def search_profiles(
    request: Request,
    principal: ProfilesRead,
    email: Annotated[str | None, Query(max_length=254, description="An email address")] = None,
    phone: Annotated[
        str | None, Query(max_length=40, description="A phone number; only digits compare")
    ] = None,
    alternate_id_type: Annotated[
        str | None, Query(alias="alternateIdType", max_length=200, description="needs alternateId")
    ] = None,
    alternate_id: Annotated[
        str | None, Query(alias="alternateId", max_length=200, description="An alternate id Value")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=store.MAX_PAGE_SIZE)] = store.DEFAULT_PAGE_SIZE,
    cursor: Annotated[str | None, Query(max_length=200, description="NextCursor")] = None,
) -> Response:
    query = store.ProfileQuery(email, phone, alternate_id_type, alternate_id)
    page = store.search_profiles(
        connection(request), principal.service_client_id, query, limit=limit, cursor=cursor
    )
    return json_response({"Profiles": page.profiles, "NextCursor": page.next_cursor})


@router.get(
    "/profiles/{profile_id}",
    response_model=Profile,
    responses=problems(404),
    summary="Read a profile",
)
def get_profile(request: Request, principal: ProfilesRead, profile_id: ProfileId) -> Response:
    profile = store.get_profile(connection(request), principal.service_client_id, profile_id)
    if profile is None:
        raise ProblemError(404, "Not Found", f"profile {profile_id} not found")
    return json_response(profile)


@router.put(
    "/profiles/{profile_id}",
    response_model=Profile,
    responses=problems(404),
    summary="Replace a profile (event profile.replaced)",
)
async def replace_profile(
    request: Request,
    principal: ProfilesWrite,
    profile_id: ProfileId,
    _content: JsonContent,
    body: Annotated[StrictProfile, Body()],
) -> Response:
    result = await _write(request, principal, "replace", profile_id, dump_wire(body))
    return json_response(_written(result))


@router.patch(
    "/profiles/{profile_id}",
    response_model=Profile,
    responses=problems(404, 409),
    summary="Update a profile with a JSON Patch or a merge patch",
    description="Events: profile.updated, profile.updatedfull and one per changed element "
    "(none when nothing changes).",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                JSON_PATCH: {"schema": _JSON_PATCH_SCHEMA},
                MERGE_PATCH: {"schema": _MERGE_PATCH_SCHEMA},
            },
        }
    },
)
async def update_profile(
    request: Request,
    principal: ProfilesWrite,
    profile_id: ProfileId,
    media_type: Annotated[str | None, Depends(accepts(JSON_PATCH, MERGE_PATCH))],
    raw: RawBody,
) -> Response:
    if media_type is None:
        raise ProblemError(400, "Invalid request body", "a PATCH needs a patch document")
    document = parse_json(raw)
    if media_type == MERGE_PATCH and not isinstance(document, dict):
        raise ProblemError(400, "Invalid request body", "a merge patch of a profile is an object")

    change = functools.partial(_patched, media_type, document)
    result = await _write(request, principal, "update", profile_id, change)
    return json_response(_written(result))


def _patched(media_type: str, document: Any, current: dict[str, Any]) -> Mapping[str, Any]:
    """The new body of a PATCH: ``document`` applied to ``current`` (the stored profile), then
    validated (a ``ProfileChange``; module-level so that the write pickles)."""
    try:
        if media_type == JSON_PATCH:
            patched = apply_json_patch(current, document)
        else:
            patched = apply_merge_patch(current, document)
    except PatchDocumentError as exc:
        field_error = FieldError(field=exc.field, message=exc.message)
        raise ProblemError(400, "Invalid patch document", str(exc), [field_error]) from None
    except PatchConflictError as exc:
        raise ProblemError(409, "Patch does not apply", str(exc)) from None
    _refuse_read_only_changes(current, patched)
    return dump_wire(validate(StrictProfile, patched))


_PROFILES_WRITE = require("profiles:write")
_PATCH_MEDIA_TYPE = accepts(JSON_PATCH, MERGE_PATCH)


@direct(update_profile)
async def _update_profile_direct(request: Request) -> Response | None:
    """``update_profile`` with its dependencies called as FastAPI calls them: the permission
    (401/403), the media type (415), the body (413), then the id, here only when it is plain
    digits in range (otherwise the declared route answers it)."""
    params = request.path_params
    profile_id = _plain_id(params["profile_id"])
    if profile_id is None:
        return None
    principal = await _PROFILES_WRITE(request, params["service_client_id"], None)
    media_type = await _PATCH_MEDIA_TYPE(request)
    raw = await raw_body(request)
    return await update_profile(request, principal, profile_id, media_type, raw)


@router.post(
    "/profiles/{profile_id}/deactivate",
    response_model=Profile,
    responses=problems(404),
    summary="Deactivate a profile (event profile.deactivated)",
)
async def deactivate_profile(
    request: Request,
    principal: ProfilesWrite,
    profile_id: ProfileId,
    _content: JsonContent,
    body: Annotated[StrictDeactivateRequest | None, Body()] = None,
) -> Response:
    reason = body.reason if body is not None else None
    result = await _write(request, principal, "deactivate", profile_id, reason)
    return json_response(_written(result))


@router.post(
    "/profiles/{profile_id}/reactivate",
    response_model=Profile,
    responses=problems(404),
    summary="Reactivate a profile (event profile.reactivated)",
)
async def reactivate_profile(
    request: Request, principal: ProfilesWrite, profile_id: ProfileId, _body: NoBody
) -> Response:
    result = await _write(request, principal, "reactivate", profile_id)
    return json_response(_written(result))


@router.delete(
    "/profiles/{profile_id}",
    status_code=204,
    response_class=Response,
    responses=problems(404),
    summary="Delete a profile for good (event profile.deleted)",
)
async def delete_profile(
    request: Request,
    principal: ProfilesWrite,
    profile_id: ProfileId,
    reason_code: Annotated[
        str | None,
        Query(alias="reasonCode", min_length=1, max_length=200, description="Why it is deleted"),
    ] = None,
) -> Response:
    await _write(request, principal, "delete", profile_id, reason_code)
    return no_content()


# -- helpers ---------------------------------------------------------------------------------------
async def _write(request: Request, principal: Principal, operation: str, *args: Any) -> WriteResult:
    """``ProfileWriter.<operation>(*args)`` for the principal's account, in the emulator's writer
    process, in a transaction it may share with other writes (``group_writer``; measured in
    bench/api.py); raises what it raised, and then nothing of it is stored."""
    ctx = get_ctx(request)
    job = ProfileJob(
        account=principal.service_client_id,
        actor=principal.user_id,
        now=epoch(ctx.clock.now()),
        operation=operation,
        args=args,
    )
    return await group_writer(ctx).run(job)


def _plain_id(text: str) -> int | None:
    """``text`` as an id when it is decimal digits without a leading zero, within 1..MAX_ID."""
    if not (text.isascii() and text.isdigit()) or text[0] == "0" or len(text) > _MAX_ID_DIGITS:
        return None
    value = int(text)
    return value if value <= MAX_ID else None


_MAX_ID_DIGITS = len(str(MAX_ID))


def _written(result: WriteResult) -> dict[str, Any]:
    assert result.profile is not None  # only a delete stores no profile
    return result.profile


def _refuse_read_only_changes(current: Mapping[str, Any], patched: Any) -> None:
    if not isinstance(patched, Mapping):
        return  # the profile model reports it
    errors = [
        FieldError(field=name, message=hint)
        for name, hint in _READ_ONLY_HINTS.items()
        if patched.get(name) != current.get(name)
    ]
    if errors:
        raise ProblemError(
            400, "Invalid patch", "the patch changes fields the service maintains", errors
        )
