"""``prefctl token`` against a scripted token service on loopback (failure modes, output shape).

The three auth methods against the real emulator are in ``tests/auth/test_emulator_auth.py``.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from prefctl import certs
from prefctl.auth.cache import CachedToken, TokenCache
from prefctl.clock import SystemClock
from tests.auth.helpers import CLIENT_ID, CLIENT_SECRET, SCOPE, write_profile
from tests.auth.stub_server import StubTokenService, running_stub
from tests.helpers import free_port, run_cli, run_in_terminal


def _cache() -> TokenCache:
    return TokenCache.default(SystemClock())


def _one_line_error(result: object, code: int) -> str:
    assert result.exit_code == code, result.output  # type: ignore[attr-defined]
    assert result.stdout == ""  # type: ignore[attr-defined]
    lines = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, result.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith("error: ")
    return lines[0]


# -- get -------------------------------------------------------------------------------------------
def test_token_get_prints_only_the_token_and_caches_it(stub: StubTokenService) -> None:
    first = run_cli("token", "get")
    assert first.exit_code == 0, first.output
    assert first.stdout == stub.issued[0] + "\n"
    assert first.stderr == ""
    second = run_cli("token", "get")
    assert second.stdout == first.stdout
    assert len(stub.token_requests) == 1
    (entry,) = (Path(os.environ["PREFCTL_CACHE_DIR"]) / "tokens").iterdir()
    assert oct(entry.stat().st_mode & 0o777) == "0o600"


def test_token_get_json_prints_the_response_with_expires_in_from_now(
    stub: StubTokenService,
) -> None:
    now = SystemClock().now()
    _cache().store(CachedToken.from_response(stub.url, CLIENT_ID, SCOPE, "tok", "Bearer", 600, now))
    result = run_cli("token", "get", "--json")
    assert result.exit_code == 0, result.output
    data = result.json
    assert data["access_token"] == "tok"
    assert (data["token_type"], data["scope"]) == ("Bearer", SCOPE)
    assert 595 <= data["expires_in"] <= 600
    assert run_cli("-o", "json", "token", "get").json["access_token"] == "tok"


def test_token_get_force_fetches_a_new_token(stub: StubTokenService) -> None:
    first = run_cli("token", "get").stdout
    forced = run_cli("token", "get", "--force").stdout
    assert forced != first
    assert run_cli("token", "get").stdout == forced


def test_token_get_scope_option_asks_for_that_scope(stub: StubTokenService) -> None:
    result = run_cli("token", "get", "--scope", "OTHER/bot")
    assert result.exit_code == 0
    assert stub.token_requests[0].form["scope"] == "OTHER/bot"


def test_token_get_expired_cached_token_is_renewed_transparently(stub: StubTokenService) -> None:
    now = SystemClock().now()
    _cache().store(CachedToken.from_response(stub.url, CLIENT_ID, SCOPE, "old", "Bearer", -5, now))
    result = run_cli("token", "get")
    assert result.exit_code == 0
    assert result.stdout == stub.issued[0] + "\n"
    assert result.stderr == ""


def test_token_get_unknown_profile_is_one_line_exit_2(stub: StubTokenService) -> None:
    line = _one_line_error(run_cli("-p", "nope", "token", "get"), 2)
    assert "unknown profile 'nope'" in line


def test_token_get_missing_secret_is_exit_2(
    stub: StubTokenService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_CLIENT_SECRET")
    line = _one_line_error(run_cli("token", "get"), 2)
    assert "no client secret" in line
    assert "TEST_CLIENT_SECRET" in line


def test_token_get_unreadable_secret_file_is_exit_2(stub: StubTokenService, tmp_path: Path) -> None:
    # A folder cannot be read as a file, even by root (unlike a chmod 000 file).
    secret_file = tmp_path / "secret"
    secret_file.mkdir()
    write_profile(stub.url, client_secret_env="", client_secret_file=str(secret_file))
    line = _one_line_error(run_cli("token", "get"), 2)
    assert f"cannot read the client secret of profile 'local' from {secret_file}" in line


def test_token_get_cached_token_skips_the_credentials_force_checks_them(
    stub: StubTokenService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As docs/authentication.md says: the cache answers without reading the secret; --force
    # always asks the token service, so it is the credential check for CI.
    assert run_cli("token", "get").exit_code == 0
    monkeypatch.delenv("TEST_CLIENT_SECRET")
    cached = run_cli("token", "get")
    assert (cached.exit_code, cached.stdout) == (0, stub.issued[0] + "\n")
    line = _one_line_error(run_cli("token", "get", "--force"), 2)
    assert "no client secret" in line


def test_token_get_unreachable_auth_url_is_exit_5_naming_the_url(
    stub: StubTokenService,
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    write_profile(url, client_secret_env="TEST_CLIENT_SECRET")
    line = _one_line_error(run_cli("token", "get"), 5)
    assert f"{url}/oauth2/v1/token" in line


def test_token_get_non_json_answer_is_exit_1_with_the_status(stub: StubTokenService) -> None:
    stub.answer(500, b"Internal Server Error", "text/plain")
    line = _one_line_error(run_cli("token", "get"), 1)
    assert "HTTP 500 with text/plain, not JSON" in line


def test_token_get_rfc6749_error_shows_error_and_description(stub: StubTokenService) -> None:
    stub.answer(400, {"error": "invalid_scope", "error_description": "unknown user 'admin'"})
    line = _one_line_error(run_cli("token", "get"), 3)
    assert "invalid_scope: unknown user 'admin'" in line


def test_token_get_malformed_certificate_is_exit_2(stub: StubTokenService, tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "c.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    key.write_text("garbage")
    write_profile(stub.url, auth_method="certificate", certificate=cert, private_key=key)
    line = _one_line_error(run_cli("token", "get"), 2)
    assert f"{cert} is not a PEM certificate" in line


def test_token_get_malformed_private_key_is_exit_2(stub: StubTokenService, tmp_path: Path) -> None:
    certs.init_ca(tmp_path)
    issued = certs.issue_client(tmp_path, "bot")
    issued.private_key.write_text(
        "-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n"
    )
    write_profile(
        stub.url,
        auth_method="certificate",
        certificate=issued.certificate,
        private_key=issued.private_key,
    )
    line = _one_line_error(run_cli("token", "get"), 2)
    assert f"{issued.private_key} is not a PEM private key" in line
    assert stub.token_requests == []


@pytest.mark.parametrize("as_json", [False, True])
def test_token_get_vvv_never_logs_the_secret_or_the_token(
    stub: StubTokenService, as_json: bool
) -> None:
    args = ["-vvv", "token", "get", "--force"] + (["--json"] if as_json else [])
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    (token,) = stub.issued
    assert "POST" in result.stderr  # the logs are there...
    assert CLIENT_SECRET not in result.output  # ...without the secret
    assert base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode() not in result.output
    assert token not in result.stderr
    if as_json:
        assert json.loads(result.stdout)["access_token"] == token
    else:
        assert result.stdout == token + "\n"


# -- inspect ---------------------------------------------------------------------------------------
def test_token_inspect_shows_scope_and_time_left(stub: StubTokenService) -> None:
    token = stub.mint(scope="DEMO/admin", lifetime=3600)
    result = run_cli("token", "inspect", token)
    assert result.exit_code == 0, result.output
    assert "DEMO/admin" in result.stdout
    assert "59 min" in result.stdout
    assert "not checked" in result.stdout
    assert token not in result.output


def test_token_inspect_reads_stdin_and_prints_json(stub: StubTokenService) -> None:
    token = stub.mint(lifetime=120)
    data = run_cli("-o", "json", "token", "inspect", "-", stdin=token + "\n").json
    assert data["scope"] == "DEMO/admin"
    assert data["header"]["alg"] == "RS256"
    assert data["claims"]["aud"] == "prefctl-api"
    assert 100 < data["seconds_left"] <= 120
    assert (data["expired"], data["verified"]) == (False, False)


def test_token_inspect_dash_on_a_terminal_says_it_is_reading(stub: StubTokenService) -> None:
    # '-' with stdin a terminal: without a word, prefctl would seem to hang.
    token = stub.mint(lifetime=120)
    result = run_in_terminal(
        "token", "inspect", "-", answers=[("end it with Ctrl-D", token + "\n\x04")]
    )
    assert result.exit_code == 0, result.output
    assert "reading the token from the terminal" in result.output
    assert "DEMO/admin" in result.output


def test_token_inspect_without_argument_uses_the_profile_token(stub: StubTokenService) -> None:
    result = run_cli("-o", "json", "token", "inspect")
    assert result.exit_code == 0, result.output
    assert result.json["claims"]["jti"]
    assert len(stub.token_requests) == 1


def test_token_inspect_expired_token_says_so_and_exits_1(stub: StubTokenService) -> None:
    token = stub.mint(lifetime=-90)
    result = run_cli("token", "inspect", token)
    assert result.exit_code == 1
    assert "expired 1 min" in result.stdout
    assert result.stderr.strip().startswith("error: the token expired 1 min")


def test_token_inspect_verify_checks_the_issuer_keys(stub: StubTokenService) -> None:
    token = stub.mint()
    result = run_cli("-o", "json", "token", "inspect", "--verify", token)
    assert result.exit_code == 0, result.output
    assert result.json["verified"] is True
    assert any(r.path == "/oauth2/v1/keys" for r in stub.requests)


def test_token_inspect_verify_expired_token_says_the_signature_is_valid_and_it_expired(
    stub: StubTokenService,
) -> None:
    line = _one_line_error(run_cli("token", "inspect", "--verify", stub.mint(lifetime=-90)), 1)
    assert "verification failed: the signature is valid but the token expired at" in line
    assert "not checked" not in line
    assert any(r.path == "/oauth2/v1/keys" for r in stub.requests)


def test_token_inspect_verify_expired_forged_token_reports_the_signature(
    stub: StubTokenService,
) -> None:
    header, _payload, signature = stub.mint().split(".")
    forged = stub.mint(lifetime=-90).split(".")[1]
    line = _one_line_error(
        run_cli("token", "inspect", "--verify", f"{header}.{forged}.{signature}"), 1
    )
    assert "verification failed" in line
    assert "signature is valid" not in line


def test_token_inspect_verify_rejects_a_tampered_token(stub: StubTokenService) -> None:
    header, _payload, signature = stub.mint().split(".")
    forged = stub.mint(scope="DEMO/root").split(".")[1]
    line = _one_line_error(
        run_cli("token", "inspect", "--verify", f"{header}.{forged}.{signature}"), 1
    )
    assert "verification failed" in line


def test_token_inspect_verify_rejects_a_foreign_audience(stub: StubTokenService) -> None:
    line = _one_line_error(run_cli("token", "inspect", "--verify", stub.mint(aud="other")), 1)
    assert "audience" in line


def test_token_inspect_garbage_is_a_usage_error(stub: StubTokenService) -> None:
    line = _one_line_error(run_cli("token", "inspect", "not-a-token"), 2)
    assert "not a JWT" in line


# -- clear -----------------------------------------------------------------------------------------
def test_token_clear_drops_this_profile_or_all(stub: StubTokenService) -> None:
    now = SystemClock().now()
    cache = _cache()
    cache.store(CachedToken.from_response(stub.url, CLIENT_ID, SCOPE, "a", "Bearer", 600, now))
    cache.store(CachedToken.from_response(stub.url, "other", SCOPE, "b", "Bearer", 600, now))
    result = run_cli("token", "clear")
    assert result.exit_code == 0
    assert "removed 1 cached token" in result.stderr
    assert cache.load(stub.url, "other", SCOPE) is not None
    assert run_cli("-o", "json", "token", "clear", "--all").json == {"removed": 1}


def test_token_inspect_verify_refuses_a_symmetric_algorithm(stub: StubTokenService) -> None:
    import jwt

    claims = jwt.decode(stub.mint(), options={"verify_signature": False})
    forged = jwt.encode(claims, "k" * 32, algorithm="HS256")
    line = _one_line_error(run_cli("token", "inspect", "--verify", forged), 1)
    assert "'HS256' is not accepted" in line


# -- the cache folder ------------------------------------------------------------------------------
def test_token_get_cache_folders_prefctl_creates_are_0700_whatever_the_umask(
    stub: StubTokenService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = tmp_path / "xdg-cache" / "prefctl"
    monkeypatch.setenv("PREFCTL_CACHE_DIR", str(cache))
    previous = os.umask(0)
    try:
        result = run_cli("token", "get")
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output
    for folder in (cache.parent, cache, cache / "tokens"):
        assert oct(folder.stat().st_mode & 0o777) == "0o700", folder


@pytest.mark.parametrize("command", [["token", "get"], ["programs", "list"]])
def test_cache_dir_that_is_a_file_is_exit_2_before_a_token_is_issued(
    stub: StubTokenService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: list[str]
) -> None:
    not_a_folder = tmp_path / "cache-file"
    not_a_folder.write_text("")
    monkeypatch.setenv("PREFCTL_CACHE_DIR", str(not_a_folder))
    line = _one_line_error(run_cli(*command), 2)
    assert f"{not_a_folder} is not a folder" in line
    assert "PREFCTL_CACHE_DIR" in line
    assert stub.token_requests == []


def test_token_get_certificate_for_another_host_is_one_line_exit_5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = certs.init_ca(tmp_path)
    server = certs.issue_server(tmp_path, "example.test")
    monkeypatch.setenv("TEST_CLIENT_SECRET", CLIENT_SECRET)
    with running_stub(tls=(server.certificate, server.private_key)) as stub:
        write_profile(stub.url, client_secret_env="TEST_CLIENT_SECRET", ca_bundle=ca.certificate)

        line = _one_line_error(run_cli("token", "get"), 5)

        assert stub.token_requests == []
    assert line == (
        f"error: cannot reach the token endpoint {stub.url}/oauth2/v1/token: the server's TLS "
        "certificate does not cover the host 127.0.0.1 — set auth_url to a host the certificate "
        "covers, or give the server a certificate for 127.0.0.1 (the emulator: prefctl certs "
        "issue --server 127.0.0.1)"
    )


# -- rate limits and failing proxies at the token endpoint -----------------------------------------
def test_token_get_429_is_retried_visibly_with_v_and_no_secret_is_logged(
    stub: StubTokenService,
) -> None:
    stub.answer(
        429,
        {"error": "slow_down", "error_description": f"client_secret={CLIENT_SECRET}"},
        headers={"Retry-After": "0"},
    )
    result = run_cli("-vvv", "token", "get", "--force")
    assert result.exit_code == 0, result.output
    assert result.stdout == stub.issued[-1] + "\n"
    assert "POST /oauth2/v1/token → 429; retrying in 0 s (attempt 2 of 4)" in result.stderr
    assert CLIENT_SECRET not in result.output
    assert stub.issued[-1] not in result.stderr
    assert len(stub.token_requests) == 2


def test_token_get_persistent_503_from_a_proxy_is_one_line_exit_1(stub: StubTokenService) -> None:
    for _ in range(4):
        stub.answer(
            503, b"<html><h1>503</h1>" + b"x" * 100_000, "text/html", headers={"Retry-After": "0"}
        )
    line = _one_line_error(run_cli("token", "get"), 1)
    assert "answered HTTP 503 with text/html, not JSON" in line
    assert "<" not in line
    assert "unavailable (tried 4 times over 0 s)" in line
    assert len(stub.token_requests) == 4
