"""Helpers of the REST API tests: tokens, an authenticated client, problem assertions."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx

from prefctl.clock import SystemClock
from prefctl.emulator.serve import RunningEmulator

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


class ShiftedClock(SystemClock):
    """The real clock shifted by ``offset`` seconds: mints tokens that are already expired, or
    makes events that are already old. (Not a FakeClock: background services sleep on it.)"""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> datetime:
        return super().now() + timedelta(seconds=self.offset)


def issue_token(
    emulator: RunningEmulator, user_id: str | None = None, *, http: httpx.Client | None = None
) -> str:
    """A fresh access token of the emulator's local client for ``user_id`` (default: admin)."""
    account = emulator.account
    scope = f"{account.service_client_id}/{user_id or account.user_id}"
    answer = (http or httpx).post(
        emulator.token_url,
        data={"grant_type": "client_credentials", "scope": scope},
        auth=(account.client_id, account.client_secret),
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


@dataclass
class Api:
    """An httpx client on ``{api_url}/{service_client_id}`` with the admin's Bearer token."""

    emulator: RunningEmulator
    client: httpx.Client

    @property
    def base(self) -> str:
        return f"{self.emulator.api_url}/{self.emulator.account.service_client_id}"

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.get(path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.post(path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.put(path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.delete(path, **kwargs)

    def patch(self, path: str, document: Any, content_type: str = JSON_PATCH) -> httpx.Response:
        return self.client.patch(
            path, content=httpx_json(document), headers={"Content-Type": content_type}
        )

    def create_profile(self, body: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self.post("/profiles", json=body if body is not None else {})
        assert answer.status_code == 201, answer.text
        profile: dict[str, Any] = answer.json()
        return profile

    def event_types(self, profile_id: int) -> list[str]:
        answer = self.get("/events", params={"profileId": profile_id, "limit": 500})
        assert answer.status_code == 200, answer.text
        return [event["EventType"] for event in answer.json()["Events"]]


def httpx_json(value: Any) -> bytes:
    return json.dumps(value).encode()


def assert_problem(answer: httpx.Response, status: int) -> dict[str, Any]:
    """``answer`` is an RFC 9457 problem with ``status``; returns its body."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = answer.json()
    assert problem["status"] == status
    assert problem["type"] == "about:blank"
    assert problem["title"]
    return problem
