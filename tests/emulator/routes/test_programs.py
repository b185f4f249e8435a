"""``GET /programs``: the seeded programs of a new emulator."""

from __future__ import annotations

from prefctl.store.programs import SEED_PROGRAMS
from tests.emulator.routes._api import Api


def test_programs_lists_the_seeded_programs(api: Api) -> None:
    answer = api.get("/programs")

    assert answer.status_code == 200
    assert answer.json() == {"Programs": list(SEED_PROGRAMS)}


def test_programs_filtered_by_type(api: Api) -> None:
    answer = api.get("/programs", params={"programType": "Informational"})

    assert [p["Name"] for p in answer.json()["Programs"]] == ["Newsletter", "Product Updates"]


def test_programs_of_an_unknown_type_is_an_empty_list(api: Api) -> None:
    assert api.get("/programs", params={"programType": "Nope"}).json() == {"Programs": []}
