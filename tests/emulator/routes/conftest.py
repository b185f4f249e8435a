"""The ``api`` fixture: an admin client on the module's emulator (see ``_api.Api``)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from prefctl.emulator.serve import RunningEmulator
from tests.emulator.routes._api import Api, issue_token


@pytest.fixture
def api(emulator: RunningEmulator) -> Iterator[Api]:
    base = f"{emulator.api_url}/{emulator.account.service_client_id}"
    with httpx.Client(base_url=base) as client:
        client.headers["Authorization"] = f"Bearer {issue_token(emulator, http=client)}"
        yield Api(emulator, client)


@pytest.fixture(scope="module")
def emulator_backend(emulator_on_both_backends: str) -> str:
    """The route tests run on SQLite and on PostgreSQL (tests/fixtures/emulator.py)."""
    return emulator_on_both_backends
