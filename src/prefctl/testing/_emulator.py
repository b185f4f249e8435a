"""``prefctl_emulator``: a throwaway emulator for a pytest session (see ``prefctl.testing``).

``start_emulator`` runs the emulator in-process (``emulator.serve.start_in_thread``) on a free
127.0.0.1 port in a temporary data dir, with its own token cache beside it: nothing of the user's
own configuration (profiles.toml, data dir, token cache) is read or written. ``PrefctlEmulator``
is the fixture's value: the account's URLs and credentials, a token, an authenticated
``httpx.Client``, and the few operations an integration test needs, each built on the REST client
that ``prefctl`` commands use.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prefctl.api.client import ApiClient, Resource
from prefctl.auth.cache import TokenCache
from prefctl.auth.credentials import SecretBasic
from prefctl.auth.httpx_auth import BearerAuth
from prefctl.auth.provider import TokenProvider
from prefctl.auth.token_client import TokenClient
from prefctl.clock import SystemClock
from prefctl.dispatcher.policy import RESPONSE_TIMEOUT_SECONDS
from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread

if TYPE_CHECKING:
    import httpx

__all__ = ["EmulatorOptions", "PrefctlEmulator", "start_emulator"]

HOST = "127.0.0.1"
# A wait allows this much real time plus the rule time it needs divided by the time scale.
WAIT_MARGIN_SECONDS = 15.0
# Three handshake attempts, each up to the 30 s response timeout, 5 s apart.
HANDSHAKE_RULE_SECONDS = 3 * (RESPONSE_TIMEOUT_SECONDS + 5)


@dataclass(frozen=True)
class EmulatorOptions:
    """How to run the session's emulator: from the command line and ``@pytest.mark.prefctl``."""

    time_scale: float = 1.0
    port: int = 0
    data_dir: Path | None = None


class PrefctlEmulator:
    """A running throwaway emulator and its account (the value of ``prefctl_emulator``).

    ``api_url`` is the account's REST base (``{api_url}/{ServiceClientId}``); ``client`` an
    ``httpx.Client`` on it that carries a bearer token, renewed as needed.
    """

    def __init__(self, running: RunningEmulator, workdir: Path, time_scale: float) -> None:
        self._running = running
        self.time_scale = time_scale
        account = running.account
        self.url = running.url
        self.data_dir = running.data_dir
        self.token_url = running.token_url
        self.service_client_id = account.service_client_id
        self.client_id = account.client_id
        self.client_secret = account.client_secret
        self.hashkey = account.hashkey
        self.signature_user_id = account.signature_user_id
        self._clock = SystemClock()
        self._rng = random.Random()
        credentials = SecretBasic(account.client_id, account.client_secret)
        self._tokens = TokenProvider(
            auth_url=running.auth_url,
            client_id=account.client_id,
            scope=f"{account.service_client_id}/{account.user_id}",
            cache=TokenCache(workdir / "cache" / "tokens", self._clock),
            client=lambda: TokenClient(running.auth_url, credentials, clock=self._clock),
        )
        self._api = ApiClient(
            running.api_url, account.service_client_id, auth=BearerAuth(self._tokens)
        )
        self.api_url = self._api.base_url
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:
        return f"<PrefctlEmulator {self.url} account {self.service_client_id}>"

    def token(self) -> str:
        """A valid access token for the account's admin user (at least a minute left)."""
        return self._tokens.token().access_token

    @property
    def client(self) -> httpx.Client:
        """An ``httpx.Client`` with ``base_url=api_url`` and the bearer token."""
        if self._client is None:
            import httpx

            self._client = httpx.Client(
                base_url=self.api_url, auth=BearerAuth(self._tokens), timeout=30.0
            )
        return self._client

    def subscribe(
        self, url: str, event_types: Iterable[str] | str, *, name: str | None = None
    ) -> int:
        """Subscribe ``url`` to ``event_types`` (``TYPE`` or ``TYPE:FILTER,…``) and wait until
        its handshake succeeded; returns the subscription's Id. Raises ``PrefctlError`` with the
        service's reason when provisioning ends Failed (or does not end in time)."""
        from prefctl.api.subscriptions import SubscriptionsApi, provisioning_error, selection

        types = [event_types] if isinstance(event_types, str) else list(event_types)
        subscriptions = SubscriptionsApi(self._api)
        created = subscriptions.create(
            {
                "Name": name or f"pytest {url}",
                "Url": url,
                "Subscriptions": [selection(spec) for spec in types],
            }
        )
        subscription_id = int(created["Id"])
        timeout = WAIT_MARGIN_SECONDS + HANDSHAKE_RULE_SECONDS / self.time_scale
        record = subscriptions.wait_until_provisioned(
            subscription_id, timeout=timeout, clock=self._clock, poll=0.05
        )
        error = provisioning_error(record, timeout)
        if error is not None:
            raise error
        return subscription_id

    def unsubscribe_url(self, url: str) -> None:
        """Delete every subscription whose Url is ``url`` (a receiver that has stopped)."""
        from prefctl.api.subscriptions import SubscriptionsApi

        subscriptions = SubscriptionsApi(self._api)
        for record in subscriptions.list():
            if record.get("Url") == url:
                subscriptions.delete(int(record["Id"]))

    def trigger(self, event_type: str, *, profile_id: int | None = None) -> list[Resource]:
        """Make the change that produces ``event_type`` (what ``prefctl events trigger`` does,
        on a new throwaway profile unless ``profile_id``); the event envelopes it produced."""
        from prefctl.api.events import EventQuery, EventsApi
        from prefctl.api.trigger import trigger

        result = trigger(self._api, event_type, profile_id=profile_id, rng=self._rng)
        query = EventQuery(profile_id=result.profile_id, event_type=result.event_type)
        wanted = set(result.event_ids)
        return [e for e in EventsApi(self._api).list_all(query) if e.get("EventId") in wanted]

    def settings(self, **values: int) -> Resource:
        """Set account settings by their names (``MaxDeliveryAttempts=3``, ``Duration=1``);
        ranges are checked first. Returns the settings as they are now."""
        from prefctl.api.settings import SettingsApi, setting_name

        return SettingsApi(self._api).update({setting_name(k): v for k, v in values.items()})

    def close(self) -> None:
        """Stop the emulator and close the clients."""
        if self._client is not None:
            self._client.close()
        self._api.close()
        self._running.stop()


def start_emulator(options: EmulatorOptions, workdir: Path) -> PrefctlEmulator:
    """Start the session's emulator; a ``PrefctlError`` (one line) when it cannot start."""
    running = start_in_thread(
        EmulatorConfig(
            host=HOST,
            port=options.port,
            data_dir=options.data_dir or workdir / "data",
            time_scale=options.time_scale,
            config_path=None,  # the user's profiles.toml is left alone
        )
    )
    try:
        return PrefctlEmulator(running, workdir, options.time_scale)
    except BaseException:
        running.stop()
        raise
