"""Spec "mTLS for webhooks": mutual TLS holds for the validation handshake too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from prefctl import certs
from prefctl.dispatcher import tls
from prefctl.emulator.serve import RunningEmulator
from prefctl.receiver.serve import ReceiverConfig, start_in_thread
from prefctl.store.db import connect
from tests.emulator.subscriptions.conftest import api_client, body, wait_for_state


@pytest.fixture(scope="module")
def emulator_time_scale() -> float:
    """--time-scale 10: the refused handshake's three attempts are 0.5 s apart, not 5 s (each
    still has 3 s to answer, ample for a TLS handshake on loopback)."""
    return 10.0


@pytest.fixture
def api(emulator: RunningEmulator) -> Iterator[httpx.Client]:
    with api_client(emulator) as client:
        yield client


def test_handshake_to_an_mtls_endpoint_succeeds_only_with_the_installed_client_certificate(
    emulator: RunningEmulator, api: httpx.Client, tmp_path: Path
) -> None:
    pki = tmp_path / "pki"
    ca = certs.init_ca(pki)
    server = certs.issue_server(pki, "127.0.0.1")
    client = certs.issue_client(pki, "service")
    config = ReceiverConfig(
        port=0,
        verify=False,
        tls_cert=server.certificate,
        tls_key=server.private_key,
        client_ca=ca.certificate,
    )
    account = emulator.account.service_client_id
    conn = connect(emulator.store)
    try:
        with start_in_thread(config) as receiver:
            # Trusting the endpoint's CA is not enough: it asks for a client certificate.
            tls.install(conn, account, cert=None, key=None, ca=ca.certificate, now=time.time())
            refused = api.post("/subscriptions", json=body(receiver.webhook_url, name="no cert"))
            failed = wait_for_state(api, refused.json()["Id"], "Failed", timeout=30)
            assert failed["ProvisioningError"]

            tls.install(
                conn,
                account,
                cert=client.certificate,
                key=client.private_key,
                ca=ca.certificate,
                now=time.time(),
            )
            created = api.post(
                "/subscriptions", json=body(receiver.webhook_url + "?cert=1", name="mtls")
            )
            assert (
                wait_for_state(api, created.json()["Id"], "Succeeded").get("ProvisioningError")
                is None
            )
    finally:
        tls.clear(conn, account)
        conn.close()
