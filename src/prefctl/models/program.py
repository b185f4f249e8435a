"""Programs of the account (``GET /programs``): what preferences can be set for.

A preference names a Program, optionally one of its Filters (by ``Name``), and a Channel.
"""

from __future__ import annotations

from pydantic import Field

from prefctl.models._base import WireModel

__all__ = ["Program", "ProgramFilter", "ProgramList"]


class ProgramFilter(WireModel):
    """A filter of a program (a topic, a brand…); subscriptions filter preference events by Name."""

    filter_id: int
    name: str


class Program(WireModel):
    """A program with its filters and the channels it is offered on."""

    program_id: int
    name: str
    program_type: str
    filters: list[ProgramFilter] = Field(default_factory=list)
    channels: list[str] = Field(default_factory=list)


class ProgramList(WireModel):
    """The body of ``GET /programs``."""

    programs: list[Program] = Field(default_factory=list)
