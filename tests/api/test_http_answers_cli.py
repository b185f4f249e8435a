"""Admin commands against the answers of real deployments (``tests/auth/stub_server.py``): what
the user sees on the terminal and the exit code. ``Retry-After: 0`` keeps the retries instant."""

from __future__ import annotations

import pytest

from tests.auth.helpers import write_profile
from tests.auth.stub_server import StubTokenService
from tests.helpers import CliResult, run_cli

PROBLEM = "application/problem+json"


def _one_line_error(result: CliResult, code: int) -> str:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


def test_profiles_import_429_on_staging_is_retried_and_logged_with_v(
    stub: StubTokenService,
) -> None:
    stub.api_answer(201, {"ImportId": 7, "State": "Initiated"})
    stub.api_answer(429, {"title": "Too Many Requests"}, PROBLEM, headers={"Retry-After": "0"})
    stub.api_answer(200, {"ImportId": 7, "State": "Staging"})
    stub.api_answer(202, {"ImportId": 7, "State": "Queued"})
    done = {"ImportId": 7, "State": "Completed", "TotalRecords": 1, "FailedRecords": 0}
    stub.api_answer(200, done)
    result = run_cli("-v", "profiles", "import", "-", stdin='{"Tags": ["a"]}\n')
    assert result.exit_code == 0, result.output
    staged = [r for r in stub.api_requests if r.path.endswith("/imports/7/records")]
    assert len(staged) == 2
    assert staged[0].body == staged[1].body
    assert "POST /api/v1/DEMO/imports/7/records → 429; retrying in 0 s (attempt 2 of 4)" in (
        result.stderr
    )
    assert stub.issued[-1] not in result.stderr


def test_settings_get_persistent_429_is_one_line_exit_1_with_the_service_message(
    stub: StubTokenService,
) -> None:
    for _ in range(4):
        stub.api_answer(
            429,
            {"title": "Too Many Requests", "detail": "quota exceeded"},
            PROBLEM,
            headers={"Retry-After": "0"},
        )
    line = _one_line_error(run_cli("settings", "get"), 1)
    assert line.startswith(
        "error: Too Many Requests: quota exceeded (HTTP 429, GET /settings/webhooks) — "
    )
    assert "tried 4 times" in line


def test_programs_list_proxy_html_502_is_one_line_exit_1(stub: StubTokenService) -> None:
    stub.api_answer(
        502, b"<html><body>" + b"<p>Bad Gateway</p>" * 50_000 + b"</body></html>", "text/html"
    )
    line = _one_line_error(run_cli("programs", "list"), 1)
    assert line.startswith("error: Bad Gateway (HTTP 502, GET /programs) — ")
    assert "<" not in line


def test_events_list_with_an_item_that_is_not_an_object_is_one_line_not_a_crash(
    stub: StubTokenService,
) -> None:
    stub.api_answer(200, {"Events": [1], "NextCursor": None})
    line = _one_line_error(run_cli("events", "list"), 1)
    assert "Events[0] that is not a JSON object" in line
    assert "internal error" not in line


def test_401_after_a_good_token_is_renewed_once_then_exit_3(stub: StubTokenService) -> None:
    assert run_cli("token", "get").exit_code == 0
    stub.api_rejects_all = True
    line = _one_line_error(run_cli("programs", "list"), 3)
    assert "(HTTP 401, GET /programs)" in line
    assert len(stub.token_requests) == 2
    assert len(stub.api_requests) == 2


def test_redirect_is_one_line_exit_1_naming_where(stub: StubTokenService) -> None:
    stub.api_answer(301, b"", headers={"Location": "https://api.example.test/v1/DEMO/programs"})
    line = _one_line_error(run_cli("programs", "list"), 1)
    assert "redirected GET /programs to https://api.example.test/v1/DEMO/programs" in line
    assert len(stub.api_requests) == 1


def test_unusable_proxy_variable_is_exit_2_not_a_crash(
    stub: StubTokenService, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_profile(
        stub.url, client_secret_env="TEST_CLIENT_SECRET", api_url="https://api.example.test/v1"
    )
    monkeypatch.setenv("HTTPS_PROXY", "ftp://proxy.example.test:21")  # not an HTTP proxy
    line = _one_line_error(run_cli("programs", "list"), 2)
    assert "HTTPS_PROXY" in line
    assert stub.requests == []
