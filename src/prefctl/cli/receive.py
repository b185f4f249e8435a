"""``prefctl receive``: the local webhook receiver (docs/receiver.md).

This module turns flags into a ``ReceiverConfig`` and renders the verdict stream; the receiver
itself is ``prefctl.receiver``. The per-request lines are the command's data, so they go to stdout
(NDJSON with ``-o json``, after a ``{"type": "ready"}`` line); the ready and stop messages of the
table mode go to stderr. Lines arrive in batches from the receiver's verdict pump, never from the
request path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from prefctl.cli import _server_options as limits_options
from prefctl.cli._context import get_state
from prefctl.cli._output import Output, counted, to_json
from prefctl.cli._signing import (
    ClientIdOption,
    HashkeyEnvOption,
    HashkeyFileOption,
    SignatureEncodingOption,
    SignatureUserIdOption,
    signing_credentials,
)
from prefctl.errors import ConfigError

if TYPE_CHECKING:
    from prefctl.receiver import ExitAfterNotReached, ReceiverSummary, Verdict
    from prefctl.receiver.pump import BackgroundWriter, Sink

DEFAULT_PORT = 8751  # prefctl.receiver.DEFAULT_PORT, repeated to keep --help free of imports
OUTPUT_QUEUE_BYTES = 8 * 1024 * 1024  # lines waiting for stdout's reader; beyond, dropped
OUTPUT_CLOSE_SECONDS = 3.0  # at the stop, how long the queued lines may take to be read


def register(root: typer.Typer) -> None:
    root.command("receive")(receive)


def receive(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="Port to listen on (0: any free port).")
    ] = DEFAULT_PORT,
    path: Annotated[
        str, typer.Option("--path", help="Path that receives the POSTs.")
    ] = "/webhooks",
    client_id: ClientIdOption = None,
    signature_user_id: SignatureUserIdOption = None,
    hashkey_file: HashkeyFileOption = None,
    hashkey_env: HashkeyEnvOption = None,
    signature_encoding: SignatureEncodingOption = None,
    no_verify: Annotated[
        bool,
        typer.Option("--no-verify", help="Accept events without checking their signature."),
    ] = False,
    tolerance: Annotated[
        float,
        typer.Option("--tolerance", help="Seconds a signature Timestamp may be off the clock."),
    ] = 300.0,
    manual_validation: Annotated[
        bool,
        typer.Option(
            "--manual-validation",
            help="Answer handshakes 200 without the code and show the validationUrl.",
        ),
    ] = False,
    auto_validate: Annotated[
        bool,
        typer.Option(
            "--auto-validate",
            help="Manual validation, and GET the validationUrl right away (implies "
            "--manual-validation).",
        ),
    ] = False,
    validation_host: Annotated[
        list[str] | None,
        typer.Option(
            "--validation-host",
            metavar="HOST[:PORT]",
            help="Also trust this host for --auto-validate GETs (repeatable; default: only the "
            "hosts of the profile's api_url and auth_url).",
            show_default=False,
        ),
    ] = None,
    respond: Annotated[
        int | None,
        typer.Option(
            "--respond", metavar="STATUS", help="Answer every event STATUS.", show_default=False
        ),
    ] = None,
    fail_first: Annotated[
        int,
        typer.Option("--fail-first", metavar="N", help="Answer the first N events --fail-status."),
    ] = 0,
    fail_status: Annotated[
        int,
        typer.Option("--fail-status", help="Status of --fail-first and --fail-rate failures."),
    ] = 500,
    fail_rate: Annotated[
        float,
        typer.Option(
            "--fail-rate", metavar="P", help="Answer this share of events (0–1) --fail-status."
        ),
    ] = 0.0,
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="Seed of --fail-rate, to repeat a run.", show_default=False),
    ] = None,
    delay: Annotated[
        float,
        typer.Option("--delay", metavar="S", help="Answer every event after S seconds."),
    ] = 0.0,
    fault_plan: Annotated[
        Path | None,
        typer.Option(
            "--fault-plan",
            metavar="FILE",
            help="TOML list of behaviours, step by step (docs/receiver.md).",
            show_default=False,
        ),
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option(
            "--record",
            metavar="FILE",
            help="Write every request (headers, body, verdict) to FILE as NDJSON.",
            show_default=False,
        ),
    ] = None,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact", help="Mask e-mails, phone numbers and names in --record and --ui."
        ),
    ] = False,
    forward_to: Annotated[
        str | None,
        typer.Option(
            "--forward-to",
            metavar="URL",
            help="Pass authentic events to your handler and answer with its status.",
            show_default=False,
        ),
    ] = None,
    exit_after: Annotated[
        int | None,
        typer.Option(
            "--exit-after",
            metavar="N",
            help="Exit 0 once N authentic events arrived.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="S",
            help="Stop after S seconds (exit 1 if --exit-after was not reached).",
            show_default=False,
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert", help="Serve HTTPS with this PEM certificate.", show_default=False
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option("--tls-key", help="Private key of --tls-cert (PEM).", show_default=False),
    ] = None,
    client_ca: Annotated[
        Path | None,
        typer.Option(
            "--client-ca",
            help="Require a client certificate issued by this CA (mTLS).",
            show_default=False,
        ),
    ] = None,
    header_timeout: limits_options.HeaderTimeoutOption = limits_options.DEFAULT_HEADER_TIMEOUT,
    body_timeout: limits_options.BodyTimeoutOption = limits_options.DEFAULT_BODY_TIMEOUT,
    max_header_bytes: limits_options.MaxHeaderBytesOption = limits_options.DEFAULT_MAX_HEADER_BYTES,
    max_connections: limits_options.MaxConnectionsOption = limits_options.DEFAULT_MAX_CONNECTIONS,
    ui: Annotated[
        bool,
        typer.Option("--ui", help="Also serve a live inspector page at /_prefctl/ (in a browser)."),
    ] = False,
    ui_token: Annotated[
        str | None,
        typer.Option(
            "--ui-token",
            metavar="TOKEN",
            envvar="PREFCTL_UI_TOKEN",
            help="Token the inspector page asks for (needed with --ui on a non-loopback --host).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Receive webhooks locally: answer handshakes, verify signatures, show every request.

    One line per request on stdout: time, status, EventType, ProfileId, EventId, signature result,
    duplicate, out of order, latency. Example: prefctl receive --fail-first 3 --record events.ndjson
    """
    import dataclasses
    import random

    from prefctl.receiver import ExitAfterNotReached, ReceiverConfig, plan_from_options, serve
    from prefctl.receiver.pump import BackgroundWriter

    state = get_state()
    out = state.out
    faults = plan_from_options(
        respond=respond,
        fail_first=fail_first,
        fail_status=fail_status,
        fail_rate=fail_rate,
        delay=delay,
        plan_file=fault_plan,
    )
    credentials = None
    if not no_verify:
        try:
            credentials = signing_credentials(
                client_id, signature_user_id, hashkey_file, hashkey_env, signature_encoding
            )
        except ConfigError as exc:
            hint = f"{exc.hint}; or pass --no-verify" if exc.hint else "or pass --no-verify"
            raise ConfigError(exc.message, hint=hint) from None
    # Lines are written on their own thread, so a slow terminal or pipe never holds up an answer;
    # what waits for a reader that does not keep up is bounded (lines beyond it are dropped).
    writer = BackgroundWriter(
        _output_chunk(out),
        name="prefctl-receive-output",
        max_pending_bytes=OUTPUT_QUEUE_BYTES,
        on_dropped=_dropped_notice(out),
    )
    summary: ReceiverSummary | None = None
    shortfall: ExitAfterNotReached | None = None
    try:
        config = ReceiverConfig(
            host=host,
            port=port,
            path=path,
            verify=not no_verify,
            credentials=credentials,
            tolerance=tolerance,
            manual_validation=manual_validation or auto_validate,
            auto_validate=auto_validate,
            validation_hosts=_validation_hosts(validation_host) if auto_validate else (),
            faults=faults,
            record=record,
            redact=redact,
            forward_to=forward_to,
            exit_after=exit_after,
            timeout=timeout,
            tls_cert=tls_cert,
            tls_key=tls_key,
            client_ca=client_ca,
            limits=limits_options.connection_limits(
                header_timeout, body_timeout, max_header_bytes, max_connections
            ),
            ui=ui,
            ui_token=ui_token,
            rng=random.Random(seed),
            on_verdicts=_json_sink(writer) if state.json else _table_sink(out, writer),
        )
        try:
            summary = serve(config, on_ready=lambda info: _ready(out, writer, info, host))
        except ExitAfterNotReached as exc:
            shortfall = exc
            summary = exc.summary
    finally:
        _close_output(writer, summary, shortfall)
    if writer.error is not None:
        raise writer.error
    assert summary is not None
    if state.json:
        out.json_line({"type": "stopped", **dataclasses.asdict(summary), "dropped": writer.dropped})
    else:
        out.info(f"stopped ({summary.reason}): {_counts(summary, writer.dropped)}")
    if shortfall is not None:  # exit 1, after the stop line (docs/receiver.md)
        raise shortfall


def _validation_hosts(extra: list[str] | None) -> tuple[str, ...]:
    """The hosts --auto-validate trusts: the profile's service hosts, then --validation-host."""
    from prefctl.receiver.validation import TrustedHosts

    try:
        profile = get_state().profile()
    except ConfigError:  # no profile (a CI job with flags only): --validation-host alone
        service: list[str | None] = []
    else:
        service = [TrustedHosts.of_url(profile.api_url), TrustedHosts.of_url(profile.auth_url)]
    return tuple(dict.fromkeys([host for host in service if host] + list(extra or [])))


def _counts(summary: ReceiverSummary, dropped: int) -> str:
    counts = f"{counted(summary.requests, 'request')}, {counted(summary.events, 'event')}"
    if dropped:
        counts += f"; {dropped} lines not shown (stdout was not read fast enough)"
    return counts


def _dropped_notice(out: Output) -> Callable[[int], None]:
    """On the writer's thread, before the first line written after ``count`` were dropped: a
    record of it in the output, and a warning on stderr."""

    def notice(count: int) -> None:
        detail = f"{count} lines were not shown: stdout was not read fast enough"
        if out.json_mode:
            out.json_line({"type": "dropped", "lines": count, "detail": detail})
        else:
            out.line(f"… {detail}")
        out.warn(detail)

    return notice


def _close_output(
    writer: BackgroundWriter,
    summary: ReceiverSummary | None,
    shortfall: ExitAfterNotReached | None,
) -> None:
    """Write the queued lines, within OUTPUT_CLOSE_SECONDS. When stdout's reader does not take
    them (``prefctl receive | sleep 600``), the process ends at once, with a line on stderr if
    it can: Python's own exit would wait for ever on the blocked write."""
    try:
        if writer.close(OUTPUT_CLOSE_SECONDS):
            return
        code = shortfall.exit_code if shortfall is not None else 0
    except BaseException:  # a second Ctrl-C or SIGTERM while waiting for the reader
        if writer.close(0):
            raise
        code = 130
    how = f"stopped ({summary.reason}): {_counts(summary, writer.dropped)}; " if summary else ""
    _exit_now(f"prefctl receive: {how}stdout is not being read: the lines queued are lost", code)


def _exit_now(message: str, code: int) -> NoReturn:
    import os
    import select

    try:
        # stderr may be the same stuck pipe: write only what it takes without waiting.
        if select.select([], [2], [], 0)[1]:
            os.write(2, (message + "\n").encode()[: select.PIPE_BUF])
    except (OSError, ValueError):
        pass
    os._exit(code)


def _ready(out: Output, writer: BackgroundWriter, info: dict[str, Any], host: str) -> None:
    limits_options.warn_if_exposed(out, host)
    if out.json_mode:
        line = to_json(info, indent=False)
        writer.write(line, size=len(line))
        return
    if info["verify"]:
        out.success(
            f"receiving on {info['url']} — signatures verified for {info['client_id']} / "
            f"{info['signature_user_id']} (tolerance {info['tolerance']:g} s)"
        )
    else:
        out.warn(f"receiving on {info['url']} — signature verification is OFF (--no-verify)")
    extras = [
        f"{label}: {info[key]}"
        for key, label in (
            ("validation", "handshakes"),
            ("faults", "faults"),
            ("record", "recording to"),
            ("forward_to", "forwarding to"),
            ("ui_url", "inspector page"),
        )
        if info[key] and info[key] != "sync"
    ]
    if info["validation_hosts"]:
        extras.append(f"validationUrls fetched from: {', '.join(info['validation_hosts'])}")
    if info["mtls"]:
        extras.append("client certificate required (mTLS)")
    for extra in extras:
        out.info(f"  {extra}")


def _output_chunk(out: Output) -> Callable[[Any], None]:
    """Writes one queued chunk: NDJSON bytes as they are, text as a line, Rich text styled."""

    def write(chunk: Any) -> None:
        if isinstance(chunk, bytes):
            out.raw(chunk)
        elif isinstance(chunk, str):
            out.line(chunk)
        else:
            out.out.print(chunk, soft_wrap=True)

    return write


def _json_sink(writer: BackgroundWriter) -> Sink:
    from prefctl.receiver.verdict import json_lines

    def sink(batch: Sequence[Verdict]) -> None:
        if writer.error is not None:
            raise writer.error
        if writer.backlogged:  # the reader is behind: not even made
            writer.skip(len(batch))
            return
        chunk = json_lines(batch) + b"\n"
        writer.write(chunk, size=len(chunk), lines=len(batch))

    return sink


_STATUS_STYLE = {2: "green", 3: "yellow", 4: "red", 5: "red"}


def _table_sink(out: Output, writer: BackgroundWriter) -> Sink:
    from prefctl.receiver import format_line

    if not (out.stdout_is_terminal and not out.no_color):

        def plain(batch: Sequence[Verdict]) -> None:
            if writer.error is not None:
                raise writer.error
            if writer.backlogged:
                writer.skip(len(batch))
                return
            text = "\n".join([format_line(v) for v in batch])
            writer.write(text, size=len(text), lines=len(batch))

        return plain

    from rich.text import Text

    def styled(batch: Sequence[Verdict]) -> None:
        if writer.error is not None:
            raise writer.error
        for verdict in batch:
            if writer.backlogged:
                writer.skip(1)
                continue
            text = Text(format_line(verdict))
            status = verdict.status
            style = "bold red" if status is None else _STATUS_STYLE.get(status // 100, "")
            text.stylize(style, 14, 17)  # the status column
            writer.write(text, size=len(text), lines=1)

    return styled
