"""The pieces of ``prefctl api`` that need no server: targets, headers, fields, pages."""

from __future__ import annotations

import pytest

from prefctl.api.raw import build_fields, paginate, parse_headers, resolve_target
from prefctl.errors import PrefctlError, UsageError

API = "http://127.0.0.1:8750/api/v1"
BASE = f"{API}/ACME"


def _no_file(name: str) -> str:
    raise AssertionError(name)


def test_resolve_target_resolves_dot_segments_inside_the_base() -> None:
    assert resolve_target("programs", API, BASE) == f"{BASE}/programs"
    assert resolve_target("/a/./b/../c?x=1#frag", API, BASE) == f"{BASE}/a/c?x=1"
    assert resolve_target(f"{BASE}/a/%2E%2e/b", API, BASE) == f"{BASE}/b"
    assert resolve_target(f"{API}/OTHER/programs", API, BASE) == f"{API}/OTHER/programs"


@pytest.mark.parametrize(
    "path",
    [
        f"{API}/../../../oauth2/v1/keys",
        f"{API}/%2e%2e/%2e%2e/oauth2/v1/keys",
        "../../../oauth2/v1/keys",
        "a/..%2F..%2F..%2Foauth2",
        "https://127.0.0.1:8750/api/v1/programs",  # another scheme
        "http://127.0.0.1:8751/api/v1/programs",  # another port
        "http://user@127.0.0.1:8750/api/v1/programs",
        "http://127.0.0.1:8750/api/v10/programs",  # a prefix, not a path under it
    ],
)
def test_resolve_target_outside_api_url_is_a_usage_error(path: str) -> None:
    with pytest.raises(UsageError):
        resolve_target(path, API, BASE)


def test_parse_headers_refuses_what_prefctl_sets_itself() -> None:
    assert parse_headers(["X-A: 1", "x-a:2", "Accept: text/plain"]) == {
        "x-a": "2",
        "Accept": "text/plain",
    }
    for bad in ("Authorization: Bearer x", "host: evil", "no-colon", "Bad Name: 1"):
        with pytest.raises(UsageError):
            parse_headers([bad])


def test_build_fields_types_nests_and_appends() -> None:
    fields = [
        ("a", "1", True),
        ("b", "1", False),
        ("c", "true", True),
        ("d", "null", True),
        ("e", "2.5", True),
        ("f", "text", True),
        ("n[x]", "1", True),
        ("n[y][z]", "s", False),
        ("l[]", "1", True),
        ("l[]", "2", True),
        ("o[][k]", "1", False),
        ("o[][k]", "2", False),
        ("file", "@notes.txt", True),
    ]
    body = build_fields(fields, lambda name: f"contents of {name}", as_query=False)
    assert body == {
        "a": 1,
        "b": "1",
        "c": True,
        "d": None,
        "e": 2.5,
        "f": "text",
        "n": {"x": 1, "y": {"z": "s"}},
        "l": [1, 2],
        "o": [{"k": "1"}, {"k": "2"}],
        "file": "contents of notes.txt",
    }


def test_build_fields_conflicts_are_usage_errors() -> None:
    for fields in (
        [("a", "1", False), ("a", "2", False)],
        [("a[]", "1", False), ("a[b]", "2", False)],
        [("a]b", "1", False)],
        [("n", "1e999", True)],
    ):
        with pytest.raises(UsageError):
            build_fields(fields, _no_file, as_query=False)
    with pytest.raises(UsageError):
        build_fields([("a[b]", "1", False)], _no_file, as_query=True)
    assert build_fields([("a", "1", False), ("a", "true", True)], _no_file, as_query=True) == {
        "a": ["1", "true"]
    }


def test_paginate_stops_on_a_repeated_cursor() -> None:
    pages = {"c1": {"Items": [2], "NextCursor": "c1"}}
    first = {"Items": [1], "NextCursor": "c1"}
    with pytest.raises(PrefctlError, match="twice"):
        list(paginate(first, pages.__getitem__))
    assert list(paginate({"Items": [1], "NextCursor": None}, _no_file)) == [1]
