"""Two Authorization headers (issue 18, point 5): the token endpoint and the REST API both refuse
the request with 401 and the reason, whichever of the two values is the valid one."""

from __future__ import annotations

import base64

import httpx
import pytest

from prefctl.emulator.serve import RunningEmulator
from tests.emulator.routes._api import issue_token

GRANT = {"grant_type": "client_credentials", "scope": "DEMO_CORP/admin"}
REASON = "the request has 2 Authorization headers: send exactly one"


def _basic(emulator: RunningEmulator) -> str:
    account = emulator.account
    pair = f"{account.client_id}:{account.client_secret}".encode()
    return "Basic " + base64.b64encode(pair).decode()


@pytest.mark.parametrize("valid_first", [True, False])
def test_token_endpoint_two_authorization_headers_is_401_with_the_reason(
    emulator: RunningEmulator, valid_first: bool
) -> None:
    pair = [_basic(emulator), "Basic Z2FyYmFnZTpnYXJiYWdl"]
    values = pair if valid_first else pair[::-1]

    with httpx.Client(timeout=10) as http:
        answer = http.post(
            emulator.token_url, data=GRANT, headers=[("Authorization", v) for v in values]
        )
        single = http.post(emulator.token_url, data=GRANT, headers={"Authorization": values[0]})

    assert answer.status_code == 401
    assert answer.json() == {"error": "invalid_client", "error_description": REASON}
    assert answer.headers["www-authenticate"].startswith("Basic")
    assert "access_token" not in answer.text
    assert single.status_code == (200 if valid_first else 401)


@pytest.mark.parametrize("valid_first", [True, False])
def test_rest_api_two_authorization_headers_is_401_with_the_reason(
    emulator: RunningEmulator, valid_first: bool
) -> None:
    url = f"{emulator.api_url}/{emulator.account.service_client_id}/settings/webhooks"
    with httpx.Client(timeout=10) as http:
        pair = [f"Bearer {issue_token(emulator, http=http)}", "Bearer not.a.token"]
        values = pair if valid_first else pair[::-1]
        answer = http.get(url, headers=[("Authorization", v) for v in values])
        same_twice = http.get(url, headers=[("Authorization", pair[0])] * 2)
        single = http.get(url, headers={"Authorization": pair[0]})
        health = http.get(emulator.url + "/healthz")

    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["detail"] == REASON
    assert 'error="invalid_request"' in answer.headers["www-authenticate"]
    assert same_twice.status_code == 401  # even two equal values: one header, not a choice
    assert single.status_code == 200
    assert health.status_code == 200


def test_profile_patch_lane_two_authorization_headers_is_401_and_changes_nothing(
    emulator: RunningEmulator,
) -> None:
    base = f"{emulator.api_url}/{emulator.account.service_client_id}"
    with httpx.Client(base_url=base, timeout=10) as http:
        bearer = f"Bearer {issue_token(emulator, http=http)}"
        http.headers["Authorization"] = bearer
        created = http.post("/profiles", json={"Tags": ["a"]})
        assert created.status_code == 201, created.text
        path = f"/profiles/{created.json()['ProfileId']}"
        del http.headers["Authorization"]
        answer = http.patch(
            path,
            content=b'{"Tags": ["changed"]}',
            headers=[
                ("Authorization", bearer),
                ("Authorization", bearer),
                ("Content-Type", "application/merge-patch+json"),
            ],
        )
        stored = http.get(path, headers={"Authorization": bearer})

    assert answer.status_code == 401
    assert answer.json()["detail"] == REASON
    assert stored.json()["Tags"] == ["a"]
