"""``GET/PUT /settings/webhooks``: the account's delivery and alert settings (docs/policy.md).

PUT replaces the whole set: a setting left out goes back to its default. A value outside its range
(``models.settings.SETTING_RANGES``) is a 400 naming the field, and nothing is written.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Body, Request
from starlette.responses import Response

from prefctl.emulator.routes._common import (
    JsonContent,
    SettingsRead,
    SettingsWrite,
    account_router,
    connection,
    json_response,
    write_lock,
)
from prefctl.models._base import dump_wire
from prefctl.models.settings import StrictWebhookSettings, WebhookSettings
from prefctl.store.db import transaction
from prefctl.store.settings import get_settings, put_settings

__all__ = ["router"]

router = account_router("settings")


@router.get(
    "/settings/webhooks", response_model=WebhookSettings, summary="Read the webhook settings"
)
def read_settings(request: Request, principal: SettingsRead) -> Response:
    return json_response(get_settings(connection(request), principal.service_client_id))


@router.put(
    "/settings/webhooks",
    response_model=WebhookSettings,
    summary="Replace the webhook settings",
    description="Settings left out return to their defaults; ranges are in the schema.",
)
def replace_settings(
    request: Request,
    principal: SettingsWrite,
    _content: JsonContent,
    body: Annotated[StrictWebhookSettings, Body()],
) -> Response:
    conn = connection(request)
    with write_lock(request), transaction(conn):
        stored = put_settings(conn, principal.service_client_id, dump_wire(body))
    return json_response(stored)
