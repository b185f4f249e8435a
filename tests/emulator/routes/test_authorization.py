"""The authorization matrix (issue 4, Bad input; docs/operations.md): every account operation of the
OpenAPI refuses a missing, malformed, expired, tampered or revoked token, another account's token
and a user without the operation's permission — with a problem body, and without touching data."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest

from prefctl.emulator import admin
from prefctl.emulator.routes._common import ACCOUNT_PREFIX
from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.store import accounts
from prefctl.store.accounts import PERMISSIONS
from prefctl.store.db import connect, open_store, transaction
from tests.emulator.routes._api import ShiftedClock
from tests.helpers import free_port

OTHER_ACCOUNT = "OTHER_CORP"


@dataclass
class Service:
    emulator: RunningEmulator
    clock: ShiftedClock
    other_client: tuple[str, str]
    http: httpx.Client

    def mint(
        self, user_id: str, *, client: tuple[str, str] | None = None, account: str = ""
    ) -> str:
        account = account or self.emulator.account.service_client_id
        client_id, secret = client or (
            self.emulator.account.client_id,
            self.emulator.account.client_secret,
        )
        answer = self.http.post(
            self.emulator.token_url,
            data={"grant_type": "client_credentials", "scope": f"{account}/{user_id}"},
            auth=(client_id, secret),
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])


def _lacking(permission: str) -> str:
    return "without-" + permission.replace(":", "-")


@pytest.fixture(scope="module")
def service(
    tmp_path_factory: pytest.TempPathFactory, emulator_backend: str, request: pytest.FixtureRequest
) -> Iterator[Service]:
    clock = ShiftedClock()
    data_dir = tmp_path_factory.mktemp("authz") / "data"
    store = None
    if emulator_backend == "postgresql":
        store = str(request.getfixturevalue("postgres_module_url"))
    config = EmulatorConfig(port=free_port(), data_dir=data_dir, clock=clock, store=store)
    emulator = start_in_thread(config)
    try:
        with admin.open_admin_store(data_dir, store) as conn:
            for permission in PERMISSIONS:
                others = [p for p in PERMISSIONS if p != permission]
                admin.add_user(conn, clock, _lacking(permission), others)
            with transaction(conn):
                accounts.add_account(
                    conn,
                    accounts.Account(OTHER_ACCOUNT, hashkey="h" * 64, signature_user_id="signer"),
                )
            other = admin.add_client(conn, clock, name="other", service_client_id=OTHER_ACCOUNT)
            admin.add_user(conn, clock, "admin", PERMISSIONS, service_client_id=OTHER_ACCOUNT)
        assert other.secret is not None
        with httpx.Client() as http:
            yield Service(emulator, clock, (other.client.client_id, other.secret), http)
    finally:
        emulator.stop()


@pytest.fixture(scope="module")
def operations(service: Service) -> list[tuple[str, str, dict[str, Any]]]:
    document = service.http.get(f"{service.emulator.url}/openapi.json").json()
    found = [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if path.startswith(ACCOUNT_PREFIX)
    ]
    assert len(found) >= 18
    return found


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["uid"] = "root"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def _expired(service: Service) -> str:
    service.clock.offset = -2 * 3600
    try:
        return service.mint("admin")
    finally:
        service.clock.offset = 0


def _revoked(service: Service) -> str:
    token = service.mint("admin")
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    with open_store(service.emulator.store) as conn:
        admin.revoke(conn, service.clock, jti)
    return token


CASES: dict[str, tuple[int, Any]] = {
    "no token": (401, lambda s: None),
    "not bearer": (401, lambda s: "Basic " + base64.b64encode(b"admin:admin").decode()),
    "malformed": (401, lambda s: "Bearer not.a.jwt"),
    "bearer without a token": (401, lambda s: "Bearer"),
    "expired": (401, _expired),
    "tampered": (401, lambda s: "Bearer " + _tampered(s.mint("admin"))),
    "revoked": (401, _revoked),
    "another account's token": (
        403,
        lambda s: "Bearer " + s.mint("admin", client=s.other_client, account=OTHER_ACCOUNT),
    ),
}


def _request(
    service: Service,
    method: str,
    path: str,
    operation: dict[str, Any],
    authorization: str | None,
    account: str | None = None,
) -> httpx.Response:
    params = {"service_client_id": account or service.emulator.account.service_client_id}
    url = service.emulator.url + path.format_map(_Ids(params))
    headers = {"Authorization": authorization} if authorization is not None else {}
    content = None
    media_types = operation.get("requestBody", {}).get("content", {})
    if media_types:
        media_type, spec = next(iter(media_types.items()))
        schema = spec.get("schema", {})
        content = b"[]" if schema.get("type") == "array" else b"{}"
        headers["Content-Type"] = media_type
    return service.http.request(method, url, headers=headers, content=content)


class _Ids(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "1"


def _snapshot(service: Service) -> dict[str, int]:
    conn = connect(service.emulator.store)
    try:
        tables = (
            "profiles",
            "events",
            "deliveries",
            "subscriptions",
            "imports",
            "webhook_settings",
        )
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        conn.close()


def _refusals(
    service: Service,
    operations: list[tuple[str, str, dict[str, Any]]],
    status: int,
    authorization_for: Any,
    account: str | None = None,
) -> list[str]:
    wrong = []
    for method, path, operation in operations:
        authorization = authorization_for(operation)
        answer = _request(service, method, path, operation, authorization, account)
        problem_ok = (
            answer.headers.get("content-type") == "application/problem+json"
            and answer.json().get("status") == status
        )
        challenge_ok = (
            status != 401
            or 'error="invalid_token"' in answer.headers.get("www-authenticate", "")
            or authorization is None
        )
        if answer.status_code != status or not problem_ok or not challenge_ok:
            wrong.append(f"{method} {path}: {answer.status_code} {answer.text[:120]}")
    return wrong


@pytest.mark.parametrize("case", list(CASES))
def test_authorization_every_operation_refuses_a_bad_token(
    service: Service, operations: list[tuple[str, str, dict[str, Any]]], case: str
) -> None:
    status, make = CASES[case]
    authorization = make(service)
    before = _snapshot(service)

    wrong = _refusals(service, operations, status, lambda _operation: authorization)

    assert wrong == [], f"{case}: not refused with {status}:\n" + "\n".join(wrong)
    assert _snapshot(service) == before


def test_authorization_every_operation_refuses_a_user_without_its_permission(
    service: Service, operations: list[tuple[str, str, dict[str, Any]]]
) -> None:
    tokens = {p: "Bearer " + service.mint(_lacking(p)) for p in PERMISSIONS}
    before = _snapshot(service)

    wrong = _refusals(service, operations, 403, lambda op: tokens[op["x-permission"]])

    assert wrong == [], "not refused with 403:\n" + "\n".join(wrong)
    assert _snapshot(service) == before


def test_authorization_a_token_used_on_another_accounts_path_is_403(
    service: Service, operations: list[tuple[str, str, dict[str, Any]]]
) -> None:
    authorization = "Bearer " + service.mint("admin")
    before = _snapshot(service)

    wrong = _refusals(service, operations, 403, lambda _op: authorization, OTHER_ACCOUNT)

    assert wrong == [], "not refused with 403:\n" + "\n".join(wrong)
    assert _snapshot(service) == before


def test_authorization_401_challenges_with_bearer_invalid_token(service: Service) -> None:
    answer = service.http.get(
        f"{service.emulator.api_url}/{service.emulator.account.service_client_id}/programs",
        headers={"Authorization": "Bearer " + _expired(service)},
    )

    assert answer.status_code == 401
    assert answer.json()["detail"] == "the access token has expired"
    assert answer.headers["www-authenticate"].startswith(
        'Bearer realm="prefctl-emulator", error="invalid_token"'
    )


def test_authorization_the_matrix_tokens_are_refused_only_for_what_they_lack(
    service: Service, operations: list[tuple[str, str, dict[str, Any]]]
) -> None:
    """The control: the admin, and each limited user on operations it may use, get through."""
    admin_token = "Bearer " + service.mint("admin")
    tokens = {p: "Bearer " + service.mint(_lacking(p)) for p in PERMISSIONS}
    for method, path, operation in operations:
        granted = next(p for p in PERMISSIONS if p != operation["x-permission"])
        for authorization in (admin_token, tokens[granted]):
            answer = _request(service, method, path, operation, authorization)
            assert answer.status_code not in (401, 403), (method, path, answer.text)
