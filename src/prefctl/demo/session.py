"""One run of ``prefctl demo``: the servers, the clients and the acts (see ``prefctl.demo``).

``DemoSession`` owns what the run starts (emulator, receiver, REST client, a read connection to the
store) and stops all of it when the ``with`` block ends. Each act makes its profile change through
the REST API, waits (bounded) until the store says every delivery it queued is final, and judges
what happened from the store (the dispatcher's record) and the receiver's verdicts (what the
endpoint saw), both through ``DemoWatch``, on the caller's thread.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from types import TracebackType
from typing import Any

from prefctl.api.client import ApiClient, Resource
from prefctl.api.events import EventQuery, EventsApi
from prefctl.api.profiles import ProfilesApi
from prefctl.api.subscriptions import SubscriptionsApi, failure_reason
from prefctl.clock import SystemClock
from prefctl.demo.model import DemoOptions, DemoReport, DemoStep, OnStep, StepKind
from prefctl.demo.story import (
    BODY_LIMIT_BYTES,
    EVENT_TYPES,
    RECIPIENT,
    STORY,
    SUBSCRIPTION_NAME,
    ProfileChange,
    expected_events,
    selections,
)
from prefctl.demo.watch import FINAL_STATES, POLL_SECONDS, DemoWatch, alert_emails
from prefctl.dispatcher.alerts.mail import MBOX_FILE
from prefctl.dispatcher.observer import DeadLetter
from prefctl.dispatcher.policy import RESPONSE_TIMEOUT_SECONDS, DeadLetterReason
from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.receiver.faults import FaultPlan, FaultStep
from prefctl.receiver.serve import ReceiverConfig
from prefctl.receiver.serve import start_in_thread as start_receiver
from prefctl.receiver.verdict import Kind, SignatureResult
from prefctl.store.db import connect
from prefctl.store.delivery_history import DeliveryRecord, list_attempts
from prefctl.webhooks.signature import SigningCredentials

__all__ = ["DemoSession"]

HOST = "127.0.0.1"
OUTAGE_STATUS = 503
OUTAGE_FAILURES = 3
# Every wait allows this much real time, plus the rule time it needs divided by the time scale.
WAIT_MARGIN_SECONDS = 15.0
ACT_RULE_SECONDS = 300.0  # an act's backoff (70 s) and response timeouts, with room to spare
HANDSHAKE_RULE_SECONDS = 3 * (RESPONSE_TIMEOUT_SECONDS + 5)  # three attempts, 5 s apart


class DemoSession:
    """The servers, clients and acts of one demo run; use it as a context manager."""

    def __init__(
        self, options: DemoOptions, workdir: Path, report: DemoReport, on_step: OnStep
    ) -> None:
        self.options = options
        self.workdir = workdir
        self.report = report
        self.on_step = on_step
        self.clock = SystemClock()
        self.rng = random.Random(options.seed)
        self.chosen = selections()
        self.expected = expected_events(STORY.changes, self.chosen)
        self.subscription_id = 0
        self.profile: Resource | None = None
        self._exits = contextlib.ExitStack()
        self._emulator: RunningEmulator | None = None
        self._client: ApiClient | None = None
        self._watch: DemoWatch | None = None

    def __enter__(self) -> DemoSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._exits.close()

    # -- the acts ------------------------------------------------------------------------------
    def run(self) -> None:
        self._start()
        if not self._subscribe():
            return
        self._verified_act()
        self._outage_act()
        self._oversized_act()
        self._tally()

    def _start(self) -> None:
        self._step(StepKind.PHASE, "Start a throwaway emulator and a webhook receiver")
        scale = self.options.time_scale
        emulator = start_in_thread(
            EmulatorConfig(
                host=HOST,
                port=0,
                data_dir=self.workdir / "emulator",
                time_scale=scale,
                config_path=None,  # the user's profiles.toml is left alone
                seed=self.options.seed,
            )
        )
        self._exits.callback(emulator.stop)
        self._emulator = emulator
        self.report.emulator_url = emulator.url
        self._step(
            StepKind.OK,
            f"emulator  {emulator.url}  token endpoint, REST API and webhook dispatcher; "
            f"{_clock(scale)}",
        )
        account = emulator.account
        # The verified act's events are answered normally; the outage act's event meets 503s.
        normal = sum(map(len, self.expected[: len(STORY.verified)]))
        plan = FaultPlan(
            steps=(
                FaultStep(count=normal, name="normal"),
                FaultStep(count=OUTAGE_FAILURES, status=OUTAGE_STATUS, name="outage"),
            )
        )
        receiver = start_receiver(
            ReceiverConfig(
                host=HOST,
                port=0,
                credentials=SigningCredentials(
                    account.service_client_id, account.signature_user_id, account.hashkey
                ),
                faults=plan,
                max_body_bytes=BODY_LIMIT_BYTES,
                rng=random.Random(self.rng.getrandbits(64)),
            )
        )
        self._exits.callback(receiver.stop)
        self.report.receiver_url = receiver.webhook_url
        self._step(
            StepKind.OK,
            f"receiver  {receiver.webhook_url}  checks every signature; answers the first "
            f"{_count(normal, 'event')} normally, then {OUTAGE_STATUS} (unavailable) "
            f"{OUTAGE_FAILURES} times, to show retries; refuses bodies over "
            f"{BODY_LIMIT_BYTES // 1024} KiB",
        )
        kept = "kept afterwards" if self.options.keep else "removed afterwards (--keep keeps it)"
        self._step(StepKind.INFO, f"files in {self.workdir}, {kept}")
        conn = connect(emulator.store_path)
        self._exits.callback(conn.close)
        self._watch = DemoWatch(receiver, conn, self.on_step)

    def _subscribe(self) -> bool:
        from prefctl.emulator.admin import set_subscription_alerts

        self._step(StepKind.PHASE, "Subscribe the receiver")
        url = self.report.receiver_url
        subscriptions = SubscriptionsApi(self._api_client(self.emulator))
        created = subscriptions.create(
            {
                "Name": SUBSCRIPTION_NAME,
                "Description": "prefctl demo",
                "Url": url,
                "Subscriptions": self.chosen,
            }
        )
        self.subscription_id = int(created["Id"])
        self._step(
            StepKind.ACTION,
            f'POST /subscriptions  "{SUBSCRIPTION_NAME}" (Id {self.subscription_id}) → {url} '
            f"for {len(EVENT_TYPES)} event types: {', '.join(EVENT_TYPES)}",
        )
        self._step(StepKind.WAIT, "waiting for the validation handshake")
        record = subscriptions.wait_until_provisioned(
            self.subscription_id,
            timeout=self._bound(HANDSHAKE_RULE_SECONDS),
            clock=self.clock,
            sleep=self.watch.sleep,
            poll=POLL_SECONDS,
        )
        self.watch.drain()
        state = record.get("ProvisioningState")
        self.report.subscription = {
            "id": self.subscription_id,
            "name": SUBSCRIPTION_NAME,
            "url": url,
            "event_types": list(EVENT_TYPES),
            "provisioning_state": state,
        }
        if state != "Succeeded":
            reason = failure_reason(record)
            self._check(
                "handshake", False, f"ProvisioningState {state}" + (f": {reason}" if reason else "")
            )
            return False
        self._check(
            "handshake",
            True,
            "the subscription is active (ProvisioningState Succeeded): the receiver answered "
            "the validation handshake with its code",
        )
        alerts = set_subscription_alerts(
            self.watch.conn,
            self.clock,
            str(self.subscription_id),
            enabled=True,
            recipients=[RECIPIENT],
        )
        self.report.subscription["alert_recipients"] = alerts.alert_recipients
        self._step(
            StepKind.ACTION,
            f'alerts on for "{SUBSCRIPTION_NAME}" → {RECIPIENT}: a support-team operation '
            f"('prefctl emulator alerts enable'); emails go to {MBOX_FILE} in the data dir",
        )
        return True

    def _verified_act(self) -> None:
        self._step(StepKind.PHASE, "Change the profile through the REST API: events arrive")
        mark = len(self.watch.verdicts)
        event_ids: list[str] = []
        for change in STORY.verified:
            event_ids += self._apply(change)
        wanted = sum(len(events) for events in self.expected[: len(STORY.verified)])
        records = self._await_final(event_ids, f"waiting for {_count(len(event_ids), 'delivery')}")
        arrived = [v for v in self.watch.verdicts[mark:] if v.kind == Kind.EVENT]
        delivered = [r for r in records if r.state == "delivered"]
        valid = [v for v in arrived if v.signature == SignatureResult.VALID]
        ok = len(event_ids) == wanted and len(delivered) == wanted and len(valid) == len(arrived)
        detail = (
            f"{len(delivered)} of {wanted} events delivered; {len(valid)} of "
            f"{_count(len(arrived), 'request')} with a valid signature; "
            f"{sum(v.duplicate for v in arrived)} flagged duplicate, "
            f"{sum(v.out_of_order for v in arrived)} out of order"
        )
        if len(event_ids) != wanted:
            detail += f" (the changes queued {len(event_ids)} events, {wanted} expected)"
        self._check("verified", ok, detail)

    def _outage_act(self) -> None:
        self._step(StepKind.PHASE, "The receiver fails: the dispatcher retries with backoff")
        self._step(
            StepKind.INFO,
            f"the receiver now answers {OUTAGE_STATUS} (Service Unavailable) to the next "
            f"{_count(OUTAGE_FAILURES, 'delivery')}, as set up in step 1",
        )
        event_ids = self._apply(STORY.outage)
        scale = self.options.time_scale
        records = self._await_final(
            event_ids,
            f"waiting for the retries, about 10 s, 20 s, then 40 s apart ({70 / scale:.2g} s here)",
        )
        failures: list[int | None] = []
        for record in records:
            failures += self._show_attempts(record)
        delivered = bool(records) and all(r.state == "delivered" for r in records)
        waits = ", ".join(f"{g:g} s" for g in self.report.backoff_seconds) or "none"
        self._check(
            "retried",
            delivered and OUTAGE_STATUS in failures,
            f"{_count(len(failures), 'failed attempt')} ({_statuses(failures)}) retried after "
            f"waits of {waits} on the service's clock, "
            + ("then delivered" if delivered else "not delivered"),
        )

    def _show_attempts(self, record: DeliveryRecord) -> list[int | None]:
        """Show the delivery's attempt timeline with the waits between attempts (on the
        service's clock, the emulator's time scale undone);
        returns the statuses of its failed attempts."""
        attempts = list_attempts(self.watch.conn, record.delivery_id)
        scale = self.options.time_scale
        gaps = [round((b.started_at - a.finished_at) * scale, 1) for a, b in pairwise(attempts)]
        self.report.backoff_seconds += gaps
        for attempt, gap in zip(attempts, [*gaps, None], strict=True):
            answer = attempt.status if attempt.status is not None else attempt.error
            then = f"; next attempt {gap:g} s later" if gap is not None else ""
            self._step(
                StepKind.INFO,
                f"{record.event_type} attempt {attempt.attempt_number}: {answer} "
                f"{attempt.outcome}{then}",
            )
        return [a.status for a in attempts if a.outcome != "delivered"]

    def _oversized_act(self) -> None:
        self._step(
            StepKind.PHASE,
            "A 413 is not retried: the event is dead-lettered and an alert email goes out",
        )
        event_ids = self._apply(STORY.oversized)
        records = self._await_final(event_ids, "waiting for the dispatcher")
        dead = [r for r in records if r.state == "dead_lettered"]
        self.report.dead_letters = [DeadLetter.from_record(r).to_dict() for r in dead]
        if not dead:
            states = ", ".join(r.state for r in records) or "nothing queued"
            self._check("dead_lettered", False, f"not dead-lettered: {states}")
            return
        letter = dead[0]
        self._check(
            "dead_lettered",
            len(records) == 1
            and letter.dead_letter_reason == DeadLetterReason.PAYLOAD_TOO_LARGE
            and letter.attempts == 1,
            f"{letter.event_type} is in the dead-letter queue (kept to look at and send again"
            f" later, not retried): {letter.dead_letter_reason} after "
            f"{_count(letter.attempts, 'attempt')} (HTTP {letter.last_status}: the event is "
            f"over the receiver's {BODY_LIMIT_BYTES // 1024} KiB body limit)",
        )
        self._step(StepKind.WAIT, "waiting for the alert email")
        found: list[dict[str, Any]] = []

        def sent() -> bool:
            found[:] = alert_emails(self.emulator.data_dir, self.subscription_id, event_ids)
            return bool(found)

        if not self.watch.poll(sent, self._bound(0)):
            self._check("alerted", False, f"no alert email in {MBOX_FILE} within the wait")
            return
        self.report.alerts = found
        alert = found[0]
        self._check(
            "alerted",
            RECIPIENT in alert["recipients"] and letter.event_id in alert["event_ids"],
            f'{MBOX_FILE} has "{alert["subject"]}" to {", ".join(alert["recipients"])}',
        )

    def _tally(self) -> None:
        records = self.watch.deliveries(self.subscription_id)
        report = self.report
        report.delivered = sum(r.state == "delivered" for r in records)
        report.retries = sum(max(r.attempts - 1, 0) for r in records)
        report.receiver = self.watch.summary()
        final = sum(r.state in FINAL_STATES for r in records)
        self._check(
            "nothing_lost",
            final == len(records) == report.events_for_subscription,
            f"{report.delivered} delivered + {len(report.dead_letters)} dead-lettered = "
            f"{final} of the {report.events_for_subscription} events queued",
        )

    # -- helpers -------------------------------------------------------------------------------
    @property
    def emulator(self) -> RunningEmulator:
        assert self._emulator is not None
        return self._emulator

    @property
    def watch(self) -> DemoWatch:
        assert self._watch is not None
        return self._watch

    @property
    def client(self) -> ApiClient:
        assert self._client is not None
        return self._client

    def _api_client(self, emulator: RunningEmulator) -> ApiClient:
        """A client with its own token cache in the temp dir, never the user's."""
        from prefctl.auth.cache import TokenCache
        from prefctl.auth.credentials import SecretBasic
        from prefctl.auth.httpx_auth import BearerAuth
        from prefctl.auth.provider import TokenProvider
        from prefctl.auth.token_client import TokenClient

        account = emulator.account
        credentials = SecretBasic(account.client_id, account.client_secret)
        provider = TokenProvider(
            auth_url=emulator.auth_url,
            client_id=account.client_id,
            scope=f"{account.service_client_id}/{account.user_id}",
            cache=TokenCache(self.workdir / "cache" / "tokens", self.clock),
            client=lambda: TokenClient(emulator.auth_url, credentials, clock=self.clock),
        )
        token = provider.token()
        minutes = token.expires_in(self.clock.now()) // 60
        self._step(
            StepKind.OK,
            f"access token for scope {provider.scope} from {emulator.token_url} "
            f"(client_secret_basic; {minutes} min left; never shown)",
        )
        client = ApiClient(emulator.api_url, account.service_client_id, auth=BearerAuth(provider))
        self._exits.callback(client.close)
        self._client = client
        return client

    def _apply(self, change: ProfileChange) -> list[str]:
        """Make ``change``, show what it produced; the EventIds queued for the subscription."""
        events = EventsApi(self.client)
        before = set(self._event_ids(events))
        request = change.request(self.profile["ProfileId"] if self.profile else None)
        self.profile = change.send(ProfilesApi(self.client), self.profile)
        produced = [e for e in self._events(events) if str(e.get("EventId")) not in before]
        queued = self.watch.deliveries(
            self.subscription_id, [str(e.get("EventId")) for e in produced]
        )
        self.report.events_produced += len(produced)
        self.report.events_for_subscription += len(queued)
        types = [str(e.get("EventType")) for e in produced]
        self._step(
            StepKind.ACTION,
            f"{request}  {change.title} → {_count(len(produced), 'event')} "
            f"({', '.join(types)}); {len(queued)} for the subscription",
            {"request": request, "event_types": types},
        )
        return [r.event_id for r in queued]

    def _events(self, events: EventsApi) -> list[Resource]:
        if self.profile is None:
            return []
        query = EventQuery(profile_id=int(self.profile["ProfileId"]))
        return list(events.list_all(query, page_size=500))

    def _event_ids(self, events: EventsApi) -> list[str]:
        return [str(e.get("EventId")) for e in self._events(events)]

    def _await_final(self, event_ids: Sequence[str], waiting: str) -> list[DeliveryRecord]:
        self._step(StepKind.WAIT, waiting)
        records, done = self.watch.await_final(
            self.subscription_id, event_ids, self._bound(ACT_RULE_SECONDS)
        )
        if not done:
            pending = sum(r.state not in FINAL_STATES for r in records)
            self._step(StepKind.INFO, f"{pending} of {len(records)} deliveries still not final")
        return records

    def _bound(self, rule_seconds: float) -> float:
        return WAIT_MARGIN_SECONDS + rule_seconds / self.options.time_scale

    def _check(self, name: str, ok: bool, detail: str) -> None:
        self.report.check(name, ok, detail)
        self._step(StepKind.OK if ok else StepKind.FAILED, detail, {"check": name})

    def _step(self, kind: StepKind, text: str, data: dict[str, Any] | None = None) -> None:
        self.on_step(DemoStep(kind, text, data or {}))


def _clock(scale: float) -> str:
    """The time scale in words, the first time the demo speaks of the service's clock."""
    if scale == 1:
        return "its clock runs at the real service's pace"
    return (
        f"the service's clock runs {scale:g}× fast here: a minute on it passes in "
        f"{60 / scale:.2g} s"
    )


def _count(number: int, noun: str) -> str:
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{number} {noun if number == 1 else plural}"


def _statuses(statuses: Sequence[int | None]) -> str:
    counts = Counter("no answer" if s is None else f"HTTP {s}" for s in statuses)
    return ", ".join(f"{n} × {what}" for what, n in counts.items())
