"""Inputs read for the REST commands: import records (JSON array or NDJSON) and --since times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from prefctl.api.imports import parse_records
from prefctl.clock import parse_moment
from prefctl.errors import UsageError

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_parse_records_reads_a_json_array_and_ndjson_alike() -> None:
    array = parse_records('[{"Tags": ["a"]}, {"Tags": ["b"]}]', "f.json")
    ndjson = parse_records('{"Tags": ["a"]}\n\n{"Tags": ["b"]}\n', "f.ndjson")
    assert array == ndjson == [{"Tags": ["a"]}, {"Tags": ["b"]}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "f holds no records"),
        ("[]", "f holds no records"),
        ("[1, 2]", "f: record 1 is not a JSON object"),
        ('{"a": 1}\n{oops\n', "f line 2 is not JSON"),
        ("[{", "f is not a valid JSON array"),
    ],
)
def test_parse_records_bad_input_is_usage_error_naming_where(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_records(text, "f")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", NOW - timedelta(seconds=90)),
        ("15m", NOW - timedelta(minutes=15)),
        ("2h", NOW - timedelta(hours=2)),
        ("3d", NOW - timedelta(days=3)),
        ("2026-11-20T08:30:00Z", datetime(2026, 11, 20, 8, 30, tzinfo=UTC)),
        ("2026-11-20T08:30:00.250+01:00", datetime(2026, 11, 20, 7, 30, 0, 250000, tzinfo=UTC)),
    ],
)
def test_parse_moment_reads_ages_and_rfc3339(text: str, expected: datetime) -> None:
    assert parse_moment(text, now=NOW, flag="--since") == expected


@pytest.mark.parametrize("text", ["yesterday", "2026-11-20T08:30:00", "5w"])
def test_parse_moment_without_zone_or_unknown_unit_is_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--since"):
        parse_moment(text, now=NOW, flag="--since")
