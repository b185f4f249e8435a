"""What every route shares: problem bodies for every error, size and media-type limits, OpenAPI."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from prefctl.emulator.routes._common import ACCOUNT_PREFIX, MAX_BODY_BYTES
from tests.emulator.routes._api import Api, assert_problem


def test_unknown_path_is_404_problem(api: Api) -> None:
    assert_problem(api.get("/nothing-here"), 404)
    assert_problem(httpx.get(f"{api.emulator.url}/nothing-here"), 404)


def test_wrong_method_is_405_problem_with_allow(api: Api) -> None:
    answer = api.delete("/programs")

    assert_problem(answer, 405)
    assert answer.headers["allow"] == "GET"


def test_405_allow_lists_every_method_of_the_path(api: Api) -> None:
    # One route per method: Allow names them all, not the first route's only.
    profile_id = api.create_profile({"Tags": ["allow"]})["ProfileId"]
    assert api.client.request("TRACE", "/profiles").headers["allow"] == "GET, POST"
    answer = api.client.request("POST", f"/profiles/{profile_id}")
    assert_problem(answer, 405)
    assert answer.headers["allow"] == "DELETE, GET, PATCH, PUT"


def test_trailing_slash_is_404_not_a_redirect(api: Api) -> None:
    answer = api.get("/programs/", headers={"Host": "evil.example"})
    assert_problem(answer, 404)
    assert "location" not in answer.headers


def test_body_over_the_limit_is_413_before_it_is_read(api: Api) -> None:
    body = b"[" + b" " * MAX_BODY_BYTES + b"]"

    answer = api.post("/profiles", content=body, headers={"Content-Type": "application/json"})

    assert "larger than 1048576 bytes" in assert_problem(answer, 413)["detail"]


def test_chunked_body_over_the_limit_is_413_while_it_is_read(api: Api) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"Tags": ["'
        for _ in range(40):
            yield b"x" * 32 * 1024
        yield b'"]}'

    answer = api.post("/profiles", content=chunks(), headers={"Content-Type": "application/json"})

    assert answer.request.headers["transfer-encoding"] == "chunked"
    assert_problem(answer, 413)


def test_body_in_another_media_type_is_415(api: Api) -> None:
    answer = api.post("/profiles", content=b"<profile/>", headers={"Content-Type": "text/xml"})

    problem = assert_problem(answer, 415)
    assert problem["detail"] == "'text/xml' is not accepted here; send application/json"
    assert answer.headers["accept"] == "application/json"


def test_body_without_content_type_is_415(api: Api) -> None:
    assert_problem(api.put("/settings/webhooks", content=b"{}"), 415)


def test_invalid_query_parameter_is_400_naming_it(api: Api) -> None:
    problem = assert_problem(api.get("/profiles", params={"limit": "many"}), 400)

    assert problem["title"] == "Invalid request"
    assert problem["errors"][0]["field"] == "limit"


def test_openapi_documents_auth_errors_and_permission_of_every_account_operation(
    api: Api,
) -> None:
    document = httpx.get(f"{api.emulator.url}/openapi.json").json()

    operations = [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]
    account_operations = [o for o in operations if o[0].startswith(ACCOUNT_PREFIX)]
    assert len(account_operations) >= 18
    for path, method, operation in account_operations:
        responses = operation["responses"]
        assert {"400", "401", "403"} <= responses.keys(), (method, path)
        assert responses["401"]["content"] == {
            "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
        assert operation["x-permission"] in operation["description"]
        assert operation["security"] == [{"HTTPBearer": []}]
    for path, method, operation in operations:
        assert "422" not in operation["responses"], (method, path)
    assert "HTTPValidationError" not in document["components"]["schemas"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"CustomFields": [{"Name": "x", "Value": NaN}]}',
        b'{"CustomFields": [{"Name": "x", "Value": 1e400}]}',
        b'{"Tags": ["\\ud800"]}',
        b'{"Tags": ["a"]}\xff',
    ],
    ids=["NaN", "infinity", "lone surrogate", "invalid UTF-8"],
)
def test_json_the_store_could_not_write_back_is_400(api: Api, body: bytes) -> None:
    answer = api.post("/profiles", content=body, headers={"Content-Type": "application/json"})

    assert "not valid JSON" in assert_problem(answer, 400)["detail"]


def test_integer_beyond_64_bits_is_stored_as_a_number(api: Api) -> None:
    body = b'{"CustomFields": [{"Name": "x", "Value": 123456789012345678901234567890}]}'

    answer = api.post("/profiles", content=body, headers={"Content-Type": "application/json"})

    assert answer.status_code == 201
    assert answer.json()["CustomFields"][0]["Value"] == pytest.approx(1.2345678901234568e29)
