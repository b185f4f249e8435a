"""The dispatcher engine for a replay: in-process on a store, and one-off ``--to URL`` replays.

``engine_running`` runs the real engine (``run.running``) in the background of the replay's event
loop: the same claims, fresh signatures, transport, retries and dead-lettering as everywhere else.

**[decision] A replay ``--to URL``** goes to a URL that is no subscription of the store. It runs on a
throwaway store in a private temporary folder, deleted afterwards:

- one account, signing as the events' account of the source store (Hashkey, signature user id,
  mTLS identity and delivery settings copied), or, when the store has no such account (a capture
  from elsewhere), with the profile's webhook credentials;
- one temporary subscription to the URL, provisioned without a handshake;
- the events with their original EventIds, queued now.

The engine delivers them with the account's delivery rules (``max_attempts`` overrides
MaxDeliveryAttempts) until each is delivered or dead-lettered, or the timeout passes. Nothing is
written to the source store, no alert is sent, and the notifications carry the temporary
subscription's id as SubscriptionId (1), since the URL belongs to no subscription.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from prefctl.dispatcher.replay.model import ReplayConfig, ReplayOutcome, ReplaySummary
from prefctl.dispatcher.replay.queue import ReplayItem, select
from prefctl.dispatcher.replay.wait import engine_running, wait_final
from prefctl.errors import UsageError
from prefctl.store import Store, accounts, dispatcher_state, settings, subscriptions
from prefctl.store.accounts import Account
from prefctl.store.db import ensure_private_store, open_store, transaction
from prefctl.store.deliveries import enqueue
from prefctl.store.events import insert_events
from prefctl.store.timestamps import epoch

__all__ = ["TEMPORARY_SUBSCRIPTION_NAME", "replay_to_url"]

TEMPORARY_SUBSCRIPTION_NAME = "prefctl replay"


async def replay_to_url(config: ReplayConfig, started: float) -> ReplaySummary:
    """Deliver the selected events to ``config.target.url`` (see the module docstring)."""
    url = config.target.url
    assert url is not None
    with _open_source(config) as source:
        selection = select(source, config.source)
        items, duplicates = _unique(selection.items)
        signer = _signer(source, items, config)
        delivery_settings = _settings(source, signer, config.max_attempts)
        tls = None if source is None else dispatcher_state.get_tls(source, signer.service_client_id)
    with tempfile.TemporaryDirectory(prefix="prefctl-replay-") as folder:
        # 0600 like the emulator's store: it holds the account's Hashkey and the events.
        scratch = ensure_private_store(Path(folder))
        now = epoch(config.clock.now())
        with open_store(scratch) as conn:
            with transaction(conn):
                accounts.add_account(conn, signer)
                settings.put_settings(conn, signer.service_client_id, delivery_settings)
                if tls is not None:
                    dispatcher_state.put_tls(conn, tls)
                ids = _queue(conn, signer.service_client_id, url, items, now)
            records = []
            if ids:
                async with engine_running(scratch, config, plugins=False):
                    records = await wait_final(conn, ids, config, started)
    outcomes = [
        replace(ReplayOutcome.of(record), subscription_id=None, delivery_id=None)
        for record in records
    ]
    return ReplaySummary(
        source=config.source.kind,
        target=config.target,
        dispatcher="in_process",
        waited=True,
        skipped=selection.skipped,
        duplicates=selection.duplicates + duplicates,
        elapsed_seconds=config.clock.monotonic() - started,
        outcomes=outcomes,
    )


def _open_source(
    config: ReplayConfig,
) -> contextlib.AbstractContextManager[Store | None]:
    if config.store_path is None:
        return contextlib.nullcontext()
    from prefctl.dispatcher.operations import open_existing_store

    return open_existing_store(config.store_path)


def _unique(items: Sequence[ReplayItem]) -> tuple[list[ReplayItem], int]:
    """One item per EventId (a dead letter of two subscriptions is one event to the URL)."""
    unique = {item.event.event_id: item for item in reversed(items)}
    kept = [item for item in items if unique.get(item.event.event_id) is item]
    return kept, len(items) - len(kept)


def _signer(source: Store | None, items: Sequence[ReplayItem], config: ReplayConfig) -> Account:
    """The account the replay signs as: the events' account in the store, else the profile's
    webhook credentials."""
    if source is not None:
        client_ids = [item.event.client_id for item in items if item.event.client_id]
        for client_id in dict.fromkeys(client_ids):
            found = accounts.get_account(source, client_id)
            if found is not None:
                return found
        if not client_ids:
            stored = accounts.list_accounts(source)
            if len(stored) == 1:
                return stored[0]
    if config.credentials is None:
        raise UsageError(
            "no signing credentials for a replay --to URL",
            hint="configure the profile's [webhooks] section, or replay events of the store",
        )
    creds = config.credentials()
    return Account(
        creds.client_id, hashkey=creds.hashkey, signature_user_id=creds.signature_user_id
    )


def _settings(source: Store | None, signer: Account, max_attempts: int | None) -> dict[str, int]:
    values = (
        settings.default_settings()
        if source is None
        else settings.get_settings(source, signer.service_client_id)
    )
    if max_attempts is not None:
        values["MaxDeliveryAttempts"] = max_attempts
    return values


def _queue(
    conn: Store, account: str, url: str, items: Sequence[ReplayItem], now: float
) -> list[int]:
    """The temporary subscription, the events and one delivery each; returns the delivery ids."""
    selections = [
        {"Entity": entity, "EventType": event_type}
        for entity, event_type in dict.fromkeys((i.event.entity, i.event.event_type) for i in items)
    ]
    body = {
        "Name": TEMPORARY_SUBSCRIPTION_NAME,
        "Url": url,
        "State": "Active",
        "Subscriptions": selections,
    }
    target = subscriptions.create_subscription(conn, account, body, actor="prefctl", now=now)
    subscriptions.set_provisioning_state(conn, target.id, "Succeeded", now=now)
    rowids = insert_events(conn, account, [item.event.new_event() for item in items])
    return [enqueue(conn, rowid, target.id, now=now) for rowid in rowids]
