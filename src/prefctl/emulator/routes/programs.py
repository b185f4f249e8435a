"""``GET /programs``: the account's programs, and the seeder that gives a new account its set.

``seed_account_programs`` is listed in ``emulator.admin.ACCOUNT_SEEDERS``, so the first start of an
emulator stores ``store.programs.SEED_PROGRAMS`` for its account.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request
from starlette.responses import Response

from prefctl.clock import Clock
from prefctl.emulator.routes._common import (
    ProgramsRead,
    account_router,
    connection,
    json_response,
)
from prefctl.models.program import ProgramList
from prefctl.store import Store
from prefctl.store.accounts import Account
from prefctl.store.programs import list_programs, seed_programs

__all__ = ["router", "seed_account_programs"]

router = account_router("programs")


@router.get("/programs", response_model=ProgramList, summary="List the account's programs")
def get_programs(
    request: Request,
    principal: ProgramsRead,
    program_type: Annotated[
        str | None,
        Query(alias="programType", max_length=100, description="Only programs of this type"),
    ] = None,
) -> Response:
    programs = list_programs(
        connection(request), principal.service_client_id, program_type=program_type
    )
    return json_response({"Programs": programs})


def seed_account_programs(conn: Store, account: Account, clock: Clock) -> None:
    """An ``ACCOUNT_SEEDERS`` entry: the seeded programs for a new account."""
    del clock  # programs carry no timestamps
    seed_programs(conn, account.service_client_id)
