"""All terminal output of prefctl goes through one ``Output`` object.

Data goes to stdout (tables for people, JSON for scripts); messages, progress, spinners and prompts
go to stderr. Commands never create a Console themselves.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from prefctl.cli._tables import Columns, as_columns, fit_table, plain_table, tsv
from prefctl.errors import PrefctlError, UsageError

if TYPE_CHECKING:
    from rich.console import Console


class Advance(Protocol):
    def __call__(self, amount: int = 1) -> None: ...


def _json_default(value: Any) -> Any:
    from datetime import date, datetime
    from pathlib import Path

    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def to_json(data: Any, *, indent: bool = True) -> str:
    return json.dumps(data, indent=2 if indent else None, default=_json_default, ensure_ascii=False)


class Output:
    """Renders data and messages according to the global options."""

    def __init__(
        self,
        *,
        json_mode: bool = False,
        quiet: bool = False,
        no_color: bool = False,
        verbosity: int = 0,
        wide: bool = False,
    ) -> None:
        self.json_mode = json_mode
        self.wide = wide
        self.quiet = quiet
        self.no_color = no_color
        self.verbosity = verbosity
        self._out: Console | None = None
        self._err: Console | None = None

    # -- consoles -------------------------------------------------------------------------------
    @property
    def out(self) -> Console:
        if self._out is None:
            self._out = self._console(sys.stdout)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            self._err = self._console(sys.stderr)
        return self._err

    def _console(self, file: TextIO) -> Console:
        from rich.console import Console

        if self.no_color:  # no styling at all: bold and underline are styling too
            return Console(file=file, color_system=None, no_color=True, highlight=False)
        return Console(file=file, highlight=False)

    @property
    def stdout_is_terminal(self) -> bool:
        """Whether stdout is a terminal as Rich decides it (``TTY_COMPATIBLE``, ``FORCE_COLOR``
        or a TTY), without importing Rich when the answer is surely no: a pipe or a file."""
        if self._out is None and _surely_not_a_terminal(sys.stdout):
            return False
        return self.out.is_terminal

    @property
    def stderr_is_terminal(self) -> bool:
        """``stdout_is_terminal`` for stderr."""
        if self._err is None and _surely_not_a_terminal(sys.stderr):
            return False
        return self.err.is_terminal

    @property
    def interactive(self) -> bool:
        """True when a person is at the terminal (stdin and stderr are TTYs)."""
        return sys.stdin.isatty() and sys.stderr.isatty()

    # -- data (stdout) --------------------------------------------------------------------------
    def line(self, text: str) -> None:
        """One line of plain data on stdout (a token, an id), with no markup."""
        with writing_stdout() as stdout:
            stdout.write(text + "\n")
            stdout.flush()

    def raw(self, data: bytes) -> None:
        """Bytes already encoded for stdout (a batch of NDJSON lines, newline included)."""
        with writing_stdout() as stdout:
            buffer = getattr(stdout, "buffer", None)
            if buffer is None:  # a text-only stream (stdout captured into a StringIO)
                stdout.write(data.decode())
                stdout.flush()
                return
            stdout.flush()  # anything written as text before goes first
            buffer.write(data)
            buffer.flush()

    def json(self, data: Any) -> None:
        """Data as JSON on stdout (lists print as one JSON array)."""
        self.line(to_json(data))

    def json_line(self, data: Any) -> None:
        """One NDJSON record on stdout, flushed at once (for streams)."""
        self.line(to_json(data, indent=False))

    def table(
        self,
        rows: Sequence[Mapping[str, Any]],
        columns: Columns | Sequence[tuple[str, str]],
        *,
        title: str | None = None,
        json_rows: Sequence[Any] | None = None,
        empty: str = "nothing to show",
        drop_first: Sequence[str] = (),
    ) -> None:
        """Rows as a table, or as a JSON array in JSON mode (``json_rows`` when they differ).

        ``columns`` is the table's declaration (``cli/_tables.py`` ``columns(...)``: the
        columns, those it gives up first, those whose prose wraps; a list of ``(key, HEADER)``
        pairs with ``drop_first`` is the same). On a terminal the table fits its width by
        leaving out whole columns, ``drop_first`` first, then from the right, and by wrapping
        the prose of ``wrap`` columns at spaces: no value is ever cut; ``--wide`` shows every
        column. Into a pipe or a file: a header line and one line per row, fields
        separated by tabs, no title, box or styling (for ``cut``, ``awk``)."""
        if self.json_mode:
            self.json(list(json_rows if json_rows is not None else rows))
            return
        if not rows:
            self.info(empty)
            return
        table = as_columns(columns, drop_first)
        headers = table.headers
        cells = [[_cell(row.get(key)) for key, _header in table.columns] for row in rows]
        if not self.stdout_is_terminal:
            with writing_stdout() as stdout:
                stdout.write(tsv([headers, *cells]))
                stdout.flush()
            return
        console = self.out
        hidden: list[str] = []
        if not self.wide:
            headers, cells, hidden = fit_table(
                headers,
                cells,
                console.width,
                drop_order=table.drop_order(),
                wrap=table.wrapped(),
            )
        lines = plain_table(headers, cells, title=title)
        with writing_stdout():
            if lines is not None:
                self._plain(lines, titled=title is not None)
            else:
                self._rich_table(headers, cells, title=title)
        if hidden:
            self.info(
                f"not shown at {console.width} columns: {', '.join(hidden)} (--wide shows all)"
            )

    def page(
        self,
        rows: Sequence[Mapping[str, Any]],
        columns: Columns | Sequence[tuple[str, str]],
        *,
        json_rows: Sequence[Any],
        next_cursor: str | None,
        with_cursor: bool,
        more: str,
        empty: str,
        drop_first: Sequence[str] = (),
    ) -> None:
        """One page of a listing: a table, or the JSON array; ``with_cursor`` wraps the array
        as ``{"items": [...], "next_cursor": ...}`` so that scripts page without stderr. When
        there is a next page, ``more`` (its ``{cursor}`` filled in) says so on stderr."""
        if self.json_mode and with_cursor:
            self.json({"items": list(json_rows), "next_cursor": next_cursor})
        else:
            self.table(rows, columns, json_rows=json_rows, empty=empty, drop_first=drop_first)
        if next_cursor:
            self.info(more.format(cursor=next_cursor))

    def _rich_table(
        self, headers: Sequence[str], cells: Sequence[Sequence[str]], *, title: str | None
    ) -> None:
        """A table whose cells hold characters Rich decides how to show (line breaks, escapes,
        combining marks), its cells never folded."""
        from rich.table import Table
        from rich.text import Text

        table = Table(title=title, show_edge=False, header_style="bold")
        for header in headers:
            table.add_column(header, no_wrap=True, overflow="ignore")
        for texts in cells:
            # Text(), not str: user data such as "[abc]" must not be read as Rich markup.
            table.add_row(*[Text(text) for text in texts])
        width = self.out.measure(table, options=self.out.options.update(width=10_000)).maximum
        self.out.print(table, width=max(width, self.out.width), crop=False)

    def _plain(self, lines: list[str], *, titled: bool) -> None:
        """A ``plain_table`` on stdout, its title and header styled as Rich would style them."""
        from rich.text import Text

        console = self.out
        head = 0
        if console.color_system is not None:
            head = 2 if titled else 1
            for index, line in enumerate(lines[:head]):
                style = "table.title" if titled and index == 0 else "bold"
                text = Text(line, style=style, no_wrap=True, overflow="ignore")
                console.print(text, crop=False)
        file = console.file
        file.write("\n".join(lines[head:]) + "\n")
        file.flush()

    def listing(
        self,
        items: Iterable[Any],
        columns: Columns | Sequence[tuple[str, str]],
        *,
        noun: str,
        summary: Callable[[Any], Mapping[str, Any]] | None = None,
        empty: str = "nothing to show",
    ) -> None:
        """Every item of a paged listing (``--all``), shown as the pages arrive.

        JSON mode writes the array item by item, so memory holds one page however many there
        are (the text is the same as ``json``'s; an error mid-way leaves it unterminated, and the
        exit code says so). Table mode keeps only each item's ``summary`` row for the table (by
        default the item's values of ``columns``).
        A spinner on stderr counts the ``noun`` so far.
        """
        rows: list[Mapping[str, Any]] = []
        keys = [key for key, _header in as_columns(columns).columns]
        # No spinner between lines of JSON on the terminal: the array itself shows the progress.
        quiet = self.json_mode and self.stdout_is_terminal
        spinner = nullcontext(lambda _text: None) if quiet else self.status(f"fetching {noun}…")
        with writing_stdout() as stdout, spinner as update:
            first = True
            for count, item in enumerate(items, 1):
                if count % 500 == 0:
                    update(f"fetching {noun}… {count:,} so far")
                if not self.json_mode:
                    rows.append(summary(item) if summary else {k: item.get(k) for k in keys})
                    continue
                text = "  " + to_json(item).replace("\n", "\n  ")
                stdout.write(("[\n" if first else ",\n") + text)
                first = False
            if self.json_mode:
                stdout.write("[]\n" if first else "\n]\n")
                stdout.flush()
        if not self.json_mode:
            self.table(rows, columns, empty=empty)

    def record(
        self, data: Mapping[str, Any], *, title: str | None = None, json_data: Any = None
    ) -> None:
        """One object: key/value lines for people, the object as JSON in JSON mode."""
        if self.json_mode:
            self.json(json_data if json_data is not None else data)
            return
        if not self.stdout_is_terminal:  # key, tab, value: one line each, for cut and awk
            with writing_stdout() as stdout:
                stdout.write(tsv([[str(key), _cell(value)] for key, value in data.items()]))
                stdout.flush()
            return
        from rich.table import Table
        from rich.text import Text

        table = Table(title=title, show_header=False, show_edge=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for key, value in data.items():
            table.add_row(Text(str(key)), Text(_cell(value)))
        with writing_stdout():
            self.out.print(table)

    def render(self, renderable: Any) -> None:
        """A Rich renderable (panel, tree, chart) on stdout, for table mode."""
        with writing_stdout():
            self.out.print(renderable)

    # -- messages (stderr) ----------------------------------------------------------------------
    def info(self, message: str) -> None:
        if self.quiet:
            return
        if _plain_line(message) and not self.stderr_is_terminal:  # as Rich would write it
            sys.stderr.write(message + "\n")
            sys.stderr.flush()
            return
        self.err.print(message, markup=False, soft_wrap=True)

    def success(self, message: str) -> None:
        if not self.quiet:
            self.err.print(f"[green]✓[/green] {_escape(message)}", soft_wrap=True)

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/yellow] {_escape(message)}", soft_wrap=True)

    def error(self, message: str, hint: str | None = None) -> None:
        text = " ".join(message.split())
        if hint:
            text += f" — {' '.join(hint.split())}"
        self.err.print(f"[red]error:[/red] {_escape(text)}", soft_wrap=True)

    # -- waits and questions --------------------------------------------------------------------
    @contextmanager
    def status(self, message: str) -> Iterator[Callable[[str], None]]:
        """A spinner on stderr while the block runs; yields a function to change its text."""
        if self.quiet or not self.stderr_is_terminal:
            yield lambda _text: None
            return
        from rich.live import Live
        from rich.spinner import Spinner

        spinner = Spinner("dots", message)
        # Not Console.status: its Live swaps sys.stdout for a proxy that prints on the spinner's
        # console, so data written to a redirected stdout (`> file`) would land on the terminal.
        with Live(
            spinner,
            console=self.err,
            transient=True,
            refresh_per_second=12.5,
            redirect_stdout=False,
        ):
            yield lambda text: spinner.update(text=text)

    @contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Advance]:
        """A progress bar on stderr; yields ``advance(n)``."""
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=False,
            disable=self.quiet,
            redirect_stdout=False,  # data written meanwhile stays on stdout (see ``status``)
        )
        with progress:
            task = progress.add_task(description, total=total)

            def advance(amount: int = 1) -> None:
                progress.advance(task, amount)

            yield advance

    def confirm(self, question: str, *, assume_yes: bool) -> None:
        """Ask before a destructive action; without a TTY, ``--yes`` is required."""
        if assume_yes:
            return
        if not self.interactive:
            raise UsageError(f"{question} — refusing without confirmation", hint="pass --yes")
        from rich.prompt import Confirm

        with self._ending_line_on_interrupt():
            answer = Confirm.ask(question, console=self.err, default=False)
        if not answer:
            raise UsageError("cancelled")

    def prompt(self, label: str, *, secret: bool = False, default: str | None = None) -> str:
        """Ask for a value on a TTY; otherwise a missing value is an error."""
        if not self.interactive:
            raise UsageError(f"missing value: {label}", hint="pass it as a flag")
        from rich.prompt import Prompt

        with self._ending_line_on_interrupt():
            if default is None:
                return Prompt.ask(label, console=self.err, password=secret)
            return Prompt.ask(label, console=self.err, password=secret, default=default)

    @contextmanager
    def _ending_line_on_interrupt(self) -> Iterator[None]:
        # Ctrl-C at a question leaves the cursor after it: "interrupted" goes on a line of its own.
        try:
            yield
        except KeyboardInterrupt:
            self.err.print()
            raise

    def read_stdin(self, what: str) -> str:
        """All of stdin. When it is a terminal, a line on stderr first says that prefctl is
        reading and how to end (else it would seem to hang)."""
        if sys.stdin.isatty():
            self.info(f"reading {what} from the terminal; end it with Ctrl-D")
        return sys.stdin.read()


class CurrentStderr:
    """A stream that writes to ``sys.stderr`` as it is at each write, for the log handler.

    While a spinner or progress bar runs, Rich's Live puts a proxy in ``sys.stderr`` that prints
    each line above the bar; a handler holding the original stream would write into the bar's
    line instead (``-v`` with a spinner on a terminal)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@contextmanager
def writing_stdout() -> Iterator[TextIO]:
    """stdout, for a block that writes data to it. A write that fails (a full disk, stdout
    closed with ``>&-``) becomes a one-line PrefctlError (exit 1); a pipe closed by its reader
    (``| head``) stays a BrokenPipeError, which the CLI ends on quietly."""
    if sys.stdout is None:
        raise PrefctlError("cannot write the output: stdout is closed")
    try:
        yield sys.stdout
    except BrokenPipeError:
        raise
    except OSError as exc:
        from prefctl.private_files import os_reason

        raise PrefctlError(f"cannot write the output: {os_reason(exc)}") from None


def _surely_not_a_terminal(file: TextIO) -> bool:
    """True when Rich would find ``file`` is no terminal: not a TTY, and no variable that makes
    Rich treat it as one (``TTY_COMPATIBLE``, ``FORCE_COLOR``). False: not sure, ask Rich."""
    if os.environ.get("TTY_COMPATIBLE") or os.environ.get("FORCE_COLOR") is not None:
        return False
    try:
        return not file.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed: Rich says no terminal too
        return True


def _plain_line(text: str) -> bool:
    """A message Rich prints as it is when not on a terminal: one line of printable characters,
    nothing it would read as an emoji code (``:name:``)."""
    return text.isprintable() and ":" not in text


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return to_json(value, indent=False)
    return str(value)


def counted(count: int, noun: str) -> str:
    """``1 request``, ``2 requests``: a count and its noun, in the singular for one."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def rows_of(items: Iterable[Any]) -> list[dict[str, Any]]:
    """Models or mappings as plain dict rows for ``Output.table``."""
    rows = []
    for item in items:
        if hasattr(item, "model_dump"):
            rows.append(item.model_dump(mode="json", by_alias=True))
        else:
            rows.append(dict(item))
    return rows
