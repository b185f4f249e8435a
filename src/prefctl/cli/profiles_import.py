"""``prefctl profiles import``: bulk import with a progress bar (registered by ``cli.profiles``).

Every record is checked first (nothing is sent when one is bad), then staged in chunks, read
again from the file (memory stays about one chunk whatever the file's size); the import is
executed, and its status is polled with a spinner until it is Completed or Failed. Bulk import
generates no events.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefctl.cli._api import WaitTimeoutOption, api_client, source_name
from prefctl.cli._context import get_state
from prefctl.errors import PrefctlError

if TYPE_CHECKING:
    from prefctl.cli._context import State

__all__ = ["import_profiles"]


def import_profiles(
    file: Annotated[
        str, typer.Argument(help="Profiles as a JSON array or NDJSON ('-': read stdin).")
    ],
    chunk_size: Annotated[
        int,
        typer.Option("--chunk-size", min=1, max=5000, help="Records sent per staging request."),
    ] = 500,
    wait_timeout: WaitTimeoutOption = 600.0,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when any record failed, not only the import.")
    ] = False,
) -> None:
    """Bulk-import profiles: upserts by ProfileId (none: a new profile). No events are generated.

    Stages the records in chunks with a progress bar, executes the import and waits for it.
    Exit 1 when the import Failed (or, with --strict, when any record failed); record errors are listed.
    """
    from prefctl.api.imports import ImportFile, ImportsApi
    from prefctl.api.shapes import required_id
    from prefctl.clock import SystemClock

    state = get_state()
    where = source_name(file)
    source = sys.stdin if file == "-" else Path(file)
    with ImportFile.open(source, where) as records:
        with state.out.status(f"checking {where}"):
            total = records.check()  # every record, before anything is sent
        with api_client(state) as client:
            api = ImportsApi(client)
            with state.out.progress("staging", total=total) as advance:
                import_id = required_id(api.initiate(), "ImportId", "a new import")
                api.stage_all(import_id, records, chunk_size=chunk_size, on_staged=advance)
            api.execute(import_id)
            with state.out.status(f"import {import_id}: queued") as show:
                job = api.wait_until_done(
                    import_id,
                    timeout=wait_timeout,
                    clock=SystemClock(),
                    on_status=lambda job: show(
                        f"import {import_id}: {job.get('State')} "
                        f"{job.get('ProcessedRecords', 0)}/{job.get('TotalRecords', total)}"
                    ),
                )
    _import_summary(state, job, strict=strict)


def _import_summary(state: State, job: dict[str, Any], *, strict: bool) -> None:
    """The import's counters and record errors (fields in another shape: empty, see api/shapes)."""
    from prefctl.api.shapes import objects_at, scalar, text

    import_id = scalar(job.get("ImportId"))
    state.out.record(
        {
            "import": import_id,
            "state": text(job.get("State")),
            "records": scalar(job.get("TotalRecords")),
            "created": scalar(job.get("CreatedProfiles")),
            "replaced": scalar(job.get("ReplacedProfiles")),
            "failed": scalar(job.get("FailedRecords")),
        },
        json_data=job,
    )
    errors = objects_at(job, "Errors")
    for error in errors:
        state.out.warn(f"record {text(error.get('Record'))}: {text(error.get('Message'))}")
    count = job.get("FailedRecords")
    failed = count if type(count) is int and count >= 0 else len(errors)
    if failed > len(errors):
        state.out.warn(f"{failed - len(errors)} more record errors are not shown")
    if job.get("State") == "Failed":
        reason = text(job.get("Error")) or "no reason given"
        raise PrefctlError(f"import {import_id} failed: {reason}")
    if strict and failed:
        raise PrefctlError(
            f"import {import_id}: {failed} record{'' if failed == 1 else 's'} failed"
        )
    state.out.success(f"import {import_id} completed; no events were generated")
