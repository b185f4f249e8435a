"""``prefctl endpoint check URL``: the webhook conformance suite (docs/receiver.md).

The suite itself is ``prefctl.receiver.conformance``; this module resolves credentials and TLS
options, runs it under a spinner and renders the report as a table, JSON or JUnit XML. Exit 0 only
when every case passes (a warning passes, unless ``--strict``), 1 when one fails, 5 when the
endpoint cannot be reached.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from prefctl.cli._checks import JunitOption, render_report, write_junit
from prefctl.cli._context import get_state
from prefctl.cli._signing import (
    ClientIdOption,
    HashkeyEnvOption,
    HashkeyFileOption,
    SignatureEncodingOption,
    SignatureUserIdOption,
    signing_credentials,
)
from prefctl.cli.app import new_group
from prefctl.errors import PrefctlError, UnreachableError, UsageError


def register(root: typer.Typer) -> None:
    group = new_group("endpoint", "Check a webhook endpoint against the service's contract.")
    group.command("check")(check_endpoint)
    root.add_typer(group)


def check_endpoint(
    url: Annotated[
        str, typer.Argument(help="The endpoint's URL, as a subscription would have it.")
    ],
    junit: JunitOption = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.1,
            help="Seconds to wait for each answer (the service waits 30).",
        ),
    ] = 30.0,
    manual_window: Annotated[
        float,
        typer.Option(
            "--manual-window",
            metavar="S",
            help="Seconds a manual validator has for its GET of validationUrl after the "
            "handshake (the service's 5 minutes); the check waits that long, with a countdown.",
        ),
    ] = 300.0,
    manual_validation: Annotated[
        bool,
        typer.Option(
            "--manual-validation",
            help="The endpoint validates handshakes by GET of validationUrl (it answers 200 "
            "without a code); the GET must come from this machine.",
        ),
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Fail what the service accepts but passes with a warning: manual validation not "
            "declared with --manual-validation, and answers slower than --slow-after.",
        ),
    ] = False,
    slow_after: Annotated[
        float,
        typer.Option(
            "--slow-after",
            metavar="S",
            help="Answers slower than S seconds (up to the service's 30) are reported as slow: "
            "a warning, or a failure with --strict.",
        ),
    ] = 10.0,
    insecure: Annotated[
        bool,
        typer.Option("--insecure", help="Do not verify the endpoint's TLS certificate."),
    ] = False,
    ca_bundle: Annotated[
        Path | None,
        typer.Option(
            "--ca-bundle",
            metavar="FILE",
            help="Also trust this CA bundle (PEM) for the endpoint's certificate.",
            show_default=False,
        ),
    ] = None,
    client_cert: Annotated[
        Path | None,
        typer.Option(
            "--client-cert",
            metavar="FILE",
            help="Present this client certificate (PEM), for endpoints that require mTLS.",
            show_default=False,
        ),
    ] = None,
    client_key: Annotated[
        Path | None,
        typer.Option(
            "--client-key",
            metavar="FILE",
            help="The private key of --client-cert (default: in the certificate file).",
            show_default=False,
        ),
    ] = None,
    client_id: ClientIdOption = None,
    signature_user_id: SignatureUserIdOption = None,
    hashkey_file: HashkeyFileOption = None,
    hashkey_env: HashkeyEnvOption = None,
    signature_encoding: SignatureEncodingOption = None,
) -> None:
    """Play the service against URL: handshakes, signed, forged, stale, duplicate and
    out-of-order events, and the response time. Exit 0 only when every case passes (warnings
    pass, unless --strict).

    Example: prefctl endpoint check https://localhost:8443/webhooks --junit report.xml
    """
    import random

    from prefctl.clock import SystemClock, utc_timestamp
    from prefctl.receiver import conformance

    state = get_state()
    if insecure and ca_bundle is not None:
        raise UsageError("--insecure and --ca-bundle contradict each other", hint="pick one")
    if client_key is not None and client_cert is None:
        raise UsageError("--client-key needs --client-cert")
    credentials = signing_credentials(
        client_id, signature_user_id, hashkey_file, hashkey_env, signature_encoding
    )
    config = conformance.CheckConfig(
        url=url,
        credentials=credentials,
        timeout=timeout,
        manual_window=manual_window,
        manual_validation=manual_validation,
        strict=strict,
        slow_after=slow_after,
        insecure=insecure,
        ca_bundle=ca_bundle,
        client_cert=client_cert,
        client_key=client_key,
    )
    if insecure:
        state.out.warn("TLS verification is off (--insecure): the endpoint is not authenticated")
    clock = SystemClock()
    started_at = utc_timestamp(clock.now())
    try:
        with state.out.status(f"checking {url}") as update:
            report = conformance.check_endpoint(
                config,
                clock=clock,
                rng=random.SystemRandom(),
                on_case=lambda name: update(f"checking {url}: {name}"),
                on_wait=_countdown(update, manual_window),
            )
    except UnreachableError as exc:
        if junit is not None:
            write_junit(junit, conformance.unreachable_junit_xml(url, exc.message, started_at))
        raise
    if junit is not None:
        write_junit(junit, conformance.junit_xml(report))
    render_report(report, f"endpoint check {report.url}")
    failures = report.failures
    if failures:
        names = ", ".join(case.name for case in failures)
        raise PrefctlError(
            f"{len(failures)} of {len(report.cases)} checks failed: {names}",
            hint="the reason column says what the service expects",
        )
    warned = report.warnings
    if warned:
        names = ", ".join(case.name for case in warned)
        state.out.success(
            f"all {len(report.cases)} checks passed, {len(warned)} with warnings ({names}): "
            "the service accepts them; --strict makes them failures"
        )
    else:
        state.out.success(f"all {len(report.cases)} checks passed")


def _countdown(update: Callable[[str], None], window: float) -> Callable[[float], None]:
    """While the check waits for the GET of validationUrl: a countdown in the spinner on a
    terminal, else one progress line on stderr when the wait begins."""
    state = get_state()
    live = state.out.stderr_is_terminal and not state.out.quiet
    began = False

    def on_wait(left: float) -> None:
        nonlocal began
        if live:
            minutes, seconds = divmod(math.ceil(left), 60)
            update(
                f"manual_handshake: waiting for the GET of validationUrl, "
                f"{minutes}:{seconds:02d} left"
            )
        elif not began:
            state.out.info(
                f"manual_handshake: waiting up to {math.ceil(left)} s (--manual-window "
                f"{window:g}) for the endpoint's GET of validationUrl"
            )
        began = True

    return on_wait
