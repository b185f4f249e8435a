"""``prefctl demo``: the whole loop on a throwaway emulator and receiver, in a few seconds.

``run_demo(options, on_step)`` makes a private temp dir, starts the emulator (its dispatcher
inside, every delivery-rule duration divided by ``time_scale``) and a receiver on free ports of
127.0.0.1, and then, with no prompts:

1. gets a token, subscribes the receiver to seven event types and waits for the handshake; turns
   on failure alerts for the subscription (a support-team operation) with a demo recipient;
2. changes a profile through the REST API and watches the events arrive, signatures verified;
3. lets the receiver's fault plan answer 503 three times: the dispatcher retries with backoff;
4. replaces the profile with one too large for the receiver's body limit: 413, dead-lettered at
   once (PayloadTooLarge), and the alert email it causes lands in ``alerts.mbox``;
5. stops everything and removes the temp dir (``keep`` keeps it), also on Ctrl-C.

Progress is reported as ``DemoStep``s through ``on_step``; the result is a ``DemoReport`` whose
``ok`` is true only when every outcome of ``EXPECTED_OUTCOMES`` happened. The user's
configuration, token cache and data dir are never read or written: the demo passes its own
clients, token cache and data dir explicitly.

    >>> report = run_demo(DemoOptions(time_scale=60), on_step=lambda step: print(step.text))
    >>> report.ok, report.retries, report.dead_letter_reasons
    (True, 3, {'PayloadTooLarge': 1})
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from prefctl.demo.model import DemoOptions, DemoReport, DemoStep, OnStep
from prefctl.demo.session import DemoSession

__all__ = ["run_demo"]


def run_demo(options: DemoOptions, on_step: OnStep | None = None) -> DemoReport:
    """Run the demo (see the module docstring) and return its report.

    Waits are bounded, and an outcome that does not happen is a failed check, not an exception;
    a ``PrefctlError`` means the demo could not run at all (a port, the emulator's start-up). The
    servers are stopped and the temp dir removed whatever happens, Ctrl-C included.
    """
    options.validate()

    step = on_step or _ignore
    started = time.monotonic()
    report = DemoReport(time_scale=options.time_scale, seed=options.seed)
    workdir = Path(tempfile.mkdtemp(prefix="prefctl-demo-", dir=options.parent_dir))
    try:
        with DemoSession(options, workdir, report, step) as session:
            session.run()
    finally:
        if options.keep:
            report.workdir = str(workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        report.wall_seconds = round(time.monotonic() - started, 2)
    report.settle("the demo stopped before it")
    return report


def _ignore(step: DemoStep) -> None:
    del step
