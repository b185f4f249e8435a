"""``GET /events``: filters, paging and the 15-day window."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from prefctl.emulator.serve import EmulatorConfig, start_in_thread
from tests.emulator.routes._api import MERGE_PATCH, Api, ShiftedClock, assert_problem, issue_token
from tests.helpers import free_port


def test_events_filter_by_type_and_profile(api: Api) -> None:
    profile_id = api.create_profile({})["ProfileId"]
    api.patch(f"/profiles/{profile_id}", {"Tags": ["a"]}, MERGE_PATCH)

    answer = api.get("/events", params={"profileId": profile_id, "eventType": "tag.added"})

    events = answer.json()["Events"]
    assert [e["EventType"] for e in events] == ["tag.added"]
    assert events[0]["Data"] == {"Tag": "a"}
    assert events[0]["ClientId"] == api.emulator.account.service_client_id
    assert events[0]["ProfileId"] == profile_id
    assert "SubscriptionId" not in events[0]
    assert answer.json()["NextCursor"] is None


def test_events_page_with_the_cursor(api: Api) -> None:
    profile_id = api.create_profile({})["ProfileId"]
    for tag in ("a", "b"):
        api.patch(f"/profiles/{profile_id}", {"Tags": [tag]}, MERGE_PATCH)
    everything = api.event_types(profile_id)

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, object] = {"profileId": profile_id, "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = api.get("/events", params=params).json()
        seen += [e["EventType"] for e in page["Events"]]
        cursor = page["NextCursor"]
        if cursor is None:
            break

    assert seen == everything
    assert len(seen) > 2


def test_events_between_start_and_end(api: Api) -> None:
    profile_id = api.create_profile({})["ProfileId"]
    now = datetime.now(UTC)
    hour = timedelta(hours=1)

    def listed(**params: object) -> list[str]:
        answer = api.get("/events", params={"profileId": profile_id, **params})
        return [e["EventType"] for e in answer.json()["Events"]]

    assert listed(startAt=(now - hour).isoformat(), endAt=(now + hour).isoformat()) == [
        "profile.created"
    ]
    assert listed(startAt=(now + hour).isoformat()) == []
    assert listed(endAt=(now - hour).isoformat()) == []
    assert listed(startAt=(now - timedelta(days=400)).isoformat()) == ["profile.created"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"eventType": "profile.exploded"}, "eventType"),
        ({"startAt": "yesterday"}, "startAt"),
        ({"startAt": "2026-01-01T00:00:00"}, "startAt"),  # no time zone
        ({"startAt": "2026-01-02T00:00:00Z", "endAt": "2026-01-01T00:00:00Z"}, "startAt"),
        ({"limit": 0}, "limit"),
        ({"profileId": "x"}, "profileId"),
    ],
)
def test_events_invalid_filter_is_400_naming_it(
    api: Api, params: dict[str, str], field: str
) -> None:
    problem = assert_problem(api.get("/events", params=params), 400)

    assert problem["errors"][0]["field"] == field


def test_events_foreign_cursor_is_400(api: Api) -> None:
    profile_cursor = "WyJwcm9maWxlcyIsMTAwMV0"  # a cursor of the profile search

    assert_problem(api.get("/events", params={"cursor": profile_cursor}), 400)


@pytest.fixture
def shifted_api(tmp_path: Path) -> Iterator[tuple[Api, ShiftedClock]]:
    clock = ShiftedClock()
    emulator = start_in_thread(
        EmulatorConfig(port=free_port(), data_dir=tmp_path / "shifted", clock=clock)
    )
    base = f"{emulator.api_url}/{emulator.account.service_client_id}"
    try:
        with httpx.Client(base_url=base) as client:
            client.headers["Authorization"] = f"Bearer {issue_token(emulator, http=client)}"
            yield Api(emulator, client), clock
    finally:
        emulator.stop()


def test_events_older_than_15_days_are_not_listed(shifted_api: tuple[Api, ShiftedClock]) -> None:
    api, clock = shifted_api
    clock.offset = -16 * 86_400
    old = api.create_profile({})["ProfileId"]
    clock.offset = -14 * 86_400
    recent = api.create_profile({})["ProfileId"]
    clock.offset = 0

    assert api.event_types(old) == []
    assert api.event_types(recent) == ["profile.created"]
