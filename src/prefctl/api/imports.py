"""Bulk import over the REST API (docs/api.md): initiate, stage, execute, status. No events.

``ImportFile`` reads the CLI's input — a JSON array of profiles, or NDJSON (one profile per line)
— as a stream, twice, and never holds more than one staging request's worth of records:
``check`` reads every record once and keeps none (a bad record is refused before anything is
sent), then ``chunks`` reads them again, encoded, a staging request at a time (at most
``--chunk-size`` records and 1 MiB, the service's request limit). A stream that cannot be read
twice (stdin, a pipe) is first copied to a temporary file (``ImportFile.open``).
``ImportsApi.stage_all`` sends the chunks, one request each; then ``execute``, and
``wait_until_done`` polls ``GET /imports/{id}`` until the import is Completed or Failed.

    >>> with ImportFile.open(Path("profiles.ndjson"), "profiles.ndjson") as records:
    ...     total = records.check()
    ...     api = ImportsApi(client)
    ...     import_id = api.initiate()["ImportId"]
    ...     api.stage_all(import_id, records, chunk_size=500)
    ...     api.execute(import_id)
    ...     api.wait_until_done(import_id, timeout=600, clock=SystemClock())["State"]
    'Completed'
"""

from __future__ import annotations

import io
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

# finite_float and not_json_constant: parse_json's checks, for the decoder of an array read
# piecewise.
from prefctl.api.client import (
    ApiClient,
    Resource,
    encode_body,
    finite_float,
    not_json_constant,
    parse_json,
)
from prefctl.api.shapes import text
from prefctl.clock import Clock
from prefctl.errors import PrefctlError, UsageError
from prefctl.private_files import os_reason

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "FINAL_STATES",
    "ImportFile",
    "ImportsApi",
    "parse_records",
]

DEFAULT_CHUNK_SIZE = 500
# The service refuses request bodies over 1 MiB (413, docs/api.md): a staging request stays under
# it whatever --chunk-size says, and a record that could never fit is refused before any request.
REQUEST_LIMIT_BYTES = 1024 * 1024
FINAL_STATES = frozenset({"Completed", "Failed"})
POLL_SECONDS = 0.25
# Characters read from the input at a time.
BLOCK_CHARS = 1 << 20
_JSON_WHITESPACE = " \t\n\r"
# A value or an error this close to the end of the window may be cut short by it ("1" of "1e5",
# "tru" of "true"): it is read again once more text is in.
_NEAR_END = 16


class ImportFile:
    """The records of an import file, a JSON array or NDJSON, read from a seekable text
    ``stream`` (``where`` names it in messages) ``block_chars`` at a time — see the module
    docstring."""

    def __init__(self, stream: IO[str], where: str, *, block_chars: int = BLOCK_CHARS) -> None:
        self.stream = stream
        self.where = where
        self.block_chars = block_chars
        self.total: int | None = None

    @classmethod
    @contextmanager
    def open(
        cls, source: Path | IO[str], where: str, *, block_chars: int = BLOCK_CHARS
    ) -> Iterator[ImportFile]:
        """The records of file ``source`` (UTF-8), or of a text stream (stdin). A stream that
        cannot be read twice is first copied to a temporary file, readable by this user only and
        gone when the block ends (or the process)."""
        if isinstance(source, Path):
            try:
                stream = source.open(encoding="utf-8")
            except FileNotFoundError:
                raise UsageError(f"{where} does not exist") from None
            except OSError as exc:
                raise UsageError(f"cannot read {where}: {os_reason(exc)}") from None
            with stream, cls.open(stream, where, block_chars=block_chars) as records:
                yield records
            return
        if source.seekable():
            yield cls(source, where, block_chars=block_chars)
            return
        with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
            try:
                while block := source.read(block_chars):
                    spool.write(block)
            except UnicodeDecodeError as exc:
                raise UsageError(f"cannot read {where}: {os_reason(exc)}") from None
            yield cls(spool, where, block_chars=block_chars)

    def check(self) -> int:
        """Read every record once, keeping none; their count. UsageError for the first problem,
        as ``parse_records`` finds it: the JSON first (of the whole input), then each record in
        turn (a JSON object that can be sent and fits in a request), then no records at all."""
        count = 0
        problem: UsageError | None = None
        for count, record in enumerate(self._values(), 1):
            if problem is None:
                try:
                    _encoded(record, count, self.where)
                except UsageError as exc:
                    problem = exc  # a JSON error further on is reported first
        if problem is not None:
            raise problem
        if not count:
            raise UsageError(f"{self.where} holds no records")
        self.total = count
        return count

    def chunks(
        self, size: int, *, max_bytes: int = REQUEST_LIMIT_BYTES
    ) -> Iterator[tuple[int, bytes]]:
        """The records, read again after ``check``, as staging request bodies: (how many records,
        their JSON array) with at most ``size`` records and ``max_bytes`` bytes (a record alone
        always fits: ``check`` refuses any that would not)."""
        if size < 1:
            raise UsageError("the chunk size must be at least 1")
        if self.total is None:
            raise RuntimeError("ImportFile.chunks before check")
        count = in_body = 0
        body = bytearray(b"[")
        for count, record in enumerate(self._values(), 1):
            encoded = _encoded(record, count, self.where)
            if in_body and (in_body >= size or len(body) + len(encoded) + 1 > max_bytes):
                body[-1:] = b"]"
                yield in_body, bytes(body)
                in_body, body = 0, bytearray(b"[")
            body += encoded
            body += b","
            in_body += 1
        if in_body:
            body[-1:] = b"]"
            yield in_body, bytes(body)
        if count != self.total:
            raise UsageError(
                f"{self.where} changed while it was imported ({count:,} records, not"
                f" {self.total:,}); the import was not executed"
            )

    def records(self) -> list[Any]:
        """Every record, parsed (for small inputs: they are all held at once)."""
        self.check()
        return list(self._values())

    def _values(self) -> Iterator[Any]:
        try:
            self.stream.seek(0)
            head = self.stream.read(self.block_chars)
            while not head.strip():  # whitespace so far, which neither format needs
                head = self.stream.read(self.block_chars)
                if not head:
                    return
            start = len(head) - len(head.lstrip())
            if head[start] == "[":
                reader = _ArrayReader(self.stream, head[start:], self.where, self.block_chars)
                yield from reader.values()
            else:
                self.stream.seek(0)
                yield from _ndjson_values(self.stream, self.where)
        except UnicodeDecodeError as exc:
            raise UsageError(f"cannot read {self.where}: {os_reason(exc)}") from None


def _ndjson_values(stream: IO[str], where: str) -> Iterator[Any]:
    # Lines end at "\n" (a text stream turns "\r\n" and "\r" into it), which is not their text.
    for number, line in enumerate(stream, 1):
        if line.endswith("\n"):
            line = line[:-1]
        if not line.strip():
            continue
        try:
            yield parse_json(line)
        except ValueError as exc:
            raise UsageError(f"{where} line {number} is not JSON: {exc}") from None
        except RecursionError:
            raise UsageError(f"{where} line {number} is nested too deeply") from None


class _ArrayReader:
    """The values of the JSON array at the start of ``head`` + the rest of ``stream``, decoded
    one at a time from a window of the text (``json.loads`` would hold all of it, and every
    value). Values and errors are those ``json.loads(text.strip())`` would give, positions
    included (the fuzz test in tests/api/test_imports_file.py compares them)."""

    def __init__(self, stream: IO[str], head: str, where: str, block_chars: int) -> None:
        self._stream = stream
        self._where = where
        self._block_chars = block_chars
        self._decoder = json.JSONDecoder(parse_constant=not_json_constant, parse_float=finite_float)
        self._text = head  # the window; position 0 of the array is its "["
        self._pos = 1
        self._offset = 0  # position of _text[0] in the array's text
        self._line = 1  # line number of _text[0]
        self._line_start = 0  # position where that line starts
        self._eof = False

    def values(self) -> Iterator[Any]:
        if self._next_char() == "]":
            self._pos += 1
        else:
            while True:
                yield self._value()
                char = self._next_char()
                self._pos += 1
                if char == "]":
                    break
                if char != ",":
                    raise self._error("Expecting ',' delimiter", self._pos - 1)
                self._next_char()
        # json.loads(text.strip()): only JSON whitespace, or what strip() removes, may follow.
        if self._next_char():
            raise self._error("Extra data", self._pos)

    def _value(self) -> Any:
        refused = ""
        while True:
            try:
                value, end = self._decoder.raw_decode(self._text, self._pos)
            except json.JSONDecodeError as exc:
                if self._cut_short(exc) and self._read_more():
                    continue
                raise self._error(exc.msg, exc.pos) from None
            except ValueError as exc:  # NaN, Infinity, 1e400
                # The number named may go on past the window: read on until it stays the same.
                if str(exc) != refused and self._read_more():
                    refused = str(exc)
                    continue
                raise UsageError(f"{self._where} is not a valid JSON array: {exc}") from None
            except RecursionError:
                raise UsageError(f"{self._where} is nested too deeply") from None
            if end >= len(self._text) - _NEAR_END and self._read_more():
                continue  # a number may go on past the window ("1" of "1e5")
            self._pos = end
            return value

    def _cut_short(self, error: json.JSONDecodeError) -> bool:
        """Whether ``error`` may come from the end of the window rather than from the text: one
        at its last few characters (``tru``, ``\\u12``, ``1e``) or before only whitespace, or an
        unterminated string."""
        rest = self._text[error.pos :]
        near_end = len(rest) <= _NEAR_END or not rest.strip()
        return near_end or error.msg.startswith("Unterminated string")

    def _next_char(self) -> str:
        """The next character that is not JSON whitespace, not consumed; "" at the end, with the
        whitespace left unconsumed (an error there is placed where ``strip()`` ends the text)."""
        scan = self._pos
        while True:
            text = self._text
            while scan < len(text) and text[scan] in _JSON_WHITESPACE:
                scan += 1
            ahead = scan - self._pos
            if scan < len(text):
                if text[scan].isspace() and self._rest_is_space(ahead):
                    return ""  # trailing whitespace that is not JSON's (U+00A0…): stripped
                self._pos += ahead
                return self._text[self._pos]
            if not self._read_more():
                return ""
            scan = self._pos + ahead

    def _rest_is_space(self, ahead: int) -> bool:
        """Whether only what ``strip()`` removes follows ``_pos + ahead`` (reading on to know)."""
        while not self._text[self._pos + ahead :].strip():
            ahead = len(self._text) - self._pos
            if not self._read_more():
                return True
        return False

    def _read_more(self) -> bool:
        """Drop what is consumed from the window and read on (at least as much as is left
        unconsumed, so that a long value is retried a few times only). At the end of the stream,
        trim the whitespace ``strip()`` would; False when nothing changed."""
        if self._eof:
            return False
        pending = len(self._text) - self._pos
        block = self._stream.read(max(self._block_chars, pending))
        if not block:
            self._eof = True
            # Never below _pos: what is consumed ends with "[", "," or a value, none of them space.
            stripped = self._text.rstrip()
            trimmed = len(stripped) < len(self._text)
            self._text = stripped
            return trimmed
        consumed = self._text[: self._pos]
        newlines = consumed.count("\n")
        if newlines:
            self._line += newlines
            self._line_start = self._offset + consumed.rindex("\n") + 1
        self._offset += self._pos
        self._text = self._text[self._pos :] + block
        self._pos = 0
        return True

    def _error(self, message: str, pos: int) -> UsageError:
        """``json.JSONDecodeError``'s message for window position ``pos``."""
        text = self._text
        line = self._line + text.count("\n", 0, pos)
        newline = text.rfind("\n", 0, pos)
        line_start = self._offset + newline + 1 if newline >= 0 else self._line_start
        char = self._offset + pos
        return UsageError(
            f"{self._where} is not a valid JSON array: {message}: line {line}"
            f" column {char - line_start + 1} (char {char})"
        )


def _encoded(record: Any, index: int, where: str) -> bytes:
    """The JSON of record number ``index``; UsageError unless it is an object that can be sent
    alone in a staging request."""
    if not isinstance(record, dict):
        raise UsageError(f"{where}: record {index} is not a JSON object (a profile)")
    body = encode_body(record, f"{where}: record {index}")
    if len(body) + 2 > REQUEST_LIMIT_BYTES:  # alone in a staging request: [record]
        raise UsageError(
            f"{where}: record {index} is {len(body):,} bytes; a request to the service carries at"
            f" most {REQUEST_LIMIT_BYTES:,} bytes, so it cannot be imported"
        )
    return body


def parse_records(text: str, where: str, *, block_chars: int = BLOCK_CHARS) -> list[dict[str, Any]]:
    """The profiles in ``text`` (read from ``where``): a JSON array, or NDJSON, all held at once
    (``ImportFile`` streams)."""
    stream = io.StringIO(text, newline=None)
    return ImportFile(stream, where, block_chars=block_chars).records()


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

    def stage_encoded(self, import_id: int, body: bytes) -> Resource:
        """``stage`` for records already encoded: ``body`` is their JSON array, sent as it is."""
        import orjson

        return self.client.resource(
            "POST", f"/imports/{import_id}/records", body=orjson.Fragment(body)
        )

    def stage_all(
        self,
        import_id: int,
        records: ImportFile,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        on_staged: Callable[[int], None] | None = None,
    ) -> Resource:
        """Stage the checked ``records`` in chunks of at most ``chunk_size`` records and 1 MiB;
        ``on_staged(n)`` after each chunk."""
        job: Resource = {}
        for count, body in records.chunks(chunk_size):
            job = self.stage_encoded(import_id, body)
            if on_staged is not None:
                on_staged(count)
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
            if text(job.get("State")) in FINAL_STATES:  # a list would be unhashable
                return job
            left = deadline - clock.monotonic()
            if left <= 0:
                raise PrefctlError(
                    f"import {import_id} is still {job.get('State')} after {timeout:g} s",
                    hint="it goes on in the service; run the import again with a longer "
                    "--wait-timeout to follow a new one",
                )
            sleep(min(poll, left))
