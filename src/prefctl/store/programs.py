"""Programs of an account (``GET /programs``) and the set every new emulator account starts with.

A preference names a Program, optionally one of its Filters (by Name) and a Channel; subscription
``Filters`` match preference events by that filter Name, so seeded filter names are unique across
programs.

    >>> seed_programs(conn, "DEMO_CORP")
    4
    >>> [p["Name"] for p in list_programs(conn, "DEMO_CORP", program_type="Informational")]
    ['Newsletter', 'Product Updates']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from prefctl.store.connection import stored_json

if TYPE_CHECKING:
    from prefctl.store import Store

__all__ = ["SEED_PROGRAMS", "add_programs", "list_programs", "seed_programs"]

SEED_PROGRAMS: tuple[dict[str, Any], ...] = (
    {
        "ProgramId": 101,
        "Name": "Newsletter",
        "ProgramType": "Informational",
        "Filters": [
            {"FilterId": 1, "Name": "Weekly Digest"},
            {"FilterId": 2, "Name": "Monthly Roundup"},
            {"FilterId": 3, "Name": "Events and Webinars"},
        ],
        "Channels": ["Email"],
    },
    {
        "ProgramId": 102,
        "Name": "Offers",
        "ProgramType": "Marketing",
        "Filters": [
            {"FilterId": 4, "Name": "Seasonal Sales"},
            {"FilterId": 5, "Name": "Partner Offers"},
            {"FilterId": 6, "Name": "Loyalty Rewards"},
        ],
        "Channels": ["Email", "SMS", "Post"],
    },
    {
        "ProgramId": 103,
        "Name": "Product Updates",
        "ProgramType": "Informational",
        "Filters": [
            {"FilterId": 7, "Name": "Release Notes"},
            {"FilterId": 8, "Name": "Security Advisories"},
            {"FilterId": 9, "Name": "Service Status"},
        ],
        "Channels": ["Email", "SMS"],
    },
    {
        "ProgramId": 104,
        "Name": "Account Notices",
        "ProgramType": "Service",
        "Filters": [
            {"FilterId": 10, "Name": "Billing"},
            {"FilterId": 11, "Name": "Order Updates"},
        ],
        "Channels": ["Email", "SMS", "Post"],
    },
)


def add_programs(conn: Store, account: str, programs: Iterable[Mapping[str, Any]]) -> int:
    """Store wire-shaped programs ``{ProgramId, Name, ProgramType, Filters, Channels}``."""
    rows = [
        (
            account,
            int(p["ProgramId"]),
            str(p["Name"]),
            str(p["ProgramType"]),
            orjson.dumps(list(p.get("Filters") or [])).decode(),
            orjson.dumps(list(p.get("Channels") or [])).decode(),
        )
        for p in programs
    ]
    conn.executemany(
        "INSERT INTO programs (service_client_id, program_id, name, program_type, filters,"
        " channels) VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
    return len(rows)


def seed_programs(conn: Store, account: str) -> int:
    """Give ``account`` the seeded programs unless it has programs already; returns how many
    were added."""
    if conn.execute(
        "SELECT 1 FROM programs WHERE service_client_id = ? LIMIT 1", (account,)
    ).fetchone():
        return 0
    return add_programs(conn, account, SEED_PROGRAMS)


def list_programs(
    conn: Store, account: str, *, program_type: str | None = None
) -> list[dict[str, Any]]:
    """The account's programs in ProgramId order, as wire dicts; optionally of one type."""
    sql = "SELECT program_id, name, program_type, filters, channels FROM programs"
    sql += " WHERE service_client_id = ?"
    args: list[Any] = [account]
    if program_type is not None:
        sql += " AND program_type = ?"
        args.append(program_type)
    rows = conn.execute(sql + " ORDER BY program_id", args)
    return [
        {
            "ProgramId": row[0],
            "Name": row[1],
            "ProgramType": row[2],
            "Filters": stored_json(row[3]),
            "Channels": stored_json(row[4]),
        }
        for row in rows
    ]
