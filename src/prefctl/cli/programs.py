"""``prefctl programs list``: the account's programs, for the preferences that name them."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from prefctl.api.shapes import objects_at, scalar, text, texts_at
from prefctl.cli._api import api_client
from prefctl.cli._context import get_state
from prefctl.cli._tables import columns
from prefctl.cli.app import new_group


def register(root: typer.Typer) -> None:
    group = new_group("programs", "Programs of the account: what preferences can be set for.")
    group.command("list")(list_programs)
    root.add_typer(group)


LIST_COLUMNS = columns(
    ("ProgramId", "ID"),
    ("Name", "NAME"),
    ("ProgramType", "TYPE"),
    ("filters", "FILTERS"),
    ("Channels", "CHANNELS"),
    drop_first=["filters"],
)


def list_programs(
    program_type: Annotated[
        str | None,
        typer.Option(
            "--type",
            "-t",
            help="Only programs of this ProgramType (e.g. Marketing; any case).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """List the programs with their filters and channels.

    A preference names a Program, one of its Filters and a Channel; subscription Filters match preference events by filter name.
    """
    from prefctl.api.programs import ProgramsApi

    state = get_state()
    with api_client(state) as client:
        programs = ProgramsApi(client).list(program_type)
    state.out.table(
        [_row(program) for program in programs],
        LIST_COLUMNS,
        json_rows=programs,
        empty="no programs",
    )


def _row(program: dict[str, Any]) -> dict[str, Any]:
    """The program's row (fields in another shape: empty, see api/shapes)."""
    return {
        "ProgramId": scalar(program.get("ProgramId")),
        "Name": text(program.get("Name")),
        "ProgramType": text(program.get("ProgramType")),
        "filters": [
            name for item in objects_at(program, "Filters") if (name := text(item.get("Name")))
        ],
        "Channels": texts_at(program, "Channels"),
    }
