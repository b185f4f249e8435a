"""The local webhook receiver behind ``prefctl receive`` (docs/receiver.md).

    from prefctl.receiver import ReceiverConfig, serve, start_in_thread

``serve(config)`` blocks; ``start_in_thread(config)`` returns a ``RunningReceiver`` with ``.url``,
``.webhook_url``, ``.verdicts`` and ``.stop()``. Each request yields a ``Verdict``.
"""

from prefctl.receiver.config import (
    DEFAULT_PORT,
    ExitAfterNotReached,
    ReceiverConfig,
    ReceiverSummary,
)
from prefctl.receiver.faults import FaultPlan, FaultStep, load_plan, plan_from_options
from prefctl.receiver.serve import RunningReceiver, serve, start_in_thread
from prefctl.receiver.verdict import (
    ForwardResult,
    Kind,
    SignatureResult,
    Verdict,
    format_line,
    json_lines,
)

__all__ = [
    "DEFAULT_PORT",
    "ExitAfterNotReached",
    "FaultPlan",
    "FaultStep",
    "ForwardResult",
    "Kind",
    "ReceiverConfig",
    "ReceiverSummary",
    "RunningReceiver",
    "SignatureResult",
    "Verdict",
    "format_line",
    "json_lines",
    "load_plan",
    "plan_from_options",
    "serve",
    "start_in_thread",
]
