"""Patch bodies: shape detection, --set pairs, and merge patches computed from two profiles."""

from __future__ import annotations

from typing import Any

import pytest

from prefctl.api.client import JSON_PATCH, MERGE_PATCH
from prefctl.api.patches import (
    content_type_of,
    merge_patch,
    parse_assignment,
    patch_from_assignments,
)
from prefctl.errors import UsageError


def no_profile() -> dict[str, Any]:
    raise AssertionError("a merge patch needs no GET")


def test_content_type_array_is_json_patch_and_object_is_merge_patch() -> None:
    assert content_type_of([{"op": "add", "path": "/Tags/-", "value": "vip"}]) == JSON_PATCH
    assert content_type_of({"Tags": ["vip"]}) == MERGE_PATCH


@pytest.mark.parametrize("body", [[1, 2], "text", 3, [{"path": "/Tags"}]])
def test_content_type_of_other_shapes_is_usage_error(body: Any) -> None:
    with pytest.raises(UsageError):
        content_type_of(body)


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("CustomerName.FirstName=Ada", ("CustomerName", "FirstName"), "Ada"),
        ("Emails.0.IsDefault=true", ("Emails", 0, "IsDefault"), True),
        ("Tags.-=vip", ("Tags", "-"), "vip"),
        ("CustomerName.MiddleName=null", ("CustomerName", "MiddleName"), None),
        ('AlternateIds.0.Value="007"', ("AlternateIds", 0, "Value"), "007"),
        ("CustomFields=[]", ("CustomFields",), []),
        ("CustomerName.LastName=O'Hara = yes", ("CustomerName", "LastName"), "O'Hara = yes"),
    ],
)
def test_parse_assignment_reads_path_and_json_or_text_value(
    text: str, path: tuple[Any, ...], value: Any
) -> None:
    assignment = parse_assignment(text)
    assert assignment.path == path
    assert assignment.value == value


@pytest.mark.parametrize("text", ["NoEquals", "=1", "A..B=1", "0.A=1", "-=x", "Tags.-.X=1"])
def test_parse_assignment_malformed_is_usage_error(text: str) -> None:
    with pytest.raises(UsageError):
        parse_assignment(text)


def test_assignments_without_index_become_a_merge_patch_without_reading_the_profile() -> None:
    pairs = [
        parse_assignment("CustomerName.FirstName=Ada"),
        parse_assignment("CustomerName.MiddleName=null"),
        parse_assignment("DefaultLocale=en-GB"),
    ]
    assert patch_from_assignments(pairs, no_profile) == {
        "CustomerName": {"FirstName": "Ada", "MiddleName": None},
        "DefaultLocale": "en-GB",
    }


def test_assignments_that_conflict_are_usage_error() -> None:
    pairs = [parse_assignment("CustomerName=1"), parse_assignment("CustomerName.FirstName=A")]
    with pytest.raises(UsageError, match="conflicts"):
        patch_from_assignments(pairs, no_profile)


def test_assignments_with_index_become_a_json_patch_that_creates_missing_parents() -> None:
    profile = {"ProfileId": 7, "Emails": [{"Address": "a@example.com"}]}
    pairs = [
        parse_assignment("CustomerName.FirstName=Ada"),
        parse_assignment("Emails.0.IsDefault=true"),
        parse_assignment("Tags.-=vip"),
        parse_assignment("Emails.0.Address=b@example.com"),
    ]
    assert patch_from_assignments(pairs, lambda: profile) == [
        {"op": "add", "path": "/CustomerName", "value": {}},
        {"op": "add", "path": "/CustomerName/FirstName", "value": "Ada"},
        {"op": "add", "path": "/Emails/0/IsDefault", "value": True},
        {"op": "add", "path": "/Tags", "value": []},
        {"op": "add", "path": "/Tags/-", "value": "vip"},
        {"op": "add", "path": "/Emails/0/Address", "value": "b@example.com"},
    ]
    assert profile == {"ProfileId": 7, "Emails": [{"Address": "a@example.com"}]}


def test_assignment_replacing_a_list_item_uses_replace() -> None:
    patch = patch_from_assignments([parse_assignment("Tags.1=b")], lambda: {"Tags": ["a", "x"]})
    assert patch == [{"op": "replace", "path": "/Tags/1", "value": "b"}]


def test_assignment_index_out_of_range_is_usage_error_naming_the_size() -> None:
    with pytest.raises(UsageError, match="has 1 item"):
        patch_from_assignments(
            [parse_assignment("Emails.3.IsDefault=true")], lambda: {"Emails": [{}]}
        )


def test_assignment_indexing_a_non_list_is_usage_error() -> None:
    with pytest.raises(UsageError, match="not a list"):
        patch_from_assignments(
            [parse_assignment("CustomerName.0=x")], lambda: {"CustomerName": {"FirstName": "A"}}
        )


def test_merge_patch_changes_only_what_differs_and_nulls_what_is_gone() -> None:
    old = {
        "ProfileId": 1,
        "CustomerName": {"FirstName": "Ann", "LastName": "Lee"},
        "Tags": ["a"],
        "DefaultLocale": "en-US",
    }
    new = {
        "ProfileId": 1,
        "CustomerName": {"FirstName": "Ann"},
        "Tags": ["a", "b"],
        "CustomerType": "Business",
    }
    assert merge_patch(old, new) == {
        "CustomerName": {"LastName": None},
        "Tags": ["a", "b"],
        "DefaultLocale": None,
        "CustomerType": "Business",
    }
    assert merge_patch(old, old) == {}
