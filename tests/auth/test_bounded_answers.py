"""Answers of real deployments that never end or never stop growing (``auth.http_policy``):
prefctl gives up on a server still sending past its deadline, refuses a success answer over
64 MiB, and reads only the start of a huge error answer — one line each, never a hang."""

from __future__ import annotations

from collections.abc import Generator

import httpx
import pytest

from prefctl.api.client import ApiClient
from prefctl.auth.credentials import SecretBasic
from prefctl.auth.http_policy import ANSWER_DEADLINE_FACTOR, MAX_ANSWER_BYTES
from prefctl.auth.token_client import TokenClient
from prefctl.clock import SystemClock
from prefctl.errors import EXIT_UNREACHABLE, UnreachableError
from tests.auth.helpers import CLIENT_ID, CLIENT_SECRET
from tests.auth.stub_server import StubTokenService
from tests.helpers import run_cli

PROBLEM = b'{"title": "Internal Server Error", "detail": "the database is down", "status": 500}'


class _Bearer(httpx.Auth):
    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


def test_rest_answer_still_sending_past_the_deadline_is_unreachable(
    stub: StubTokenService,
) -> None:
    # 60 bytes, one every 0.1 s (6 s in all); the client's read timeout 0.25 s → 1 s deadline.
    stub.api_answer(200, b'{"Settings": "' + b"x" * 44 + b'"}', drip=0.1)
    client = ApiClient(stub.url + "/api/v1", "DEMO", auth=_Bearer(stub.mint()), timeout=0.25)
    with client, pytest.raises(UnreachableError) as caught:
        client.get("/settings/webhooks")
    deadline = 0.25 * ANSWER_DEADLINE_FACTOR
    assert str(caught.value) == (
        f"127.0.0.1 did not finish answering GET /api/v1/DEMO/settings/webhooks within "
        f"{deadline:g} s (it was still sending)"
    )
    assert caught.value.exit_code == EXIT_UNREACHABLE


def test_token_answer_still_sending_past_the_deadline_is_unreachable(
    stub: StubTokenService,
) -> None:
    stub.answer(200, {"access_token": "x" * 100, "token_type": "Bearer", "expires_in": 60})
    stub.answers[-1].drip = 0.1
    client = TokenClient(
        stub.url, SecretBasic(CLIENT_ID, CLIENT_SECRET), clock=SystemClock(), timeout=0.25
    )
    with pytest.raises(UnreachableError, match="was still sending"):
        client.request("DEMO/admin")


def test_success_answer_over_64_mib_is_one_line_exit_1(stub: StubTokenService) -> None:
    stub.api_answer(200, b"{}", padding=MAX_ANSWER_BYTES)
    result = run_cli("settings", "get")
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [
        "error: the answer of 127.0.0.1 to GET /api/v1/DEMO/settings/webhooks is over 64 MiB; "
        "prefctl does not read answers that large — check that the URL points at the service"
    ]
    assert result.stdout == ""


def test_huge_error_answer_is_read_only_as_far_as_its_message(stub: StubTokenService) -> None:
    stub.api_answer(500, PROBLEM, "application/problem+json", padding=200 * 1024 * 1024)
    result = run_cli("settings", "get")
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: Internal Server Error: the database is down (HTTP 500")
    assert len(line) < 600


def test_answers_within_the_bounds_are_untouched(stub: StubTokenService) -> None:
    stub.api_answer(200, b'{"MaxConcurrentRequests": 7}', padding=1024 * 1024, gzip=True)
    result = run_cli("-o", "json", "settings", "get")
    assert result.exit_code == 0, result.output
    assert result.json["MaxConcurrentRequests"] == 7
