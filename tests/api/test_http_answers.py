"""The REST client against the answers of real deployments, from a scripted server on loopback
(``tests/auth/stub_server.py``): rate limits and retries, proxies' error pages, redirects,
timeouts, broken connections, gzip, huge and malformed bodies, proxies from the environment.

Waits between retries run on a ``FakeClock`` (``sleep=clock.advance``): nothing really sleeps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

from prefctl.api.client import ApiClient
from prefctl.api.events import EventQuery, EventsApi
from prefctl.api.imports import ImportsApi
from prefctl.api.profiles import ProfilesApi
from prefctl.auth.http_policy import MAX_ATTEMPTS, retry_after
from prefctl.clock import FakeClock
from prefctl.config import load_config, resolve_profile
from prefctl.errors import AuthError, ConfigError, PrefctlError, UnreachableError
from tests.auth.stub_server import StubTokenService, running_stub

PROBLEM = "application/problem+json"
PROXY_PAGE = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def waits(clock: FakeClock) -> list[float]:
    return []


def _client(
    clock: FakeClock, waits: list[float], *, timeout: float = 2.0, **overrides: str
) -> ApiClient:
    profile = resolve_profile(load_config(Path(os.environ["PREFCTL_CONFIG"])), overrides=overrides)

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)

    return ApiClient.for_profile(profile, clock=clock, sleep=sleep, timeout=timeout)


@pytest.fixture
def client(stub: StubTokenService, clock: FakeClock, waits: list[float]) -> Iterator[ApiClient]:
    with _client(clock, waits) as api:
        yield api


# -- 429 and 503: bounded retries ------------------------------------------------------------------
def test_429_with_retry_after_seconds_is_retried_after_that_wait(
    stub: StubTokenService, client: ApiClient, waits: list[float]
) -> None:
    stub.api_answer(429, {"title": "Too Many Requests"}, PROBLEM, headers={"Retry-After": "3"})
    stub.api_answer(200, {"Programs": []})
    assert client.get("/programs") == {"Programs": []}
    assert waits == [3.0]
    assert len(stub.api_requests) == 2


def test_429_with_retry_after_http_date_waits_until_then(
    stub: StubTokenService, client: ApiClient, clock: FakeClock, waits: list[float]
) -> None:
    when = format_datetime(clock.now() + timedelta(seconds=5), usegmt=True)
    stub.api_answer(429, b"", headers={"Retry-After": when})
    stub.api_answer(200, {"Programs": []})
    client.get("/programs")
    assert waits == [5.0]


def test_retry_after_reads_seconds_dates_and_nonsense(clock: FakeClock) -> None:
    now = clock.now()
    assert retry_after("7", now) == 7.0
    assert retry_after(format_datetime(now - timedelta(hours=1), usegmt=True), now) == 0.0
    assert retry_after("soon", now) is None
    assert retry_after(None, now) is None


def test_429_on_the_post_staging_an_import_is_retried_and_sent_whole_again(
    stub: StubTokenService, client: ApiClient, waits: list[float]
) -> None:
    stub.api_answer(429, {"title": "Too Many Requests"}, PROBLEM, headers={"Retry-After": "1"})
    stub.api_answer(200, {"ImportId": 7, "State": "Staging"})
    assert ImportsApi(client).stage(7, [{"Tags": ["a"]}])["State"] == "Staging"
    first, second = stub.api_requests
    assert first.method == second.method == "POST"
    assert first.path == second.path == "/api/v1/DEMO/imports/7/records"
    assert first.body == second.body == '[{"Tags":["a"]}]'
    assert waits == [1.0]


def test_429_without_retry_after_backs_off_then_fails_with_one_line(
    stub: StubTokenService, client: ApiClient, waits: list[float]
) -> None:
    for _ in range(MAX_ATTEMPTS):
        stub.api_answer(429, {"title": "Too Many Requests", "detail": "quota of 100/min"}, PROBLEM)
    with pytest.raises(PrefctlError) as caught:
        client.get("/programs")
    assert type(caught.value) is PrefctlError
    assert caught.value.exit_code == 1
    assert str(caught.value) == "Too Many Requests: quota of 100/min (HTTP 429, GET /programs)"
    assert waits == [1.0, 2.0, 4.0]
    assert len(stub.api_requests) == MAX_ATTEMPTS
    assert "rate limiting requests (tried 4 times over 7 s)" in (caught.value.hint or "")


def test_429_asking_for_a_longer_wait_than_the_budget_fails_at_once(
    stub: StubTokenService, client: ApiClient, waits: list[float]
) -> None:
    stub.api_answer(429, b"", headers={"Retry-After": "120"})
    with pytest.raises(PrefctlError) as caught:
        client.get("/programs")
    assert waits == []
    assert len(stub.api_requests) == 1
    assert "asks to wait 120 s, longer than prefctl waits (60 s in all" in (caught.value.hint or "")


def test_503_with_retry_after_is_retried_even_for_a_post(
    stub: StubTokenService, client: ApiClient, waits: list[float]
) -> None:
    stub.api_answer(503, b"Service Unavailable", "text/plain", headers={"Retry-After": "2"})
    stub.api_answer(201, {"ProfileId": 5})
    assert ProfilesApi(client).create({"Tags": ["x"]}) == {"ProfileId": 5}
    assert waits == [2.0]


def test_503_without_retry_after_is_retried_for_a_get_only(
    stub: StubTokenService, client: ApiClient, waits: list[float]
) -> None:
    stub.api_answer(503, b"", "text/plain")
    stub.api_answer(200, {"Programs": []})
    client.get("/programs")
    assert waits == [1.0]
    stub.requests.clear()
    stub.api_answer(503, b"", "text/plain")
    with pytest.raises(PrefctlError) as caught:
        ProfilesApi(client).create({"Tags": ["x"]})
    assert len(stub.api_requests) == 1
    assert "not retried" in (caught.value.hint or "")


@pytest.mark.parametrize("status", [500, 502, 504])
def test_server_errors_are_not_retried_and_never_show_the_proxy_page(
    stub: StubTokenService, client: ApiClient, waits: list[float], status: int
) -> None:
    stub.api_answer(status, PROXY_PAGE, "text/html")
    with pytest.raises(PrefctlError) as caught:
        client.get("/programs")
    message = str(caught.value)
    assert message.endswith(f"(HTTP {status}, GET /programs)")
    assert "<" not in message
    assert "nginx" not in message
    assert "proxy in front of it" in (caught.value.hint or "")
    assert waits == []
    assert len(stub.api_requests) == 1


def test_plain_text_500_shows_the_reason_and_the_service_words(
    stub: StubTokenService, client: ApiClient
) -> None:
    stub.api_answer(500, b"database is down\nat line 3\n", "text/plain")
    with pytest.raises(PrefctlError) as caught:
        client.get("/programs")
    assert str(caught.value) == (
        "Internal Server Error: database is down (HTTP 500, GET /programs)"
    )


# -- problem bodies --------------------------------------------------------------------------------
def test_problem_without_errors_gives_title_and_detail(
    stub: StubTokenService, client: ApiClient
) -> None:
    stub.api_answer(409, {"title": "Conflict", "status": 409, "detail": "import runs"}, PROBLEM)
    with pytest.raises(PrefctlError) as caught:
        ImportsApi(client).execute(7)
    assert str(caught.value) == "Conflict: import runs (HTTP 409, POST /imports/7/execute)"


def test_huge_problem_is_cut_to_a_bounded_line(stub: StubTokenService, client: ApiClient) -> None:
    errors = [{"field": f"Emails[{i}].Address", "message": "invalid " * 50} for i in range(500)]
    stub.api_answer(400, {"title": "Bad", "detail": "d" * 100_000, "errors": errors}, PROBLEM)
    with pytest.raises(PrefctlError) as caught:
        ProfilesApi(client).create({"Tags": ["x"]})
    message = str(caught.value)
    assert len(message) < 1100
    assert "\n" not in message
    assert "Emails[0].Address: invalid" in message
    assert message.endswith("(HTTP 400, POST /profiles)")


def test_problem_text_never_carries_a_token(stub: StubTokenService, client: ApiClient) -> None:
    client.get("/programs")
    token = stub.issued[-1]
    stub.api_answer(400, {"title": "Bad", "detail": f"header was Bearer {token}"}, PROBLEM)
    with pytest.raises(PrefctlError) as caught:
        client.get("/programs")
    assert token not in str(caught.value)
    assert token.split(".")[1] not in str(caught.value)


# -- redirects -------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirect_to_another_host_is_reported_and_never_followed(
    stub: StubTokenService, client: ApiClient, status: int
) -> None:
    with running_stub() as other:
        target = f"{other.url}/api/v1/DEMO/programs"
        stub.api_answer(status, b"<html>moved</html>", "text/html", headers={"Location": target})
        with pytest.raises(PrefctlError) as caught:
            client.get("/programs")
        assert other.requests == []  # neither the request nor its Authorization went there
    assert str(caught.value) == (
        f"the REST API redirected GET /programs to {target} (HTTP {status})"
    )
    assert "set api_url" in (caught.value.hint or "")


def test_relative_redirect_names_the_absolute_location(
    stub: StubTokenService, client: ApiClient
) -> None:
    stub.api_answer(301, b"", headers={"Location": "/v2/DEMO/programs"})
    with pytest.raises(PrefctlError) as caught:
        client.get("/programs")
    assert f"to {stub.url}/v2/DEMO/programs (HTTP 301)" in str(caught.value)


# -- connections: slow, broken, compressed ---------------------------------------------------------
def test_answer_slower_than_the_timeout_is_unreachable_on_one_line(
    stub: StubTokenService, clock: FakeClock, waits: list[float]
) -> None:
    stub.api_answer(200, {"Programs": []}, delay=1.0)
    with _client(clock, waits, timeout=0.3) as api, pytest.raises(UnreachableError) as caught:
        api.get("/programs")
    assert caught.value.exit_code == 5
    assert str(caught.value).endswith("did not answer GET /programs within 0.3 s")
    assert waits == []


def test_connection_reset_mid_answer_is_unreachable_and_a_post_may_have_happened(
    stub: StubTokenService, client: ApiClient
) -> None:
    stub.api_answer(200, {"Programs": [{"Name": "x" * 500}]}, reset=True)
    with pytest.raises(UnreachableError) as get_error:
        client.get("/programs")
    assert "broke before GET /programs was answered" in str(get_error.value)
    assert "carried out" not in (get_error.value.hint or "")
    stub.api_answer(201, {"ProfileId": 1, "Tags": ["x" * 500]}, reset=True)
    with pytest.raises(UnreachableError) as post_error:
        ProfilesApi(client).create({"Tags": ["x"]})
    assert post_error.value.exit_code == 5
    assert "broke before POST /profiles was answered" in str(post_error.value)
    assert "may have carried out the request" in (post_error.value.hint or "")
    assert len(stub.api_requests) == 2  # neither was repeated


def test_gzip_encoded_answer_is_decoded(stub: StubTokenService, client: ApiClient) -> None:
    stub.api_answer(200, {"Programs": [{"ProgramId": 1, "Name": "Gz"}]}, gzip=True)
    assert client.get("/programs") == {"Programs": [{"ProgramId": 1, "Name": "Gz"}]}


# -- 200 with an unexpected body -------------------------------------------------------------------
def test_200_html_login_page_is_an_error_naming_the_content_type(
    stub: StubTokenService, client: ApiClient
) -> None:
    stub.api_answer(200, b"<html>Sign in</html>", "text/html")
    with pytest.raises(PrefctlError) as caught:
        client.get("/programs")
    assert str(caught.value) == (
        "the REST API answered GET /programs with text/html, not JSON (HTTP 200)"
    )


def test_page_with_an_item_that_is_not_an_object_is_an_error(
    stub: StubTokenService, client: ApiClient
) -> None:
    stub.api_answer(200, {"Events": [{"EventId": "a"}, 1], "NextCursor": None})
    with pytest.raises(PrefctlError) as caught:
        EventsApi(client).list(EventQuery())
    assert str(caught.value) == (
        "the REST API answered GET /events with Events[1] that is not a JSON object"
    )


# -- 401 after a good token ------------------------------------------------------------------------
def test_401_after_a_good_token_renews_once_then_is_an_auth_error(
    stub: StubTokenService, client: ApiClient
) -> None:
    client.get("/programs")
    assert len(stub.token_requests) == 1
    stub.api_rejects_all = True
    with pytest.raises(AuthError) as caught:
        client.get("/programs")
    assert caught.value.exit_code == 3
    assert len(stub.token_requests) == 2
    assert len(stub.api_requests) == 3


# -- proxies from the environment ------------------------------------------------------------------
def test_loopback_is_reached_directly_whatever_the_proxy_variables_say(
    stub: StubTokenService, client: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = "http://127.0.0.1:9"  # nothing listens: a request through it would fail
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, closed)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with _client(FakeClock(), []) as api:
        assert api.get("/programs") == {}


def test_remote_host_goes_through_the_proxy_of_the_environment(
    stub: StubTokenService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", stub.url)  # the stub serves absolute-form requests too
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    remote = "http://api.example.test/api/v1"
    with _client(FakeClock(), [], api_url=remote, allow_insecure_http="true") as api:
        assert api.get("/programs") == {}
    (request,) = stub.api_requests
    assert request.proxied_to == "api.example.test"
    assert request.path == "/api/v1/DEMO/programs"


def test_proxy_variable_httpx_cannot_use_is_a_config_error(
    stub: StubTokenService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "ftp://proxy.example.test:21")
    with pytest.raises(ConfigError) as caught:
        _client(FakeClock(), [], api_url="https://api.example.test/api/v1")
    assert caught.value.exit_code == 2
    assert "HTTPS_PROXY" in str(caught.value)
