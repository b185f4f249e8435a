"""Bulk import over the REST API (DESIGN §7.2): initiate, stage, execute, status. No events.

``parse_records`` reads the CLI's input: a JSON array of profiles, or NDJSON (one profile per
line). ``ImportsApi.stage_all`` sends them in chunks, one request each, so that no request nears
the service's size limit; then ``execute``, and ``wait_until_done`` polls ``GET /imports/{id}``
until the import is Completed or Failed.

    >>> api = ImportsApi(client)
    >>> job = api.initiate()
    >>> api.stage_all(job["ImportId"], parse_records(text, "profiles.ndjson"), chunk_size=500)
    >>> api.execute(job["ImportId"])
    >>> api.wait_until_done(job["ImportId"], timeout=600, clock=SystemClock())["State"]
    'Completed'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prefctl.api.client import ApiClient, Resource, encode_body, parse_json
from prefctl.clock import Clock
from prefctl.errors import PrefctlError, UsageError

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "FINAL_STATES",
    "ImportsApi",
    "chunks",
    "parse_records",
]

DEFAULT_CHUNK_SIZE = 500
# The service refuses request bodies over 1 MiB (413, docs/api.md): a staging request stays under
# it whatever --chunk-size says, and a record that could never fit is refused before any request.
REQUEST_LIMIT_BYTES = 1024 * 1024
FINAL_STATES = frozenset({"Completed", "Failed"})
POLL_SECONDS = 0.25


def parse_records(text: str, where: str) -> list[dict[str, Any]]:
    """The profiles in ``text`` (read from ``where``): a JSON array, or NDJSON."""
    stripped = text.strip()
    if not stripped:
        raise UsageError(f"{where} holds no records")
    records: list[Any] = []
    if stripped.startswith("["):
        try:
            records = list(parse_json(stripped))
        except ValueError as exc:
            raise UsageError(f"{where} is not a valid JSON array: {exc}") from None
        except RecursionError:
            raise UsageError(f"{where} is nested too deeply") from None
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(parse_json(line))
            except ValueError as exc:
                raise UsageError(f"{where} line {number} is not JSON: {exc}") from None
            except RecursionError:
                raise UsageError(f"{where} line {number} is nested too deeply") from None
    for index, record in enumerate(records, 1):
        if not isinstance(record, dict):
            raise UsageError(f"{where}: record {index} is not a JSON object (a profile)")
        size = len(encode_body(record, f"{where}: record {index}"))
        if size + 2 > REQUEST_LIMIT_BYTES:  # alone in a staging request: [record]
            raise UsageError(
                f"{where}: record {index} is {size:,} bytes; a request to the service carries at"
                f" most {REQUEST_LIMIT_BYTES:,} bytes, so it cannot be imported"
            )
    if not records:
        raise UsageError(f"{where} holds no records")
    return records


def chunks(
    records: Sequence[dict[str, Any]], size: int, *, max_bytes: int = REQUEST_LIMIT_BYTES
) -> Iterator[Sequence[dict[str, Any]]]:
    """``records`` in slices of at most ``size`` records whose JSON array is at most ``max_bytes``
    (a record larger than that alone goes in a slice of its own)."""
    if size < 1:
        raise UsageError("the chunk size must be at least 1")
    start, used = 0, 2  # the array's brackets
    for index, record in enumerate(records):
        cost = len(encode_body(record)) + 1  # and its comma
        if index > start and (index - start >= size or used + cost > max_bytes):
            yield records[start:index]
            start, used = index, 2
        used += cost
    if start < len(records):
        yield records[start:]


class ImportsApi:
    """Bulk imports of profiles: upserts that generate no events."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def initiate(self) -> Resource:
        """A new, empty import (state Initiated)."""
        return self.client.resource("POST", "/imports")

    def stage(self, import_id: int, records: Sequence[dict[str, Any]]) -> Resource:
        """Add records to the import (state Staging)."""
        return self.client.resource("POST", f"/imports/{import_id}/records", body=list(records))

    def stage_all(
        self,
        import_id: int,
        records: Sequence[dict[str, Any]],
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        on_staged: Callable[[int], None] | None = None,
    ) -> Resource:
        """Stage ``records`` in chunks of at most ``chunk_size`` records and 1 MiB;
        ``on_staged(n)`` after each chunk."""
        job: Resource = {}
        for chunk in chunks(records, chunk_size):
            job = self.stage(import_id, chunk)
            if on_staged is not None:
                on_staged(len(chunk))
        return job

    def execute(self, import_id: int) -> Resource:
        """Queue the staged records for processing."""
        return self.client.resource("POST", f"/imports/{import_id}/execute")

    def status(self, import_id: int) -> Resource:
        return self.client.resource("GET", f"/imports/{import_id}")

    def wait_until_done(
        self,
        import_id: int,
        *,
        timeout: float,
        clock: Clock,
        on_status: Callable[[Resource], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        poll: float = POLL_SECONDS,
    ) -> Resource:
        """Poll until the import is Completed or Failed and return its status (the caller judges
        it); PrefctlError when neither happens within ``timeout`` seconds."""
        deadline = clock.monotonic() + timeout
        while True:
            job = self.status(import_id)
            if on_status is not None:
                on_status(job)
            if job.get("State") in FINAL_STATES:
                return job
            left = deadline - clock.monotonic()
            if left <= 0:
                raise PrefctlError(
                    f"import {import_id} is still {job.get('State')} after {timeout:g} s",
                    hint="it goes on in the service; run the import again with a longer "
                    "--wait-timeout to follow a new one",
                )
            sleep(min(poll, left))
