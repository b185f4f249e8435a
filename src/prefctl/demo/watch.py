"""What ``prefctl demo`` watches: the receiver's verdicts and the store's delivery records.

``DemoWatch`` drains the receiver's verdict queue on the caller's thread (each verdict becomes an
``ARRIVAL`` step, the line ``prefctl receive`` would print), polls the store with bounded waits,
and reads the alert emails back from ``alerts.mbox`` the way a mail client would.
"""

from __future__ import annotations

import queue
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prefctl.demo.model import DemoStep, OnStep, StepKind
from prefctl.dispatcher.alerts.mail import MBOX_FILE, read_mbox
from prefctl.receiver.serve import RunningReceiver
from prefctl.receiver.verdict import Kind, SignatureResult, Verdict, format_line
from prefctl.store import Store
from prefctl.store.delivery_history import DeliveryQuery, DeliveryRecord, list_deliveries

__all__ = ["FINAL_STATES", "POLL_SECONDS", "DemoWatch"]

POLL_SECONDS = 0.02
FINAL_STATES = frozenset({"delivered", "dead_lettered"})
# The receiver reports verdicts in batches, a moment after it answered.
VERDICT_GRACE_SECONDS = 1.0


class DemoWatch:
    """The receiver's verdicts so far (``verdicts``) and reads of the store at ``conn``."""

    def __init__(self, receiver: RunningReceiver, conn: Store, on_step: OnStep) -> None:
        self.receiver = receiver
        self.conn = conn
        self.on_step = on_step
        self.verdicts: list[Verdict] = []

    def drain(self) -> None:
        """Take the verdicts the receiver reported since the last call, each as a step."""
        while True:
            try:
                verdict = self.receiver.verdicts.get_nowait()
            except queue.Empty:
                return
            self.verdicts.append(verdict)
            self.on_step(DemoStep(StepKind.ARRIVAL, format_line(verdict), verdict.as_dict()))

    def poll(self, done: Callable[[], bool], seconds: float) -> bool:
        """Call ``done`` until it is true or ``seconds`` passed, draining verdicts meanwhile."""
        deadline = time.monotonic() + seconds
        while True:
            self.drain()
            if done():
                self.drain()
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECONDS)

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` that shows what arrived first (for ``wait_until_provisioned``)."""
        self.drain()
        time.sleep(seconds)

    def deliveries(
        self, subscription_id: int, event_ids: Sequence[str] | None = None
    ) -> list[DeliveryRecord]:
        """The subscription's deliveries (of ``event_ids`` only, when given)."""
        if event_ids is not None and not event_ids:
            return []  # an empty DeliveryQuery.event_ids would mean "any event"
        query = DeliveryQuery(subscription_id=subscription_id, event_ids=tuple(event_ids or ()))
        return list_deliveries(self.conn, query, limit=10_000)

    def await_final(
        self, subscription_id: int, event_ids: Sequence[str], seconds: float
    ) -> tuple[list[DeliveryRecord], bool]:
        """Wait until the store says each delivery of ``event_ids`` is final (at most
        ``seconds``), then briefly for the receiver to report every attempt. Returns the
        records as they are then, and whether they all were final."""
        records: list[DeliveryRecord] = []
        mark = len(self.verdicts)

        def final() -> bool:
            records[:] = self.deliveries(subscription_id, event_ids)
            return all(r.state in FINAL_STATES for r in records)

        done = self.poll(final, seconds)
        attempts = sum(r.attempts for r in records)
        self.poll(lambda: len(self.verdicts) - mark >= attempts, VERDICT_GRACE_SECONDS)
        return records, done

    def summary(self) -> dict[str, Any]:
        """What the receiver saw, for the report."""
        verdicts = self.verdicts
        events = [v for v in verdicts if v.kind == Kind.EVENT]
        statuses = Counter("reset" if v.status is None else str(v.status) for v in verdicts)
        return {
            "requests": len(verdicts),
            "handshakes": sum(v.kind == Kind.HANDSHAKE for v in verdicts),
            "events": len(events),
            "signatures_valid": sum(v.signature == SignatureResult.VALID for v in events),
            "signatures_rejected": sum(v.signature != SignatureResult.VALID for v in events),
            "duplicates": sum(v.duplicate for v in events),
            "out_of_order": sum(v.out_of_order for v in events),
            "statuses": dict(sorted(statuses.items())),
        }


def alert_emails(
    data_dir: Path, subscription_id: int, event_ids: Sequence[str]
) -> list[dict[str, Any]]:
    """The subscription's alert emails in ``alerts.mbox``, read back as a mail client would:
    subject, recipients, kind, and which of ``event_ids`` the body names."""
    from email.utils import getaddresses

    found = []
    for message in read_mbox(data_dir / MBOX_FILE):
        if str(message["X-Prefctl-Subscription-Id"]) != str(subscription_id):
            continue
        body = message.get_content()
        found.append(
            {
                "subject": str(message["Subject"]).strip(),
                "recipients": [address for _, address in getaddresses(message.get_all("To", []))],
                "kind": str(message["X-Prefctl-Alert-Kind"]),
                "event_ids": [event_id for event_id in event_ids if event_id in body],
            }
        )
    return found
