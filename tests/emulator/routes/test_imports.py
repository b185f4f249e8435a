"""``/imports``: initiate, stage (JSON array or NDJSON), execute in the background, status."""

from __future__ import annotations

import uuid
from typing import Any

from tests.emulator.routes._api import Api, assert_problem
from tests.helpers import wait_until

NDJSON = "application/x-ndjson"


def _initiate(api: Api) -> int:
    answer = api.post("/imports")
    assert answer.status_code == 201, answer.text
    import_id: int = answer.json()["ImportId"]
    assert answer.headers["location"] == f"{api.base}/imports/{import_id}"
    return import_id


def _finished(api: Api, import_id: int) -> dict[str, Any]:
    status: dict[str, Any] = {}

    def done() -> bool:
        status.update(api.get(f"/imports/{import_id}").json())
        return status["State"] in ("Completed", "Failed")

    wait_until(done)
    return status


def test_import_runs_to_completed_and_creates_and_replaces_without_events(api: Api) -> None:
    existing = api.create_profile({"Tags": ["old"]})
    loyalty = uuid.uuid4().hex
    import_id = _initiate(api)

    staged = api.post(
        f"/imports/{import_id}/records",
        json=[
            {"AlternateIds": [{"Type": "Loyalty", "Value": loyalty}]},
            {"ProfileId": existing["ProfileId"], "Tags": ["new"]},
        ],
    )
    executed = api.post(f"/imports/{import_id}/execute")
    status = _finished(api, import_id)

    assert staged.status_code == 200
    assert staged.json()["State"] == "Staging"
    assert staged.json()["TotalRecords"] == 2
    assert executed.status_code == 202
    assert executed.json()["State"] == "Queued"
    assert executed.headers["location"].endswith(f"/imports/{import_id}")
    assert status["State"] == "Completed"
    assert (status["CreatedProfiles"], status["ReplacedProfiles"]) == (1, 1)
    created = api.get("/profiles", params={"alternateId": loyalty}).json()["Profiles"]
    assert len(created) == 1
    assert api.event_types(created[0]["ProfileId"]) == []
    assert api.get(f"/profiles/{existing['ProfileId']}").json()["Tags"] == ["new"]
    assert api.event_types(existing["ProfileId"]) == ["profile.created"]


def test_import_ndjson_records_are_staged_line_by_line_with_record_errors(api: Api) -> None:
    import_id = _initiate(api)
    body = b'{"Tags": ["one"]}\n\n{"Emails": [{"Address": "bad"}]}\n{"ProfileId": 987654321}\n'

    staged = api.post(
        f"/imports/{import_id}/records", content=body, headers={"Content-Type": NDJSON}
    )
    api.post(f"/imports/{import_id}/execute")
    status = _finished(api, import_id)

    assert staged.json()["TotalRecords"] == 3
    assert status["State"] == "Completed"
    assert status["CreatedProfiles"] == 1
    assert status["FailedRecords"] == 2
    assert [error["Record"] for error in status["Errors"]] == [2, 3]
    assert "Emails[0].Address" in status["Errors"][0]["Message"]


def test_import_stage_after_execute_is_409(api: Api) -> None:
    import_id = _initiate(api)
    api.post(f"/imports/{import_id}/records", json=[{}])
    api.post(f"/imports/{import_id}/execute")
    _finished(api, import_id)

    assert_problem(api.post(f"/imports/{import_id}/records", json=[{}]), 409)
    assert_problem(api.post(f"/imports/{import_id}/execute"), 409)


def test_import_execute_while_it_runs_is_409(api: Api) -> None:
    import_id = _initiate(api)
    api.post(f"/imports/{import_id}/records", json=[{"Tags": ["bulk"]}] * 5_000)

    first = api.post(f"/imports/{import_id}/execute")
    again = api.post(f"/imports/{import_id}/execute")  # running, or done if it was quick

    assert first.status_code == 202
    assert_problem(again, 409)
    assert _finished(api, import_id)["CreatedProfiles"] == 5_000  # one run, not two


def test_import_execute_without_records_is_409(api: Api) -> None:
    import_id = _initiate(api)

    problem = assert_problem(api.post(f"/imports/{import_id}/execute"), 409)

    assert "no records" in problem["detail"]


def test_import_records_that_are_not_objects_are_400(api: Api) -> None:
    import_id = _initiate(api)

    problem = assert_problem(api.post(f"/imports/{import_id}/records", json=[{}, 3]), 400)

    assert problem["errors"] == [{"field": "[1]", "message": "not a JSON object"}]
    assert_problem(api.post(f"/imports/{import_id}/records", json=[]), 400)
    assert_problem(api.post(f"/imports/{import_id}/records", json={"Tags": []}), 400)
    bad_line = api.post(
        f"/imports/{import_id}/records", content=b"{}\n{oops\n", headers={"Content-Type": NDJSON}
    )
    assert assert_problem(bad_line, 400)["errors"][0]["field"] == "line 2"


def test_import_records_nested_hundreds_deep_are_400_and_nothing_is_staged(api: Api) -> None:
    import_id = _initiate(api)
    deep = b'{"CustomerName": ' + b'{"a": ' * 300 + b"1" + b"}" * 300 + b"}"

    as_json = api.post(
        f"/imports/{import_id}/records",
        content=b"[" + deep + b"]",
        headers={"Content-Type": "application/json"},
    )
    as_lines = api.post(
        f"/imports/{import_id}/records", content=b"{}\n" + deep, headers={"Content-Type": NDJSON}
    )

    assert "the request body is nested more than 64" in assert_problem(as_json, 400)["detail"]
    assert "line 2 is nested more than 64" in assert_problem(as_lines, 400)["detail"]
    assert api.get(f"/imports/{import_id}").json()["TotalRecords"] == 0


def test_import_records_as_text_are_415(api: Api) -> None:
    import_id = _initiate(api)

    answer = api.post(
        f"/imports/{import_id}/records", content=b"{}", headers={"Content-Type": "text/plain"}
    )

    assert_problem(answer, 415)


def test_import_unknown_is_404(api: Api) -> None:
    assert_problem(api.get("/imports/987654321"), 404)
    assert_problem(api.post("/imports/987654321/records", json=[{}]), 404)
    assert_problem(api.post("/imports/987654321/execute"), 404)


def test_initiate_with_a_body_that_is_not_json_is_400_and_starts_no_import(api: Api) -> None:
    before = _initiate(api)

    for body in (b"not json at all", b'{"x":'):
        answer = api.post("/imports", content=body, headers={"Content-Type": "text/plain"})
        problem = assert_problem(answer, 400)
        assert "not valid JSON" in problem["detail"]

    assert _initiate(api) == before + 1  # the refused requests made no import


def test_initiate_and_execute_accept_an_empty_json_body(api: Api) -> None:
    answer = api.post("/imports", json={})
    assert answer.status_code == 201, answer.text
    import_id = answer.json()["ImportId"]
    api.post(f"/imports/{import_id}/records", json=[{"Tags": ["x"]}])

    executed = api.post(f"/imports/{import_id}/execute", json={})

    assert executed.status_code == 202, executed.text
    assert _finished(api, import_id)["State"] == "Completed"


def test_execute_with_json_in_another_media_type_is_415(api: Api) -> None:
    import_id = _initiate(api)

    answer = api.post(
        f"/imports/{import_id}/execute", content=b"{}", headers={"Content-Type": "text/plain"}
    )

    assert_problem(answer, 415)
    assert api.get(f"/imports/{import_id}").json()["State"] == "Initiated"
