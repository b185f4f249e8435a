"""Programs (GET /programs) and RFC 9457 problem bodies."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from prefctl.models._base import dump_wire
from prefctl.models.problem import Problem, field_path, problem_from_validation_errors
from prefctl.models.profile import StrictProfile
from prefctl.models.program import ProgramList

PROGRAMS = {
    "Programs": [
        {
            "ProgramId": 1,
            "Name": "News",
            "ProgramType": "Newsletter",
            "Filters": [{"FilterId": 10, "Name": "Weekly"}, {"FilterId": 11, "Name": "Offers"}],
            "Channels": ["Email", "SMS"],
        }
    ]
}


def test_program_list_round_trips_unchanged() -> None:
    assert dump_wire(ProgramList.model_validate(PROGRAMS)) == PROGRAMS


def test_program_list_tolerates_new_service_fields() -> None:
    body = {"Programs": [{**PROGRAMS["Programs"][0], "Region": "EU"}], "Total": 1}
    assert dump_wire(ProgramList.model_validate(body)) == PROGRAMS


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        (("body", "Emails", 0, "Address"), "Emails[0].Address"),
        (("Consents", 2, "Elements", 1), "Consents[2].Elements[1]"),
        (("query", "limit"), "limit"),
        (("body",), ""),
        ((0, "Name"), "[0].Name"),
    ],
)
def test_field_path_formats_locations_as_wire_paths(loc: tuple[int | str, ...], path: str) -> None:
    assert field_path(loc) == path


def test_problem_from_validation_errors_lists_each_field() -> None:
    with pytest.raises(ValidationError) as caught:
        StrictProfile.model_validate(
            {"Emails": [{"Address": "nope"}], "Tags": ["a", "a"], "Extra": 1}
        )
    problem = problem_from_validation_errors(caught.value.errors())
    body = problem.to_json_dict()
    assert body["status"] == 400
    assert body["type"] == "about:blank"
    assert body["detail"] == "3 fields are invalid"
    fields = {error["field"]: error["message"] for error in body["errors"]}
    assert set(fields) == {"Emails[0].Address", "Tags", "Extra"}
    assert fields["Tags"] == "items 0 and 1 have the same value"


def test_problem_keys_are_lowercase_and_extensions_kept() -> None:
    body = {"type": "https://x/e", "title": "Conflict", "status": 409, "traceId": "abc"}
    problem = Problem.model_validate(body)
    assert problem.to_json_dict() == body


def test_problem_without_errors_omits_the_member() -> None:
    problem = Problem(title="Not Found", status=404, detail="no profile 7")
    assert problem.to_json_dict() == {
        "type": "about:blank",
        "title": "Not Found",
        "status": 404,
        "detail": "no profile 7",
    }
