"""Programs of the account over the REST API (docs/api.md): ``GET /programs``.

A preference names a Program, one of its Filters and a Channel; this is where to find them.
"""

from __future__ import annotations

from prefctl.api.client import ApiClient, Resource
from prefctl.api.shapes import text
from prefctl.errors import PrefctlError

__all__ = ["ProgramsApi"]


class ProgramsApi:
    """The account's programs (read-only)."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def list(self, program_type: str | None = None) -> list[Resource]:
        """Every program, or those whose ProgramType is ``program_type`` (any case)."""
        body = self.client.get("/programs")
        items = body.get("Programs") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise PrefctlError("the REST API answered GET /programs without a Programs list")
        programs = [item for item in items if isinstance(item, dict)]
        if program_type is None:
            return programs
        # Filtered here rather than with ?programType= so that any case matches; accounts have few.
        wanted = program_type.strip().lower()
        return [p for p in programs if (text(p.get("ProgramType")) or "").lower() == wanted]
