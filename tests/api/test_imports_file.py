"""``ImportFile``: an import file read as a stream, twice — checked whole first, then staged in
chunks — with the records and the errors ``json.loads`` of the whole text would give."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefctl.api.client import parse_json
from prefctl.api.imports import REQUEST_LIMIT_BYTES, ImportFile, parse_records
from prefctl.errors import UsageError

RECORDS = [{"Tags": [f"t{n}"], "AlternateIds": [{"Type": "N", "Value": str(n)}]} for n in range(7)]


def _checked(text: str, **options: Any) -> ImportFile:
    records = ImportFile(io.StringIO(text, newline=None), "f", **options)
    records.check()
    return records


def _outcome(read: Any, text: str) -> tuple[str, Any]:
    try:
        return ("records", read(text))
    except UsageError as exc:
        return ("error", str(exc))


def _whole_text(text: str) -> list[Any]:
    """What the import read when it held the whole text: ``json.loads`` of a JSON array, or of
    each line, then each record checked in turn."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    stripped = text.strip()
    if not stripped:
        raise UsageError("f holds no records")
    if stripped.startswith("["):
        try:
            values = list(parse_json(stripped))
        except ValueError as exc:
            raise UsageError(f"f is not a valid JSON array: {exc}") from None
        except RecursionError:
            raise UsageError("f is nested too deeply") from None
    else:
        values = []
        for number, line in enumerate(text.split("\n"), 1):
            if line.strip():
                try:
                    values.append(parse_json(line))
                except ValueError as exc:
                    raise UsageError(f"f line {number} is not JSON: {exc}") from None
    for index, value in enumerate(values, 1):
        if not isinstance(value, dict):
            raise UsageError(f"f: record {index} is not a JSON object (a profile)")
    if not values:
        raise UsageError("f holds no records")
    return values


VALUES = ['{"a": 1}', '{"Tags": ["x y"]}', '{"n": -12.5e3, "t": true, "z": null}', '{"s": "\\u00e9"}',
          "[1]", "3", '"s"', "{}", "NaN", '{"x": 1e400}', '{"x": 1.5e-3}']  # fmt: skip
SPACE = st.sampled_from(["", " ", "\n", "\t", "  \n ", "\r\n", "\u00a0"])
NOISE = st.sampled_from(["", ",", "]", "[", "x", "}", "{", '"', "\\", "tru", "1e", "-", ":"])


@st.composite
def import_texts(draw: st.DrawFn) -> str:
    values = draw(st.lists(st.sampled_from(VALUES), max_size=6))
    if draw(st.booleans()):
        between = draw(SPACE) + "," + draw(SPACE)
        text = draw(SPACE) + "[" + draw(SPACE) + between.join(values) + draw(SPACE) + "]"
    else:
        text = "".join(
            draw(SPACE) + value + draw(st.sampled_from(["\n", "\r\n"])) for value in values
        )
    text += draw(SPACE)
    if text and draw(st.booleans()):  # break it somewhere
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 3))
        text = text[:at] + draw(NOISE) + text[at + cut :]
    return text


@settings(max_examples=400, deadline=None)
@given(text=import_texts(), block_chars=st.sampled_from([1, 2, 3, 7, 64, 1 << 20]))
def test_import_file_read_in_blocks_gives_what_the_whole_text_gives(
    text: str, block_chars: int
) -> None:
    streamed = _outcome(lambda t: parse_records(t, "f", block_chars=block_chars), text)

    assert streamed == _outcome(_whole_text, text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1,\n  {", "f is not a valid JSON array: Expecting property name enclosed in double"
                     " quotes: line 2 column 4 (char 7)"),
        ('{"Tags": ["a"]}\n[1]\n{oops\n', "f line 3 is not JSON"),
        ("[1, 2", "f is not a valid JSON array: Expecting ',' delimiter: line 1 column 6 (char 5)"),
        ('[{"a": 1}] {"b": 2}', "f is not a valid JSON array: Extra data: line 1 column 12"),
    ],
)  # fmt: skip
def test_import_file_check_reports_a_json_error_before_an_earlier_bad_record(
    text: str, message: str
) -> None:
    with pytest.raises(UsageError) as raised:
        _checked(text, block_chars=4)

    assert str(raised.value).startswith(message)


def test_import_file_check_counts_the_records_of_both_formats() -> None:
    array = json.dumps(RECORDS, indent=2)
    ndjson = "\r\n".join(json.dumps(record) for record in RECORDS) + "\n\n"

    assert _checked(array, block_chars=5).total == _checked(ndjson, block_chars=5).total == 7


@pytest.mark.parametrize("size", [1, 2, 3, 7, 500])
def test_import_file_chunks_are_request_bodies_of_the_records_in_order(size: int) -> None:
    records = _checked(json.dumps(RECORDS), block_chars=16)

    chunks = list(records.chunks(size))

    assert [count for count, _ in chunks] == [min(size, 7 - n) for n in range(0, 7, size)]
    assert [record for _, body in chunks for record in json.loads(body)] == RECORDS


def test_import_file_chunks_stay_within_the_byte_limit() -> None:
    big = [{"Tags": ["x" * 300_000, str(n)]} for n in range(7)]
    records = _checked("\n".join(json.dumps(record) for record in big))

    chunks = list(records.chunks(500))

    assert [count for count, _ in chunks] == [3, 3, 1]
    assert all(len(body) <= REQUEST_LIMIT_BYTES for _, body in chunks)
    assert [record for _, body in chunks for record in json.loads(body)] == big


def test_import_file_record_over_the_request_limit_is_refused_with_its_number() -> None:
    text = json.dumps([{"Tags": ["ok"]}, {"Tags": ["y" * REQUEST_LIMIT_BYTES]}])

    with pytest.raises(UsageError, match=r"record 2 is 1,048,589 bytes"):
        _checked(text, block_chars=1000)


def test_import_file_that_changes_between_check_and_staging_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "profiles.ndjson"
    path.write_text('{"Tags": ["a"]}\n{"Tags": ["b"]}\n')
    with ImportFile.open(path, "profiles.ndjson") as records:
        records.check()
        path.write_text('{"Tags": ["a"]}\n')

        with pytest.raises(UsageError, match="changed while it was imported"):
            list(records.chunks(500))


def test_import_file_of_a_missing_path_names_it(tmp_path: Path) -> None:
    opening = ImportFile.open(tmp_path / "nothing.ndjson", "nothing.ndjson")

    with pytest.raises(UsageError, match=r"nothing\.ndjson does not exist"):
        opening.__enter__()


def test_import_file_from_a_pipe_is_spooled_to_a_private_deleted_file() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS))
    os.close(write_end)
    with open(read_end, encoding="utf-8") as pipe:
        assert not pipe.seekable()
        with ImportFile.open(pipe, "stdin") as records:
            spool = os.fstat(records.stream.fileno())
            total = records.check()
            staged = [record for _, body in records.chunks(3) for record in json.loads(body)]

    assert stat.S_IMODE(spool.st_mode) == 0o600
    assert spool.st_nlink == 0  # no name: gone when closed, or when the process ends
    assert total == 7
    assert staged == RECORDS
