"""``prefctl demo``: the whole loop on a throwaway emulator and receiver.

``run`` runs it (``session`` drives the servers through ``story``, ``watch`` narrates what the
receiver and the store saw); ``model`` holds what it reports. Import ``prefctl.demo.model`` where
only the report's shapes are needed: this package pulls in the emulator and the receiver.
"""

from prefctl.demo.model import (
    DEFAULT_TIME_SCALE,
    EXPECTED_OUTCOMES,
    Check,
    DemoOptions,
    DemoReport,
    DemoStep,
    OnStep,
    StepKind,
)
from prefctl.demo.run import run_demo

__all__ = [
    "DEFAULT_TIME_SCALE",
    "EXPECTED_OUTCOMES",
    "Check",
    "DemoOptions",
    "DemoReport",
    "DemoStep",
    "OnStep",
    "StepKind",
    "run_demo",
]
