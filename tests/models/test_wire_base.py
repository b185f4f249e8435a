"""WireModel tolerance, StrictWireModel strictness, strict twins and dump_wire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import Field, ValidationError

from prefctl.models._base import (
    StrictWireModel,
    Timestamp,
    WireModel,
    dump_wire,
    format_timestamp,
    strict_model,
)


class Leaf(WireModel):
    leaf_value: int
    note: str | None = None


class Branch(WireModel):
    leaves: list[Leaf] = Field(default_factory=list, max_length=3)
    main_leaf: Leaf | None = None
    by_name: dict[str, Leaf] = Field(default_factory=dict)
    when: Timestamp | None = None


def test_wire_model_pascal_case_keys_parse_and_dump() -> None:
    branch = Branch.model_validate({"Leaves": [{"LeafValue": 1}], "MainLeaf": {"LeafValue": 2}})
    assert branch.leaves[0].leaf_value == 1
    assert dump_wire(branch) == {
        "Leaves": [{"LeafValue": 1}],
        "MainLeaf": {"LeafValue": 2},
        "ByName": {},
    }


def test_wire_model_python_names_accepted_for_construction() -> None:
    assert Leaf(leaf_value=3).leaf_value == 3


def test_wire_model_unknown_fields_ignored_at_every_level() -> None:
    branch = Branch.model_validate({"Leaves": [{"LeafValue": 1, "NewField": True}], "Other": 1})
    assert dump_wire(branch)["Leaves"] == [{"LeafValue": 1}]


def test_dump_wire_keeps_nones_when_asked() -> None:
    assert dump_wire(Leaf(leaf_value=1), exclude_none=False) == {"LeafValue": 1, "Note": None}


def test_strict_model_unknown_nested_field_rejected_with_its_path() -> None:
    strict_branch = strict_model(Branch)
    with pytest.raises(ValidationError) as caught:
        strict_branch.model_validate(
            {"Leaves": [{"LeafValue": 1, "Typo": 2}], "ByName": {"a": {"LeafValue": 1, "X": 0}}}
        )
    locations = {error["loc"] for error in caught.value.errors()}
    assert locations == {("Leaves", 0, "Typo"), ("ByName", "a", "X")}


def test_strict_model_optional_nested_model_is_strict_too() -> None:
    with pytest.raises(ValidationError) as caught:
        strict_model(Branch).model_validate({"MainLeaf": {"LeafValue": 1, "Typo": 2}})
    assert caught.value.errors()[0]["loc"] == ("MainLeaf", "Typo")


def test_strict_model_python_names_rejected() -> None:
    with pytest.raises(ValidationError, match="leaf_value"):
        strict_model(Leaf).model_validate({"leaf_value": 1})


def test_strict_model_keeps_constraints_defaults_and_subclassing() -> None:
    strict_branch = strict_model(Branch)
    assert issubclass(strict_branch, Branch)
    assert issubclass(strict_branch, StrictWireModel)
    assert strict_branch.__name__ == "StrictBranch"
    assert strict_branch.model_validate({}).leaves == []
    with pytest.raises(ValidationError, match="at most 3"):
        strict_branch.model_validate({"Leaves": [{"LeafValue": n} for n in range(4)]})
    parsed = strict_branch.model_validate({"Leaves": [{"LeafValue": 5}]})
    assert isinstance(parsed.leaves[0], Leaf)
    assert dump_wire(parsed)["Leaves"] == [{"LeafValue": 5}]


def test_strict_model_built_once_per_model() -> None:
    assert strict_model(Branch) is strict_model(Branch)
    assert strict_model(StrictWireModel) is StrictWireModel


def test_strict_model_json_schema_forbids_additional_properties() -> None:
    schema = strict_model(Branch).model_json_schema()
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["StrictLeaf"]["additionalProperties"] is False


def test_timestamp_dumps_rfc3339_utc_with_milliseconds() -> None:
    moment = datetime(2026, 11, 21, 21, 20, 30, 123456, tzinfo=timezone(timedelta(hours=2)))
    branch = Branch(when=moment)
    assert dump_wire(branch)["When"] == "2026-11-21T19:20:30.123Z"
    assert format_timestamp(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00.000Z"


def test_timestamp_naive_datetime_rejected() -> None:
    with pytest.raises(ValidationError, match="timezone"):
        Branch.model_validate({"When": "2026-11-21T19:20:30"})
