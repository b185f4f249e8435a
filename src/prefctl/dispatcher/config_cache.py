"""The accounts, webhook settings and TLS identities the engine needs at every cycle.

The engine must see a ``settings set`` (or a new account, a new Hashkey, ``dispatcher tls set``) at
its next cycle, from whatever process wrote it. Reading the three tables each cycle costs more than
a busy cycle's own work in the simulator, so ``ConfigCache`` reads one counter per cycle
(``dispatcher_state.config_version``, bumped by triggers on every change to those tables) and the
rows only after it moved. A store that nothing else can change (``static``: the simulator's
private in-memory one) is read once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prefctl.store import Store, dispatcher_state
from prefctl.store.accounts import Account, get_account, list_accounts
from prefctl.store.dispatcher_state import TlsRow
from prefctl.store.settings import get_settings

__all__ = ["ConfigCache", "DeliverySettings"]


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    """An account's delivery settings as the engine uses them, made once where they are read
    (the store keeps them by the spec's names: ``MaxConcurrentRequests``, ``Duration``, …)."""

    max_concurrent_requests: int
    duration_seconds: int
    max_delivery_attempts: int
    event_ttl_minutes: int
    allow_http_webhooks: bool = False  # the emulator's switch: plain http off loopback allowed

    @classmethod
    def of(cls, stored: Mapping[str, int]) -> DeliverySettings:
        return cls(
            max_concurrent_requests=stored["MaxConcurrentRequests"],
            duration_seconds=stored["Duration"],
            max_delivery_attempts=stored["MaxDeliveryAttempts"],
            event_ttl_minutes=stored["EventTimeToLiveMinutes"],
            allow_http_webhooks=bool(stored.get("AllowHttpWebhooks", False)),
        )


class ConfigCache:
    """Store reads of one engine (of every account, or of ``account``), valid for a cycle.

    ``refresh`` at the start of each cycle drops what changed in the store since the last one; the
    settings returned are frozen.
    """

    def __init__(self, conn: Store, account: str | None = None, *, static: bool = False) -> None:
        self.conn = conn
        self.account = account
        self.static = static
        self._version: int | None = None
        self._accounts: list[Account] | None = None
        self._settings: dict[str, DeliverySettings] = {}
        self._tls: dict[str, TlsRow | None] = {}

    def refresh(self) -> None:
        if self.static and self._version is not None:
            return
        version = dispatcher_state.config_version(self.conn)
        if version != self._version:
            self._version = version
            self._accounts = None
            self._settings.clear()
            self._tls.clear()

    def accounts(self) -> list[Account]:
        """The accounts to deliver for: every account, or the engine's one if it exists."""
        if self._accounts is None:
            if self.account is None:
                self._accounts = list_accounts(self.conn)
            else:
                found = get_account(self.conn, self.account)
                self._accounts = [] if found is None else [found]
        return self._accounts

    def settings(self, account: str) -> DeliverySettings:
        found = self._settings.get(account)
        if found is None:
            found = self._settings[account] = DeliverySettings.of(get_settings(self.conn, account))
        return found

    def tls(self, account: str) -> TlsRow | None:
        if account not in self._tls:
            self._tls[account] = dispatcher_state.get_tls(self.conn, account)
        return self._tls[account]
