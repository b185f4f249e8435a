"""Junk at the token endpoint gets an RFC 6749 error, never a 5xx (hypothesis, real server)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefctl.emulator.serve import RunningEmulator

ERRORS = {
    "invalid_request",
    "invalid_client",
    "invalid_grant",
    "invalid_scope",
    "unauthorized_client",
    "unsupported_grant_type",
}
FIELDS = [
    "grant_type",
    "scope",
    "client_id",
    "client_secret",
    "client_assertion",
    "client_assertion_type",
    "Grant_Type",
    "",
]
VALUES = [
    "client_credentials",
    "DEMO_CORP/admin",
    "DEMO_CORP/",
    "/admin",
    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
    "eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.",
    "eyJhbGciOiJFUzI1NiIsIng1dCNTMjU2IjoiYWJjIn0.e30.sig",
]
# Header values the HTTP client can send: printable ASCII, no surrounding whitespace.
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80).map(
    str.strip
)


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def form_bodies() -> st.SearchStrategy[bytes]:
    pair = st.tuples(
        st.sampled_from(FIELDS) | st.text(max_size=12),
        st.sampled_from(VALUES) | st.text(max_size=60),
    )
    encoded = st.lists(pair, max_size=8).map(
        lambda pairs: "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs).encode()
    )
    return encoded | st.binary(max_size=300)


def authorizations() -> st.SearchStrategy[str | None]:
    basic = st.tuples(st.text(max_size=50), st.text(max_size=70)).map(
        lambda p: "Basic " + base64.b64encode(f"{p[0]}:{p[1]}".encode()).decode()
    )
    return st.none() | basic | HEADER_TEXT.map(lambda t: ("Basic " + t).strip()) | HEADER_TEXT


CONTENT_TYPES = (
    st.sampled_from(
        [
            "application/x-www-form-urlencoded",
            "application/x-www-form-urlencoded; charset=utf-8",
            "application/x-www-form-urlencoded; charset=latin-1",
            "application/json",
            "multipart/form-data; boundary=x",
            "text/plain",
        ]
    )
    | HEADER_TEXT
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=form_bodies(), content_type=CONTENT_TYPES, authorization=authorizations())
def test_token_endpoint_answers_junk_with_rfc6749_errors(
    emulator: RunningEmulator,
    http: httpx.Client,
    body: bytes,
    content_type: str,
    authorization: str | None,
) -> None:
    headers = {"Content-Type": content_type}
    if authorization is not None:
        headers["Authorization"] = authorization

    response = http.post(emulator.token_url, content=body, headers=headers)

    assert response.status_code in (400, 401), response.text
    assert response.json()["error"] in ERRORS
    assert response.headers["cache-control"] == "no-store"


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(extra=st.dictionaries(st.sampled_from(FIELDS[2:]), st.text(max_size=40), max_size=3))
def test_token_endpoint_with_valid_basic_and_junk_fields_never_fails_server_side(
    emulator: RunningEmulator, http: httpx.Client, extra: dict[str, str]
) -> None:
    account = emulator.account
    form = {"grant_type": "client_credentials", "scope": "DEMO_CORP/admin", **extra}

    response = http.post(
        emulator.token_url, data=form, auth=(account.client_id, account.client_secret)
    )

    assert response.status_code in (200, 400, 401), response.text
    if response.status_code != 200:
        assert response.json()["error"] in ERRORS
