"""How the emulator's REST routes are reached: ``WireRoute`` (JSON bodies parsed by orjson) and the
direct lanes of the busiest routes (``direct``, ``LaneRoute``), which FastAPI's internals allow
only in the releases they were tested with (``check_lanes``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from starlette.datastructures import URLPath
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

__all__ = [
    "TESTED_FASTAPI",
    "DirectLane",
    "LaneRoute",
    "WireRoute",
    "check_lanes",
    "direct",
    "lane_routes",
    "lanes_problem",
]


class _WireRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            from prefctl.emulator.routes._common import refuse_nul  # _common imports this module

            raw = await self.body()
            self._json = orjson.loads(raw)
            refuse_nul(raw, self._json, "the request body")
        return self._json


class WireRoute(APIRoute):
    """A route whose JSON bodies are parsed by orjson instead of the standard library.

    orjson accepts exactly what the store can write back: the standard parser also takes ``NaN``,
    integers beyond 64 bits and lone UTF-16 surrogates, which would then fail when the profile is
    stored (a 500). orjson refuses them while parsing, and its error is a ``JSONDecodeError``, so
    they become the 400 of a malformed body. It is also faster.

    A route with a ``direct`` lane runs that first (see ``direct``).
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        endpoint = self.endpoint

        async def handle(request: Request) -> Response:
            wire = _WireRequest(request.scope, request.receive)
            lane = None if _lanes_off is not None else _DIRECT_LANES.get(endpoint)
            if lane is not None:
                response = await lane(wire)
                if response is not None:
                    return response
            return await handler(wire)

        return handle


DirectLane = Callable[[Request], Awaitable[Response | None]]
_DIRECT_LANES: dict[Callable[..., Any], DirectLane] = {}

# FastAPI releases whose internals the lanes were tested with: [low, high). A lane calls its
# route's dependencies in the order these releases do, and the OpenAPI document reads each
# route's ``dependant``; pyproject.toml bounds fastapi to the same range.
TESTED_FASTAPI = ((0, 137), (0, 166))
_lanes_off: str | None = None  # why the lanes are not used (``check_lanes``); None: they are

_log = logging.getLogger(__name__)


def lanes_problem() -> str | None:
    """Why the direct lanes may not be used with the FastAPI installed (None: they may)."""
    import fastapi
    from fastapi.dependencies.models import Dependant

    version = getattr(fastapi, "__version__", "")
    match = re.match(r"(\d+)\.(\d+)", version)
    low, high = TESTED_FASTAPI
    if match is None or not low <= (int(match[1]), int(match[2])) < high:
        return f"fastapi {version or '?'} is not in the tested range"
    fields = getattr(Dependant, "__dataclass_fields__", {})
    missing = [name for name in ("dependencies", "call") if name not in fields]
    if missing:
        return f"fastapi's Dependant has no {', '.join(missing)}"
    if not callable(getattr(APIRoute, "get_route_handler", None)):
        return "fastapi's APIRoute has no get_route_handler"
    return None


def check_lanes() -> str | None:
    """Turn the direct lanes off, for this process, when FastAPI is not as they expect: every
    request then takes its declared route (the same answers, slower). Returns why (None: on)."""
    global _lanes_off
    _lanes_off = lanes_problem()
    if _lanes_off is not None:
        _log.info("the direct lanes are off, requests take FastAPI's routes: %s", _lanes_off)
    return _lanes_off


def direct(endpoint: Callable[..., Any]) -> Callable[[DirectLane], DirectLane]:
    """Register a hand-written lane for a hot route: it calls the route's dependencies itself, in
    the order FastAPI would, then the endpoint, skipping FastAPI's per-request dependency solving
    (a third of the event loop's time on a PATCH; bench/api.py). It returns None, before it has
    read the body, for any request it does not take plainly (an unusual path parameter), and the
    declared route answers that one. tests/emulator/routes/test_direct_lanes.py holds a lane's
    answers equal to its declared route's for every kind of request."""

    def register(lane: DirectLane) -> DirectLane:
        _DIRECT_LANES[endpoint] = lane
        return lane

    return register


class LaneRoute(BaseRoute):
    """The first entry of the application's route table for a route with a direct lane.

    FastAPI finds a route by walking the table, and an included router is walked twice (once to
    match, once to handle): for ``PATCH /profiles/{id}`` about 9 % of a PATCH's instructions
    (bench/api_inprocess.py, cachegrind). This entry answers the walk at once for the requests its
    route takes (its method, and its own ``matches``) and hands them to that route, which runs its
    lane. It claims nothing the walk would give another route, because no other route of the API
    takes the same method on a path its pattern matches (tests/emulator/routes/
    test_direct_lanes.py). With the lane taken out of ``_DIRECT_LANES`` it claims nothing, and
    the request takes the declared way entirely.
    """

    def __init__(self, route: APIRoute) -> None:
        self.route = route
        self.methods = frozenset(route.methods or ())

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope.get("method") in self.methods and self.route.endpoint in _DIRECT_LANES:
            match, child_scope = self.route.matches(scope)
            if match is Match.FULL:
                return match, child_scope
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.route.handle(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        # Not a route of its own: URLs are built from the declared route.
        raise NoMatchFound(name, path_params)


def lane_routes(routers: Iterable[APIRouter]) -> list[LaneRoute]:
    """A ``LaneRoute`` for every route of ``routers`` that has a direct lane (none when the
    lanes are off)."""
    if _lanes_off is not None:
        return []
    return [
        LaneRoute(route)
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and route.endpoint in _DIRECT_LANES
    ]
