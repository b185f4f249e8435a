"""``prefctl service check``: a careful client checks a deployment against the spec and against
the emulator's readings of it (docs/service-check.md lists every case).

It is ``endpoint check`` turned around: instead of playing the service against a receiver, it
plays a client against the service a profile points at (a real Sandbox, or the emulator), and it
starts a receiver of its own so that a temporary subscription shows what the deployment sends.
Each case ends ``pass`` (matches), ``fail`` (differs, with the evidence: the request, what came
back, what was expected, and what to set to match, when a setting can: a profiles.toml key, or the
emulator's account setting that plays the deployment's choice) or ``skip`` (and why). The report is a ``prefctl.receiver.conformance.Report``, so it renders and writes JUnit
as ``endpoint check`` does.

The modules, one concept each: ``session`` (the configuration, the connection to the deployment
and the test data), ``evidence`` (reading answers and requests), the cases by subject
(``token_cases``, ``rest_cases``, ``write_cases``) and ``run`` (the cases in order, the report).

    >>> report = check_service(ServiceCheckConfig(profile, signing), clock=SystemClock())
    >>> [case.name for case in report.failures]
"""

from __future__ import annotations

from prefctl.servicecheck.run import CASE_NAMES, SUITE_NAME, check_service
from prefctl.servicecheck.session import NAME_PREFIX, ServiceCheckConfig

__all__ = ["CASE_NAMES", "NAME_PREFIX", "SUITE_NAME", "ServiceCheckConfig", "check_service"]
