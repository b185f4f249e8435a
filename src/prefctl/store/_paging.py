"""Opaque cursors for keyset pagination.

A cursor is the sort key of the last row of a page, tagged with what it pages (so a profile cursor
is refused by the event listing), as base64url JSON. Clients must treat it as opaque.
"""

from __future__ import annotations

import base64
import binascii

import orjson

from prefctl.errors import UsageError

Key = tuple[int | float, ...]


def encode_cursor(kind: str, key: Key) -> str:
    raw = orjson.dumps([kind, *key])
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(kind: str, cursor: str, length: int) -> Key:
    """The key inside ``cursor``; ``UsageError`` when it is not a cursor of ``kind``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = orjson.loads(raw)
    except (ValueError, binascii.Error):
        value = None
    if (
        not isinstance(value, list)
        or len(value) != length + 1
        or value[0] != kind
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value[1:])
    ):
        raise UsageError(
            "invalid cursor", hint="pass the NextCursor of the previous page unchanged"
        )
    return tuple(value[1:])
