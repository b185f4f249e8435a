"""Profiles: the wire JSON of each profile, and indexed keys to search it by.

A profile is stored as its wire dict (PascalCase, as ``dump_wire(Profile)`` makes it) next to the
keys that ``GET /profiles`` searches: email addresses (case-insensitive), phone numbers (digits
only, so ``+1 (555) 010-0100`` finds ``+15550100100``) and alternate ids (Value, optionally with
Type). Search is keyset-paged on ProfileId with an opaque cursor, so a page costs the same at any
depth. Ids come from a per-account sequence starting at 1001 and are never reused.

Delete is a hard delete: the row and its keys go, a later GET is a 404, and the profile survives
only in its ``profile.deleted`` event (kept 15 days). Functions here do not open transactions;
``emulator/writes.py`` is the one write path that does (and maintains Edited and the events).

    >>> page = search_profiles(conn, "DEMO_CORP", ProfileQuery(email="Ann@Example.com"))
    >>> [p["ProfileId"] for p in page.profiles], page.next_cursor
    ([1001], None)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from prefctl.clock import utc_timestamp
from prefctl.errors import UsageError
from prefctl.store._paging import decode_cursor, encode_cursor, take_page
from prefctl.store.connection import stored_json

if TYPE_CHECKING:
    from prefctl.store import Store

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "FIRST_PROFILE_ID",
    "MAX_PAGE_SIZE",
    "ProfilePage",
    "ProfileQuery",
    "delete_profile",
    "get_profile",
    "next_profile_id",
    "prepare_profile",
    "save_profile",
    "search_profiles",
]

FIRST_PROFILE_ID = 1001
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500

# Fields the service maintains: a request body cannot set them (see prepare_profile).
MAINTAINED_FIELDS = frozenset({"ProfileId", "IsActive", "ReasonCode", "Edited"})

_CURSOR_KIND = "profiles"


@dataclass(frozen=True, slots=True)
class ProfileQuery:
    """Search criteria of ``GET /profiles``; all given criteria must match (none: every profile)."""

    email: str | None = None
    phone: str | None = None
    alternate_id_type: str | None = None
    alternate_id: str | None = None


@dataclass(frozen=True, slots=True)
class ProfilePage:
    """One page of wire profiles; ``next_cursor`` is None on the last page."""

    profiles: list[dict[str, Any]]
    next_cursor: str | None


def next_profile_id(conn: Store, account: str) -> int:
    """Take the account's next ProfileId (1001, 1002, …); rolled back with the transaction."""
    row = conn.execute(
        "INSERT INTO profile_sequences (service_client_id, last_profile_id) VALUES (?, ?)"
        " ON CONFLICT (service_client_id)"
        " DO UPDATE SET last_profile_id = profile_sequences.last_profile_id + 1"
        " RETURNING last_profile_id",
        (account, FIRST_PROFILE_ID),
    ).fetchone()
    return int(row[0])


def prepare_profile(
    body: Mapping[str, Any],
    *,
    profile_id: int,
    previous: Mapping[str, Any] | None,
    actor: str,
    now: datetime,
) -> dict[str, Any]:
    """``body`` as it is stored: ProfileId set, IsActive and ReasonCode carried over from
    ``previous`` (a new profile is active; only deactivate/reactivate change them), and Edited
    stamped with ``actor`` and ``now``."""
    profile: dict[str, Any] = {"ProfileId": profile_id}
    profile["IsActive"] = bool(previous.get("IsActive", True)) if previous else True
    if previous and previous.get("ReasonCode") is not None:
        profile["ReasonCode"] = previous["ReasonCode"]
    profile.update((key, value) for key, value in body.items() if key not in MAINTAINED_FIELDS)
    stamp = utc_timestamp(now)
    before = (previous or {}).get("Edited") or {}
    profile["Edited"] = {
        "CreateDate": before.get("CreateDate", stamp),
        "CreatedBy": before.get("CreatedBy", actor),
        "ModifiedDate": stamp,
        "ModifiedBy": actor,
    }
    return profile


_GET_PROFILE = "SELECT body FROM profiles WHERE service_client_id = ? AND profile_id = ?"


def get_profile(
    conn: Store, account: str, profile_id: int, *, for_update: bool = False
) -> dict[str, Any] | None:
    """The wire profile, or None when the account has no such profile. ``for_update``: the
    caller writes it next, in this transaction (on PostgreSQL its row is locked until then, so
    two changes of one profile at once do not lose one; SQLite's write lock does that already)."""
    sql = _GET_PROFILE
    if for_update and conn.dialect == "postgresql":
        sql = _GET_PROFILE + " FOR UPDATE"
    row = conn.execute(sql, (account, profile_id)).fetchone()
    return _loads(row[0]) if row else None


def save_profile(
    conn: Store,
    account: str,
    profile: Mapping[str, Any],
    *,
    now: float,
    previous: Mapping[str, Any] | None = None,
) -> None:
    """Insert or overwrite the profile ``profile["ProfileId"]`` and refresh its search keys.

    ``previous`` is the profile as stored before, when the caller has it: its search keys are
    then rewritten only if they changed (most updates leave emails, phones and ids alone).
    """
    profile_id = int(profile["ProfileId"])
    conn.execute(
        "INSERT INTO profiles (service_client_id, profile_id, is_active, body, created_at,"
        " modified_at) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (service_client_id, profile_id) DO UPDATE SET is_active = excluded.is_active,"
        " body = excluded.body, modified_at = excluded.modified_at",
        (
            account,
            profile_id,
            int(bool(profile.get("IsActive", True))),
            orjson.dumps(profile).decode(),
            now,
            now,
        ),
    )
    keys = _SearchKeys.of(profile)
    same_profile = previous is not None and int(previous.get("ProfileId", -1)) == profile_id
    if same_profile and _SearchKeys.of(previous or {}) == keys:
        return
    key = (account, profile_id)
    for table in ("profile_emails", "profile_phones", "profile_alternate_ids"):
        conn.execute(f"DELETE FROM {table} WHERE service_client_id = ? AND profile_id = ?", key)  # noqa: S608
    conn.executemany(
        "INSERT INTO profile_emails (service_client_id, address, profile_id) VALUES (?, ?, ?)",
        [(account, address, profile_id) for address in keys.emails],
    )
    conn.executemany(
        "INSERT INTO profile_phones (service_client_id, digits, profile_id) VALUES (?, ?, ?)",
        [(account, digits, profile_id) for digits in keys.phones],
    )
    conn.executemany(
        "INSERT INTO profile_alternate_ids (service_client_id, value, type, profile_id)"
        " VALUES (?, ?, ?, ?)",
        [(account, value, kind, profile_id) for value, kind in keys.alternate_ids],
    )


@dataclass(frozen=True, slots=True)
class _SearchKeys:
    """What ``search_profiles`` finds a profile by."""

    emails: frozenset[str]
    phones: frozenset[str]
    alternate_ids: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, profile: Mapping[str, Any]) -> _SearchKeys:
        emails = {
            str(e["Address"]).lower() for e in profile.get("Emails") or () if e.get("Address")
        }
        phones = {
            _digits(str(p["Number"])) for p in profile.get("PhoneNumbers") or () if p.get("Number")
        }
        alternate_ids = {
            (str(a["Value"]), str(a["Type"]))
            for a in profile.get("AlternateIds") or ()
            if a.get("Value") and a.get("Type")
        }
        return cls(frozenset(emails), frozenset(d for d in phones if d), frozenset(alternate_ids))


def delete_profile(conn: Store, account: str, profile_id: int) -> bool:
    """Remove the profile and its search keys; False when there was none."""
    cursor = conn.execute(
        "DELETE FROM profiles WHERE service_client_id = ? AND profile_id = ?", (account, profile_id)
    )
    return cursor.rowcount == 1


def search_profiles(
    conn: Store,
    account: str,
    query: ProfileQuery,
    *,
    limit: int = DEFAULT_PAGE_SIZE,
    cursor: str | None = None,
) -> ProfilePage:
    """One page of the profiles matching ``query``, in ProfileId order.

    Raises ``UsageError`` for a limit outside 1..MAX_PAGE_SIZE, an invalid cursor, an empty phone
    number or an alternate id type without a value.
    """
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise UsageError(f"limit must be between 1 and {MAX_PAGE_SIZE}")
    after = int(decode_cursor(_CURSOR_KIND, cursor, 1)[0]) if cursor else 0
    # Each criterion is (table, column = ? conditions, parameters); the first drives the scan
    # through its index, already ordered by profile_id, and the others are point lookups.
    criteria = _criteria(query)
    if criteria:
        (table, where, params), others = criteria[0], criteria[1:]
        sql = (
            f"SELECT p.body, p.profile_id FROM {table} k JOIN profiles p"  # noqa: S608
            " ON p.service_client_id = k.service_client_id AND p.profile_id = k.profile_id"
            f" WHERE k.service_client_id = ? AND {where} AND k.profile_id > ?"
        )
        args: list[Any] = [account, *params, after]
        for other_table, other_where, other_params in others:
            sql += (
                f" AND EXISTS (SELECT 1 FROM {other_table} o WHERE o.service_client_id = ?"  # noqa: S608
                f" AND {other_where.replace('k.', 'o.')} AND o.profile_id = p.profile_id)"
            )
            args += [account, *other_params]
        sql += " ORDER BY k.profile_id LIMIT ?"
    else:
        sql = (
            "SELECT p.body, p.profile_id FROM profiles p"
            " WHERE p.service_client_id = ? AND p.profile_id > ? ORDER BY p.profile_id LIMIT ?"
        )
        args = [account, after]
    rows, more = take_page(conn.execute(sql, (*args, limit + 1)), limit, lambda row: len(row[0]))
    next_cursor = encode_cursor(_CURSOR_KIND, (rows[-1][1],)) if more else None
    return ProfilePage([_loads(row[0]) for row in rows], next_cursor)


def _criteria(query: ProfileQuery) -> list[tuple[str, str, tuple[str, ...]]]:
    criteria: list[tuple[str, str, tuple[str, ...]]] = []
    if query.email is not None:
        criteria.append(("profile_emails", "k.address = ?", (query.email.strip().lower(),)))
    if query.phone is not None:
        digits = _digits(query.phone)
        if not digits:
            raise UsageError("phone must contain digits")
        criteria.append(("profile_phones", "k.digits = ?", (digits,)))
    if query.alternate_id_type is not None and query.alternate_id is None:
        raise UsageError("alternateIdType needs alternateId")
    if query.alternate_id is not None:
        if query.alternate_id_type is None:
            criteria.append(("profile_alternate_ids", "k.value = ?", (query.alternate_id,)))
        else:
            criteria.append(
                (
                    "profile_alternate_ids",
                    "k.value = ? AND k.type = ?",
                    (query.alternate_id, query.alternate_id_type),
                )
            )
    return criteria


def _digits(number: str) -> str:
    return re.sub(r"\D", "", number)


def _loads(body: str) -> dict[str, Any]:
    value: dict[str, Any] = stored_json(body)
    return value
