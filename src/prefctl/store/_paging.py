"""Opaque cursors for keyset pagination, and pages bounded in size.

A cursor is the sort key of the last row of a page, tagged with what it pages (so a profile cursor
is refused by the event listing), as base64url JSON. Clients must treat it as opaque.

A page holds up to ``limit`` rows but stops early once its rows' stored JSON reaches
``PAGE_BYTES`` (always at least one row): 500 profiles of ~1 MiB would otherwise be a 500 MB
response held in memory on both sides. A short page still has a NextCursor, as any client that
follows cursors expects.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from typing import TypeVar

import orjson

from prefctl.errors import UsageError

Key = tuple[int | float, ...]
Row = TypeVar("Row")

PAGE_BYTES = 8 * 1024 * 1024
"""A page stops adding rows once their stored JSON reaches this many bytes."""


def take_page(
    rows: Iterable[Row], limit: int, size: Callable[[Row], int]
) -> tuple[list[Row], bool]:
    """The first rows of ``rows`` that make a page, and whether any row follows them.

    ``rows`` should be a cursor over at most ``limit + 1`` rows, iterated lazily, so that rows past
    a size-bounded page are never fetched.
    """
    page: list[Row] = []
    total = 0
    for row in rows:
        if len(page) >= limit or total >= PAGE_BYTES:
            return page, True
        page.append(row)
        total += size(row)
    return page, False


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
