"""``GET {api_url}/validation/{token}``: the manual validation of a subscription's handshake.

The handshake message carries this URL as ``data.validationUrl``. An endpoint that answers the
handshake with 200 but without the code leaves the subscription AwaitingManualAction; a GET of the
URL within 5 minutes (divided by ``--time-scale``) makes it Succeeded. The token is the only
credential, so the route takes no Authorization header and sits outside the account prefix.

- 200: validated; a small JSON confirmation, or an HTML page for a browser (``Accept: text/html``).
- 410: the 5 minutes are over (an AwaitingManualAction subscription becomes Failed).
- 404: unknown token, already used, or its handshake ended (Succeeded, Failed, Url changed).
"""

from __future__ import annotations

import html
from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import HTMLResponse, Response

from prefctl.dispatcher.handshake import ManualValidation, confirm_validation
from prefctl.emulator.context import API_PATH
from prefctl.emulator.provisioning import handshake_runner
from prefctl.emulator.routes._common import (
    ProblemError,
    connection,
    get_ctx,
    json_response,
    problems,
)
from prefctl.models._base import WireModel, dump_wire
from prefctl.store.timestamps import epoch

__all__ = ["ValidationConfirmation", "router"]

router = APIRouter(prefix=API_PATH, tags=["subscriptions"])

ValidationToken = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        description="The token of the handshake's validationUrl.",
    ),
]


class ValidationConfirmation(WireModel):
    """The JSON answer of a validation that worked."""

    subscription_id: int
    name: str
    provisioning_state: str


@router.get(
    "/validation/{token}",
    summary="Validate a subscription's handshake by hand (no authorization)",
    response_model=None,
    responses={
        200: {
            "model": ValidationConfirmation,
            "description": "Validated: the subscription is Succeeded",
            "content": {"text/html": {"schema": {"type": "string"}}},
        },
        **problems(404, 410),
    },
)
def validate_handshake(request: Request, token: ValidationToken) -> Response:
    ctx = get_ctx(request)
    outcome, record = confirm_validation(connection(request), token, now=epoch(ctx.clock.now()))
    if outcome is ManualValidation.UNKNOWN or record is None:
        raise ProblemError(
            404,
            "Not Found",
            "no handshake waits for this validation link: it is unknown, was already used,"
            " or its handshake ended",
        )
    if outcome is ManualValidation.EXPIRED:
        raise ProblemError(
            410,
            "Gone",
            f"the validation link of subscription {record.id} expired: it works for 5 minutes"
            " after the handshake; create the subscription again",
        )
    handshake_runner(ctx).notify(record.service_client_id, record.id)
    if _wants_html(request):
        name = html.escape(record.name)
        return HTMLResponse(
            "<!doctype html><title>Subscription validated</title>"
            f"<h1>Subscription validated</h1><p>Subscription {record.id} ({name}) is now"
            " Succeeded: events will be sent to its Url.</p>"
        )
    confirmation = ValidationConfirmation(
        subscription_id=record.id, name=record.name, provisioning_state=record.provisioning_state
    )
    return json_response(dump_wire(confirmation))


def _wants_html(request: Request) -> bool:
    # A browser asks for text/html first; curl, httpx and scripts send */* or application/json.
    accept = request.headers.get("accept", "")
    first = accept.split(",", 1)[0].partition(";")[0].strip().lower()
    return first in ("text/html", "application/xhtml+xml")
