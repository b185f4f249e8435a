"""``prefctl service check``: the deployment a profile points at, against the spec and the
emulator's readings (docs/service-check.md).

The check itself is ``prefctl.servicecheck``; this module resolves the profile and its webhook
credentials, runs it under a spinner (progress on stderr) and renders the report as
``endpoint check`` does. Exit 0 when nothing differs, 1 when a case differs, 3 when the profile's
credentials are refused, 5 when the deployment cannot be reached.
"""

from __future__ import annotations

from typing import Annotated

import typer

from prefctl.cli._checks import JunitOption, render_report, write_junit
from prefctl.cli._context import get_state
from prefctl.cli.app import new_group
from prefctl.errors import ConfigError, PrefctlError, UnreachableError

SERVICE_LABELS = {"pass": "match", "warn": "WARN", "fail": "DIFFERS", "skip": "skip"}


def register(root: typer.Typer) -> None:
    group = new_group(
        "service", "Check the deployment a profile points at against the spec and the emulator."
    )
    group.command("check")(check_service)
    root.add_typer(group)


def check_service(
    public_url: Annotated[
        str | None,
        typer.Option(
            "--public-url",
            metavar="URL",
            help="A public URL that reaches the receiver this check starts on 127.0.0.1 (e.g. "
            "through a tunnel); needed for the subscription cases against a deployment that is "
            "not on this machine. Its path is the receiver's path (default /webhooks).",
            show_default=False,
        ),
    ] = None,
    receiver_port: Annotated[
        int,
        typer.Option(
            "--receiver-port",
            metavar="PORT",
            help="The port of the check's receiver on 127.0.0.1 (default: a free one), for a "
            "tunnel that forwards --public-url to a fixed port.",
            show_default=False,
        ),
    ] = 0,
    no_writes: Annotated[
        bool,
        typer.Option(
            "--no-writes",
            help="Create, change and delete nothing: the cases that would are reported as skipped.",
        ),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            metavar="SECONDS",
            min=1,
            help="How long to wait for the handshake and for the events.",
        ),
    ] = 120.0,
    junit: JunitOption = None,
) -> None:
    """Check the profile's deployment, case by case, against the spec and the emulator's
    readings: token endpoint, error bodies, resource shapes, settings, and through a temporary
    subscription the handshake, the signature encoding and the events. Exit 0 when nothing
    differs, 1 otherwise.

    What it creates (a profile and a subscription named prefctl-service-check-...) is deleted at
    the end, also on Ctrl-C.

    Example: prefctl -p sandbox service check --public-url https://hooks.example.com/webhooks
    """
    from prefctl.clock import SystemClock, utc_timestamp
    from prefctl.servicecheck import SUITE_NAME, ServiceCheckConfig
    from prefctl.servicecheck import check_service as run_check
    from prefctl.webhooks.credentials import load_signing_credentials

    state = get_state()
    profile = state.profile()
    try:
        signing = load_signing_credentials(state.config(), state.profile_name)
    except ConfigError as exc:
        state.out.warn(f"the signature case is skipped: {exc.message}")
        signing = None
    config = ServiceCheckConfig(
        profile,
        signing,
        public_url=public_url,
        no_writes=no_writes,
        receiver_port=receiver_port,
        wait=wait,
    )
    clock = SystemClock()
    started_at = utc_timestamp(clock.now())
    where = profile.api_url
    try:
        with state.out.status(f"checking {where}") as update:
            if not no_writes:
                state.out.info(f"test data is named {config.name}; it is deleted at the end")

            def progress(text: str) -> None:
                update(f"checking {where}: {text}")
                if "waiting" in text and not state.out.stderr_is_terminal:
                    state.out.info(text)  # no spinner off a terminal: say what the pause is

            report = run_check(config, clock=clock, on_case=progress)
    except UnreachableError as exc:
        if junit is not None:
            write_junit(junit, _unreachable(where, exc.message, started_at, SUITE_NAME))
        raise
    if junit is not None:
        from prefctl.receiver.conformance import junit_xml

        write_junit(junit, junit_xml(report))
    render_report(report, f"service check {report.url}", labels=SERVICE_LABELS, setting_column=True)
    skipped = report.skipped
    reasons: dict[str, list[str]] = {}
    for case in skipped:
        reasons.setdefault(case.reason, []).append(case.name)
    for reason, skipped_names in reasons.items():
        state.out.info(f"skipped {', '.join(skipped_names)}: {reason}")
    failures = report.failures
    if failures:
        names = ", ".join(case.name for case in failures)
        raise PrefctlError(
            f"{len(failures)} of {len(report.cases)} cases differ: {names}",
            hint="the reason and 'To match, set' columns say what differs and what to set; "
            "-o json shows the evidence",
        )
    ran = len(report.cases) - len(skipped)
    state.out.success(f"all {ran} cases match" + (f" ({len(skipped)} skipped)" if skipped else ""))


def _unreachable(url: str, message: str, started_at: str, suite: str) -> bytes:
    from prefctl.receiver.conformance import unreachable_junit_xml

    return unreachable_junit_xml(url, message, started_at, suite)
