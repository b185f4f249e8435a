"""JSON Patch (RFC 6902) and merge patch (RFC 7396) on wire dicts, with the RFCs' own examples."""

from __future__ import annotations

from typing import Any

import pytest

from prefctl.emulator.routes._patch import (
    PatchConflictError,
    PatchDocumentError,
    apply_json_patch,
    apply_merge_patch,
    parse_pointer,
)


@pytest.mark.parametrize(
    ("document", "patch", "expected"),
    [
        # RFC 6902 Appendix A.1 – A.10, A.16
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/baz", "value": "qux"}],
            {"foo": "bar", "baz": "qux"},
        ),
        (
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
        ),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        (
            {"foo": ["bar", "qux", "baz"]},
            [{"op": "remove", "path": "/foo/1"}],
            {"foo": ["bar", "baz"]},
        ),
        (
            {"baz": "qux", "foo": "bar"},
            [{"op": "replace", "path": "/baz", "value": "boo"}],
            {"baz": "boo", "foo": "bar"},
        ),
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            {"foo": ["all", "grass", "cows", "eat"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["all", "cows", "eat", "grass"]},
        ),
        (
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [
                {"op": "test", "path": "/baz", "value": "qux"},
                {"op": "test", "path": "/foo/1", "value": 2},
            ],
            {"baz": "qux", "foo": ["a", 2, "c"]},
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
            {"foo": "bar", "child": {"grandchild": {}}},
        ),
        (
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
            {"foo": ["bar", ["abc", "def"]]},
        ),
        # A.14: ~ escapes; A.16: the whole document
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
        ({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}], {"b": 2}),
        (
            {"a": {"b": 1}},
            [{"op": "copy", "from": "/a", "path": "/c"}],
            {"a": {"b": 1}, "c": {"b": 1}},
        ),
    ],
)
def test_apply_json_patch_rfc_examples(document: Any, patch: Any, expected: Any) -> None:
    assert apply_json_patch(document, patch) == expected


def test_apply_json_patch_never_modifies_its_input() -> None:
    document = {"Tags": ["a"], "Name": {"First": "Ann"}}

    apply_json_patch(document, [{"op": "add", "path": "/Tags/-", "value": "b"}])

    assert document == {"Tags": ["a"], "Name": {"First": "Ann"}}


def test_apply_json_patch_copy_is_independent_of_its_source() -> None:
    result = apply_json_patch(
        {"a": {"b": 1}},
        [{"op": "copy", "from": "/a", "path": "/c"}, {"op": "replace", "path": "/c/b", "value": 2}],
    )

    assert result == {"a": {"b": 1}, "c": {"b": 2}}


@pytest.mark.parametrize(
    ("document", "operation", "message"),
    [
        (
            {"foo": "bar"},
            {"op": "add", "path": "/baz/bat", "value": "qux"},
            "does not exist",
        ),  # A.12
        ({"baz": "qux"}, {"op": "test", "path": "/baz", "value": "bar"}, "differs"),  # A.13
        ({"foo": ["bar"]}, {"op": "add", "path": "/foo/5", "value": 1}, "out of range"),
        ({"foo": ["bar"]}, {"op": "remove", "path": "/foo/01"}, "not an array index"),
        ({"foo": ["bar"]}, {"op": "remove", "path": "/foo/-"}, "not an array index"),
        ({"foo": 1}, {"op": "test", "path": "/foo", "value": True}, "differs"),  # 1 is not true
        ({"foo": "x"}, {"op": "add", "path": "/foo/bar", "value": 1}, "cannot add"),
        ({"foo": "x"}, {"op": "replace", "path": "/nope", "value": 1}, "does not exist"),
    ],
)
def test_apply_json_patch_operation_that_cannot_apply_is_a_conflict(
    document: Any, operation: dict[str, Any], message: str
) -> None:
    with pytest.raises(PatchConflictError, match=message):
        apply_json_patch(document, [operation])


def test_apply_json_patch_numbers_compare_by_value() -> None:
    assert apply_json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 1.0}]) == {"a": 1}


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"op": "add"}, ""),
        ([{"path": "/a", "value": 1}], "[0].op"),
        ([{"op": "add", "value": 1}], "[0].path"),
        ([{"op": "add", "path": "a", "value": 1}], "[0].path"),
        ([{"op": "replace", "path": "/a"}], "[0].value"),
        ([{"op": "move", "path": "/a"}], "[0].from"),
        ([{"op": "move", "from": "/a", "path": "/a/b"}], "[0].from"),
        (["add"], "[0]"),
        # Members of the wrong JSON kind (issue 18: a list op was a TypeError, a 500).
        ([{"op": ["add"], "path": "/a", "value": 1}], "[0].op"),
        ([{"op": {}, "path": "/a", "value": 1}], "[0].op"),
        ([{"op": 1, "path": "/a", "value": 1}], "[0].op"),
        ([{"op": "add", "path": ["/a"], "value": 1}], "[0].path"),
        ([{"op": "copy", "from": {"a": 1}, "path": "/b"}], "[0].from"),
    ],
)
def test_apply_json_patch_malformed_document_names_the_fault(patch: Any, field: str) -> None:
    with pytest.raises(PatchDocumentError) as caught:
        apply_json_patch({"a": {}}, patch)

    assert caught.value.field == field


@pytest.mark.parametrize(
    ("op", "said"),
    [
        (["add"], "not a JSON array"),
        ({}, "not a JSON object"),
        (True, "not a JSON boolean"),
        (None, "is required"),
        ("x" * 1000, "not '" + "x" * 40 + "'…"),
    ],
)
def test_apply_json_patch_op_of_another_kind_is_named_by_its_kind(op: Any, said: str) -> None:
    with pytest.raises(PatchDocumentError) as caught:
        apply_json_patch({}, [{"op": op, "path": "/a", "value": 1}])

    assert said in caught.value.message
    assert len(caught.value.message) < 120


def test_apply_json_patch_checks_the_whole_document_before_applying() -> None:
    patch = [{"op": "remove", "path": "/missing"}, {"op": "bogus", "path": "/"}]

    with pytest.raises(PatchDocumentError):
        apply_json_patch({}, patch)


def test_parse_pointer_unescapes_tokens() -> None:
    assert parse_pointer("/a~1b/~0c/0") == ["a/b", "~c", "0"]
    assert parse_pointer("") == []


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        # RFC 7396 Appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_apply_merge_patch_rfc_examples(target: Any, patch: Any, expected: Any) -> None:
    assert apply_merge_patch(target, patch) == expected
