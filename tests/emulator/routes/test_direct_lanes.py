"""Routes with a direct lane (``routes._lanes.direct``) answer exactly as the declared route
does: every request below is sent once through the lane and once with the lane taken out, and the
status, the problem or profile body and the headers a client reads must be the same."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Match

from prefctl.clock import SystemClock
from prefctl.emulator import admin
from prefctl.emulator.api import OPTIONAL_ROUTERS, ROUTERS
from prefctl.emulator.app import EmulatorContext, create_app
from prefctl.emulator.routes import _lanes
from prefctl.emulator.routes._common import MAX_BODY_BYTES
from prefctl.emulator.routes._lanes import LaneRoute
from prefctl.emulator.routes.profiles import update_profile
from prefctl.store.accounts import PERMISSIONS
from prefctl.store.db import open_store
from tests.emulator.routes._api import JSON_PATCH, MERGE_PATCH, Api, issue_token

PROFILE = {"CustomerName": {"FirstName": "Ann"}, "Tags": ["a"]}
# What changes between two equal writes: the id a create assigns and the time of the write.
_VARYING = ("ProfileId", "Edited")
_HEADERS = ("content-type", "www-authenticate", "accept-patch", "location")

# (name, path under the account given a fresh profile's id, headers, body)
Case = tuple[str, Callable[[int], str], dict[str, str], bytes | None]


def _own(profile_id: int) -> str:
    return f"/profiles/{profile_id}"


CASES: list[Case] = [
    ("merge patch", _own, {"Content-Type": MERGE_PATCH}, b'{"Tags": ["b"]}'),
    (
        "json patch",
        _own,
        {"Content-Type": JSON_PATCH},
        b'[{"op": "add", "path": "/Tags/-", "value": "c"}]',
    ),
    ("no change", _own, {"Content-Type": MERGE_PATCH}, b'{"Tags": ["a"]}'),
    ("no token", _own, {"Authorization": "", "Content-Type": MERGE_PATCH}, b"{}"),
    ("bad token", _own, {"Authorization": "Bearer x.y.z", "Content-Type": MERGE_PATCH}, b"{}"),
    ("basic scheme", _own, {"Authorization": "Basic eDp5", "Content-Type": MERGE_PATCH}, b"{}"),
    ("plain json", _own, {"Content-Type": "application/json"}, b'{"Tags": []}'),
    ("plain json, no token", _own, {"Authorization": "", "Content-Type": "text/plain"}, b"x"),
    ("no body", _own, {}, None),
    ("not json", _own, {"Content-Type": MERGE_PATCH}, b"{nope"),
    ("merge patch not an object", _own, {"Content-Type": MERGE_PATCH}, b"[1]"),
    ("malformed json patch", _own, {"Content-Type": JSON_PATCH}, b'[{"op": "jump"}]'),
    (
        "failing test op",
        _own,
        {"Content-Type": JSON_PATCH},
        b'[{"op": "test", "path": "/Tags/0", "value": "z"}]',
    ),
    ("invalid profile", _own, {"Content-Type": MERGE_PATCH}, b'{"Emails": [{"Type": 5}]}'),
    ("read-only field", _own, {"Content-Type": MERGE_PATCH}, b'{"IsActive": false}'),
    ("too large", _own, {"Content-Type": MERGE_PATCH}, b" " * (MAX_BODY_BYTES + 1)),
    ("unknown id", lambda _: "/profiles/999999999", {"Content-Type": MERGE_PATCH}, b"{}"),
    ("id zero", lambda _: "/profiles/0", {"Content-Type": MERGE_PATCH}, b"{}"),
    ("leading zero", lambda pid: f"/profiles/0{pid}", {"Content-Type": MERGE_PATCH}, b"{}"),
    ("id not a number", lambda _: "/profiles/abc", {"Content-Type": MERGE_PATCH}, b"{}"),
    ("id beyond 64 bits", lambda _: "/profiles/" + "9" * 20, {"Content-Type": MERGE_PATCH}, b"{}"),
    ("id and token bad", lambda _: "/profiles/abc", {"Authorization": "Bearer x"}, b"{}"),
    # Paths next to the lane's (the answers name the path, so a fixed id): another route's path
    # (405), a trailing slash (redirected), the collection (405).
    ("another route's path", lambda _: "/profiles/1001/deactivate", {}, b"{}"),
    ("trailing slash", lambda _: "/profiles/1001/", {"Content-Type": MERGE_PATCH}, b"{}"),
    ("the collection", lambda _: "/profiles", {"Content-Type": MERGE_PATCH}, b"{}"),
]


def _answer(api: Api, case: Case, extra: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
    _name, path, headers, body = case
    profile_id = api.post("/profiles", json=PROFILE).json()["ProfileId"]
    answer = api.client.request(
        "PATCH", path(profile_id), headers={**headers, **extra}, content=body
    )
    return answer.status_code, _body(answer), _read_headers(answer)


def _body(answer: httpx.Response) -> Any:
    body = answer.json() if answer.content else None
    if isinstance(body, dict):
        for key in _VARYING:
            body.pop(key, None)
    return body


def _read_headers(answer: httpx.Response) -> dict[str, str]:
    return {name: answer.headers[name] for name in _HEADERS if name in answer.headers}


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_direct_lane_patch_answers_as_the_declared_route(
    api: Api, case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    through_lane = _answer(api, case, {})
    monkeypatch.delitem(_lanes._DIRECT_LANES, update_profile)
    declared = _answer(api, case, {})
    assert through_lane == declared


@pytest.mark.parametrize("case", CASES[:6] + CASES[-3:], ids=[c[0] for c in CASES[:6] + CASES[-3:]])
def test_with_fastapi_outside_the_tested_range_the_lanes_are_off_and_answers_the_same(
    api: Api, case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FastAPI release the lanes were not tested with may call dependencies otherwise: the
    emulator then answers every request through the declared routes, the same answers."""
    import fastapi

    through_lane = _answer(api, case, {})
    monkeypatch.setattr(_lanes, "_lanes_off", None)  # put back after the test
    monkeypatch.setattr(fastapi, "__version__", "0.200.0")
    app = create_app(EmulatorContext(store_path=Path("unused.db"), base_url="http://127.0.0.1:1"))
    assert not any(isinstance(route, LaneRoute) for route in app.router.routes)
    assert _lanes._lanes_off == "fastapi 0.200.0 is not in the tested range"
    assert _answer(api, case, {}) == through_lane  # the running emulator, lanes now off
    assert "x-permission" in str(app.openapi())  # the document still names each permission


def test_direct_lane_patch_refuses_a_user_without_the_permission_as_declared(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(api.emulator.store) as conn:
        others = [p for p in PERMISSIONS if p != "profiles:write"]
        admin.add_user(conn, SystemClock(), "reader-only", others)
    token = {"Authorization": f"Bearer {issue_token(api.emulator, 'reader-only')}"}
    case: Case = ("lacking permission", _own, {"Content-Type": MERGE_PATCH}, b"{}")
    through_lane = _answer(api, case, token)
    monkeypatch.delitem(_lanes._DIRECT_LANES, update_profile)
    declared = _answer(api, case, token)
    assert through_lane == declared
    assert through_lane[0] == 403


def test_the_lane_route_is_matched_first_and_claims_only_what_the_declared_walk_gives_it() -> None:
    # LaneRoute answers the route-table walk for PATCH /profiles/{id}. It may claim a request only
    # when no other declared route matches it fully, so the walk would have picked its route too.
    app = create_app(EmulatorContext(store_path=Path("unused.db"), base_url="http://127.0.0.1:1"))
    first = app.router.routes[0]
    assert isinstance(first, LaneRoute)
    assert first.route.endpoint is update_profile
    modules = [f"prefctl.emulator.routes.{name}" for name in (*ROUTERS, *OPTIONAL_ROUTERS)]
    declared = [r for r in app.router.routes if isinstance(r, APIRoute)] + [
        route for module in modules for route in import_module(module).router.routes
    ]
    prefix = "/api/v1/ACME"
    for method, path, claimed in [
        ("PATCH", f"{prefix}/profiles/1001", True),
        ("PATCH", f"{prefix}/profiles/abc", True),
        ("GET", f"{prefix}/profiles/1001", False),
        ("PUT", f"{prefix}/profiles/1001", False),
        ("PATCH", f"{prefix}/profiles/1001/deactivate", False),
        ("PATCH", f"{prefix}/profiles", False),
        ("PATCH", f"{prefix}/subscriptions/1", False),
        ("PATCH", "/healthz", False),
    ]:
        scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}
        match, child = first.matches(scope)
        assert (match is Match.FULL) is claimed, (method, path)
        full = [route.endpoint for route in declared if route.matches(scope)[0] is Match.FULL]
        if claimed:
            assert child["endpoint"] is update_profile
            assert full == [update_profile], (method, path)
