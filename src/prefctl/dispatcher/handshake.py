"""Subscription provisioning: the validation handshake of docs/subscriptions.md, run in the background.

When a subscription is created or its Url changes, the service POSTs a handshake message (built by
``webhooks.handshake.new_handshake``, no signature header) to the Url and judges the reply with
``webhooks.handshake.classify_reply`` only::

    Creating / Updating ── 200 with the right code ─────────────▶ Succeeded
        │               ── 200 without a code ──────────────────▶ AwaitingManualAction
        │                                     GET validationUrl within 5 min ─▶ Succeeded
        │                                     5 min without a GET ────────────▶ Failed
        └─ no answer in 30 s, connection error, not 200 (202 too), wrong code:
           retry after 5 s; the 3rd failed attempt ─────────────▶ Failed

``next_step`` is that table as a pure function; the transitions below it are one store
transaction each. ``HandshakeRunner`` drives them: one asyncio task per subscription being
provisioned, store work off the event loop, durations from ``HandshakeTimings`` (the emulator
scales them by ``--time-scale``) and waits on the injected ``Clock``. The store is the source of
truth: ``notify`` after a create, a Url change or a delete makes the runner look again, and on
start it resumes every subscription left in Creating or Updating (with a fresh handshake) and
keeps waiting out AwaitingManualAction windows. A run writes only while the validation token it
issued is still the subscription's, so a stale run (Url changed again, subscription deleted or
validated meanwhile) ends without a trace.

    >>> runner = HandshakeRunner(connect, clock=clock, rng=random.SystemRandom(),
    ...                          api_url="http://127.0.0.1:8750/api/v1")
    >>> async with runner.running():
    ...     runner.notify("DEMO_CORP", 12)
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

from prefctl.clock import Clock
from prefctl.dispatcher.policy import RESPONSE_TIMEOUT_SECONDS, DeadLetterReason
from prefctl.store import Store, accounts, deliveries
from prefctl.store import subscriptions as store
from prefctl.store.db import transaction
from prefctl.store.subscriptions import ProvisioningState, SubscriptionRecord
from prefctl.store.timestamps import epoch
from prefctl.webhooks.handshake import Handshake, ReplyOutcome, classify_reply, new_handshake

if TYPE_CHECKING:
    import httpx

__all__ = [
    "MANUAL_EXPIRED",
    "MAX_ATTEMPTS",
    "MAX_REPLY_BYTES",
    "PENDING",
    "RETRY_DELAY_SECONDS",
    "VALIDATION_WINDOW_SECONDS",
    "AttemptReply",
    "HandshakeRunner",
    "HandshakeTimings",
    "ManualValidation",
    "Step",
    "confirm_validation",
    "next_step",
]

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
RETRY_DELAY_SECONDS = 5.0
VALIDATION_WINDOW_SECONDS = 5 * 60.0
MAX_REPLY_BYTES = 64 * 1024  # a reply is a short JSON object; the rest is not read
PENDING: tuple[ProvisioningState, ...] = ("Creating", "Updating", "AwaitingManualAction")
MANUAL_EXPIRED = (
    "manual validation not done: validationUrl was not requested within the 5-minute window;"
    " create the subscription again"
)

T = TypeVar("T")


@dataclass(frozen=True)
class HandshakeTimings:
    """The handshake's durations in seconds; ``scaled`` applies the emulator's time scale.

    ``rule_response_timeout`` is the response timeout in rule time, the one messages name ("no
    answer within 30 s" under ``--time-scale 60`` too, as every duration users read); None when
    the durations are not scaled: ``response_timeout`` is then what the rule says.
    """

    response_timeout: float = RESPONSE_TIMEOUT_SECONDS
    retry_delay: float = RETRY_DELAY_SECONDS
    validation_window: float = VALIDATION_WINDOW_SECONDS
    max_attempts: int = MAX_ATTEMPTS
    rule_response_timeout: float | None = None

    @property
    def shown_response_timeout(self) -> float:
        """The response timeout as messages name it: in rule time."""
        if self.rule_response_timeout is None:
            return self.response_timeout
        return self.rule_response_timeout

    @classmethod
    def scaled(cls, scale: Callable[[float], float]) -> HandshakeTimings:
        """Every duration passed through ``scale`` (``EmulatorContext.scaled``)."""
        return cls(
            response_timeout=scale(RESPONSE_TIMEOUT_SECONDS),
            retry_delay=scale(RETRY_DELAY_SECONDS),
            validation_window=scale(VALIDATION_WINDOW_SECONDS),
            rule_response_timeout=RESPONSE_TIMEOUT_SECONDS,
        )


# -- the state machine (pure) ----------------------------------------------------------------------
@dataclass(frozen=True)
class AttemptReply:
    """How one POST went: the verdict on an HTTP answer, or None when none came in time."""

    outcome: ReplyOutcome | None
    message: str


@dataclass(frozen=True)
class Step:
    """What follows an attempt: a new provisioning state, or None to retry after the delay.
    ``error`` is what the subscription shows as its handshake error (None: no error)."""

    state: ProvisioningState | None
    error: str | None


def next_step(reply: AttemptReply, attempts_made: int, max_attempts: int = MAX_ATTEMPTS) -> Step:
    """docs/subscriptions.md after the ``attempts_made``-th attempt (which counts ``reply``)."""
    if reply.outcome is ReplyOutcome.VALIDATED:
        return Step("Succeeded", None)
    if reply.outcome is ReplyOutcome.MANUAL:
        return Step("AwaitingManualAction", None)
    if attempts_made < max_attempts:
        return Step(None, f"attempt {attempts_made} of {max_attempts}: {reply.message}")
    return Step("Failed", f"{max_attempts} handshake attempts failed; the last {reply.message}")


# -- transitions (one store transaction each) ------------------------------------------------------
class ManualValidation(StrEnum):
    """What a GET of a validationUrl did."""

    SUCCEEDED = "succeeded"
    EXPIRED = "expired"  # the 5 minutes are over (the subscription is Failed, or still retrying)
    UNKNOWN = "unknown"  # no such token: never issued, already used, or its handshake ended


def confirm_validation(
    conn: Store, token: str, *, now: float
) -> tuple[ManualValidation, SubscriptionRecord | None]:
    """``GET {api_url}/validation/{token}``: Succeeded within the window (also while the POST is
    still under way); a GET after it fails an AwaitingManualAction subscription at once."""
    with transaction(conn):
        record = store.find_by_validation_token(conn, token)
        if record is None:
            return ManualValidation.UNKNOWN, None
        if record.provisioning_state == "Failed" and record.handshake.last_error == MANUAL_EXPIRED:
            return ManualValidation.EXPIRED, record  # its window ended unused (link kept: 410)
        if record.provisioning_state not in PENDING:
            return ManualValidation.UNKNOWN, None
        expires_at = record.handshake.validation_expires_at
        if expires_at is None or now >= expires_at:
            if record.provisioning_state == "AwaitingManualAction":
                _fail(conn, record.id, now=now, error=MANUAL_EXPIRED, keep_validation_link=True)
            return ManualValidation.EXPIRED, record
        store.set_provisioning_state(conn, record.id, "Succeeded", now=now)
        return ManualValidation.SUCCEEDED, _reload(conn, record)


@dataclass(frozen=True)
class _Attempting:
    url: str
    handshake: Handshake


@dataclass(frozen=True)
class _Waiting:
    token: str
    expires_at: float


def _begin(
    conn: Store,
    account: str,
    subscription_id: int,
    *,
    rng: random.Random,
    api_url: str,
    clock: Clock,
    window: float,
) -> _Attempting | _Waiting | None:
    """Start a handshake run for a Creating/Updating subscription, or find the manual window an
    AwaitingManualAction one waits out; None when there is nothing to do."""
    with transaction(conn):
        record = store.get_subscription(conn, account, subscription_id)
        if record is None:
            return None
        handshake = record.handshake
        if record.provisioning_state == "AwaitingManualAction":
            if handshake.validation_token is None or handshake.validation_expires_at is None:
                return None
            return _Waiting(handshake.validation_token, handshake.validation_expires_at)
        if record.provisioning_state not in ("Creating", "Updating"):
            return None
        now = clock.now()
        fresh = new_handshake(
            rng, subscription_id=subscription_id, client_id=account, api_url=api_url, now=now
        )
        store.start_validation(
            conn,
            subscription_id,
            validation_code=fresh.code,
            validation_token=fresh.token,
            expires_at=epoch(now) + window,
        )
        return _Attempting(record.url, fresh)


def _record(
    conn: Store,
    account: str,
    subscription_id: int,
    handshake: Handshake,
    step: Step,
    *,
    now: float,
    window: float,
) -> float | None:
    """Store one attempt's outcome if the run is still current. Returns when the manual window
    ends (AwaitingManualAction), 0 for other applied steps, None for a stale run."""
    with transaction(conn):
        record = store.get_subscription(conn, account, subscription_id)
        if (
            record is None
            or record.handshake.validation_token != handshake.token
            or record.provisioning_state not in ("Creating", "Updating")
        ):
            return None
        if step.state == "AwaitingManualAction":
            # The 5 minutes start with the reply that asked for a manual validation.
            expires_at = now + window
            store.start_validation(
                conn,
                subscription_id,
                validation_code=handshake.code,
                validation_token=handshake.token,
                expires_at=expires_at,
            )
            store.set_provisioning_state(conn, subscription_id, "AwaitingManualAction", now=now)
            return expires_at
        store.record_handshake_attempt(conn, subscription_id, error=step.error)
        if step.state == "Failed":
            _fail(conn, subscription_id, now=now, error=step.error)
        elif step.state is not None:
            store.set_provisioning_state(
                conn, subscription_id, step.state, now=now, error=step.error
            )
        return 0.0


def _expire(conn: Store, account: str, subscription_id: int, token: str, *, now: float) -> bool:
    """Fail an AwaitingManualAction subscription whose window ``token`` ended unused."""
    with transaction(conn):
        record = store.get_subscription(conn, account, subscription_id)
        if (
            record is None
            or record.provisioning_state != "AwaitingManualAction"
            or record.handshake.validation_token != token
        ):
            return False
        _fail(conn, subscription_id, now=now, error=MANUAL_EXPIRED, keep_validation_link=True)
        return True


def _fail(
    conn: Store,
    subscription_id: int,
    *,
    now: float,
    error: str | None,
    keep_validation_link: bool = False,
) -> None:
    """The handshake failed: the subscription is Failed, and the events waiting for it (held
    through a Url change, or queued before it) are dead-lettered, never silently lost."""
    store.set_provisioning_state(
        conn,
        subscription_id,
        "Failed",
        now=now,
        error=error,
        keep_validation_link=keep_validation_link,
    )
    deliveries.dead_letter_pending(
        conn, subscription_id, reason=DeadLetterReason.VALIDATION_FAILED, now=now
    )


def _pending(conn: Store) -> list[tuple[str, int]]:
    """(account, id) of every subscription whose provisioning has not ended."""
    return [
        (account.service_client_id, record.id)
        for account in accounts.list_accounts(conn)
        for record in store.list_subscriptions(conn, account.service_client_id)
        if record.provisioning_state in PENDING
    ]


def _reload(conn: Store, record: SubscriptionRecord) -> SubscriptionRecord | None:
    return store.get_subscription(conn, record.service_client_id, record.id)


# -- the runner ------------------------------------------------------------------------------------
class HandshakeRunner:
    """Provisions subscriptions in the background, one asyncio task per subscription.

    ``connect`` returns a store connection for the calling thread (``EmulatorContext.connection``);
    store work runs in worker threads so the event loop keeps serving requests. ``client`` is the
    HTTP seam: by default an ``httpx.AsyncClient`` with TLS verification on and redirects not
    followed is made for the runner's lifetime (pass one configured with a client certificate for
    mTLS). ``rng`` draws codes and tokens: the token alone validates a subscription, so production
    passes ``random.SystemRandom()``.
    """

    def __init__(
        self,
        connect: Callable[[], Store],
        *,
        clock: Clock,
        rng: random.Random,
        api_url: str,
        timings: HandshakeTimings | None = None,
        client: httpx.AsyncClient | None = None,
        user_agent: str = "prefctl",
    ) -> None:
        self._connect = connect
        self._clock = clock
        self._rng = rng
        self._api_url = api_url
        self.timings = timings or HandshakeTimings()
        self._client = client
        self._user_agent = user_agent
        # Clients presenting an account's mTLS certificate, by account, with the settings' stamp.
        self._tls_clients: dict[str, tuple[float, httpx.AsyncClient]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve while the block runs: resume unfinished provisioning, then act on ``notify``."""
        import httpx

        own_client = self._client is None
        # No proxy from the environment, as for the deliveries (dispatcher.curl): the service's
        # own calls to subscribers.
        client = self._client or httpx.AsyncClient(
            verify=True,
            follow_redirects=False,
            timeout=self.timings.response_timeout,
            trust_env=False,
        )
        self._client = client
        self._loop = asyncio.get_running_loop()
        try:
            for account, subscription_id in await self._in_store(_pending):
                self._start(account, subscription_id)
            yield
        finally:
            self._loop = None
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.clear()
            for _stamp, tls_client in self._tls_clients.values():
                await tls_client.aclose()
            self._tls_clients.clear()
            if own_client:
                await client.aclose()
                self._client = None

    def notify(self, account: str, subscription_id: int) -> None:
        """The subscription was created, its Url changed, or it was deleted: drop any run under
        way and provision it if it needs it. Safe from any thread; while the runner is not
        running this does nothing (the next start resumes from the store)."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._start, account, subscription_id)
        except RuntimeError:
            pass  # the loop closed just now: the server is stopping, and the store has the work

    def _start(self, account: str, subscription_id: int) -> None:
        if self._loop is None:
            return
        previous = self._tasks.pop(subscription_id, None)
        if previous is not None:
            previous.cancel()
        task = self._loop.create_task(
            self._provision(account, subscription_id), name=f"prefctl-handshake-{subscription_id}"
        )
        self._tasks[subscription_id] = task
        task.add_done_callback(lambda done: self._finished(subscription_id, done))

    def _finished(self, subscription_id: int, task: asyncio.Task[None]) -> None:
        if self._tasks.get(subscription_id) is task:
            del self._tasks[subscription_id]
        if not task.cancelled() and task.exception() is not None:
            # The subscription stays as it was; the next start of the runner resumes it.
            log.error(
                "handshake of subscription %s stopped", subscription_id, exc_info=task.exception()
            )

    async def _provision(self, account: str, subscription_id: int) -> None:
        timings = self.timings
        begun = await self._in_store(
            _begin,
            account,
            subscription_id,
            rng=self._rng,
            api_url=self._api_url,
            clock=self._clock,
            window=timings.validation_window,
        )
        if isinstance(begun, _Waiting):
            await self._await_manual(account, subscription_id, begun.token, begun.expires_at)
            return
        if begun is None:
            return
        for attempt in range(1, timings.max_attempts + 1):
            reply = await self._post(account, begun.url, begun.handshake)
            step = next_step(reply, attempt, timings.max_attempts)
            log.info(
                "subscription %s: handshake attempt %d: %s", subscription_id, attempt, reply.message
            )
            applied = await self._in_store(
                _record,
                account,
                subscription_id,
                begun.handshake,
                step,
                now=epoch(self._clock.now()),
                window=timings.validation_window,
            )
            if applied is None:
                return  # superseded: another run, a validation GET or a delete got there first
            if step.state == "AwaitingManualAction":
                await self._await_manual(account, subscription_id, begun.handshake.token, applied)
                return
            if step.state is not None:
                return
            await self._clock.sleep(timings.retry_delay)

    async def _await_manual(
        self, account: str, subscription_id: int, token: str, expires_at: float
    ) -> None:
        while (remaining := expires_at - epoch(self._clock.now())) > 0:
            await self._clock.sleep(remaining)
        if await self._in_store(
            _expire, account, subscription_id, token, now=epoch(self._clock.now())
        ):
            log.info("subscription %s: manual validation window ended unused", subscription_id)

    async def _client_for(self, account: str) -> httpx.AsyncClient:
        """The client for ``account``: one presenting its mTLS certificate when the support team
        installed one (spec "mTLS for webhooks": including the handshake), else the shared one."""
        import httpx

        from prefctl.dispatcher.tls import ssl_context
        from prefctl.store.dispatcher_state import get_tls

        assert self._client is not None, "HandshakeRunner.running() is not active"
        row = await self._in_store(get_tls, account)
        if row is None:
            return self._client
        cached = self._tls_clients.get(account)
        if cached is not None and cached[0] == row.updated_at:
            return cached[1]
        client = httpx.AsyncClient(
            verify=ssl_context(row),
            follow_redirects=False,
            timeout=self.timings.response_timeout,
            trust_env=False,
        )
        self._tls_clients[account] = (row.updated_at, client)
        if cached is not None:
            await cached[1].aclose()
        return client

    async def _post(self, account: str, url: str, handshake: Handshake) -> AttemptReply:
        """POST the handshake once; wait at most the response timeout for the whole answer."""
        import httpx

        timeout = self.timings.response_timeout
        try:
            client = await self._client_for(account)
            async with asyncio.timeout(timeout):
                status, body = await self._exchange(client, url, handshake)
        except (TimeoutError, httpx.TimeoutException):
            shown = self.timings.shown_response_timeout
            return AttemptReply(None, f"no answer within {shown:g} s")
        except ssl.SSLError as exc:  # the installed mTLS certificate or CA cannot be loaded
            return AttemptReply(None, f"the account's TLS settings cannot be used ({exc})")
        except httpx.InvalidURL as exc:  # not an HTTPError: the Url cannot even be sent
            return AttemptReply(None, f"the Url cannot be requested ({exc})")
        except httpx.TransportError as exc:
            from prefctl.auth.token_client import cannot_reach

            return AttemptReply(None, f"could not connect: {cannot_reach(url, exc)}")
        except httpx.HTTPError as exc:  # the answer came but cannot be read (a broken gzip)
            return AttemptReply(None, f"answered in a form that cannot be read ({exc})")
        verdict = classify_reply(status, body, handshake.code)
        return AttemptReply(verdict.outcome, verdict.message)

    async def _exchange(
        self, client: httpx.AsyncClient, url: str, handshake: Handshake
    ) -> tuple[int, bytes]:
        import orjson

        headers = {"Content-Type": "application/json", "User-Agent": self._user_agent}
        request = client.build_request(
            "POST", url, content=orjson.dumps(handshake.message), headers=headers
        )
        response = await client.send(request, stream=True)
        try:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) >= MAX_REPLY_BYTES:
                    break
            return response.status_code, bytes(body[:MAX_REPLY_BYTES])
        finally:
            await response.aclose()

    async def _in_store(self, operation: Callable[..., T], *args: object, **kwargs: object) -> T:
        def run() -> T:
            return operation(self._connect(), *args, **kwargs)

        return await asyncio.to_thread(run)
