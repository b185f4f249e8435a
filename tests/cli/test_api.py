"""``prefctl api METHOD PATH`` against a real emulator."""

from __future__ import annotations

import json
from pathlib import Path

from prefctl.emulator.serve import RunningEmulator
from tests.helpers import run_cli

PROFILE = {"CustomerName": {"FirstName": "Ann"}, "Emails": [{"Address": "ann@example.com"}]}


def test_api_get_prints_the_answer_as_one_json_line_in_a_pipe(emulator: RunningEmulator) -> None:
    result = run_cli("api", "get", "programs")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("\n") == 1
    assert json.loads(result.stdout) == run_cli("api", "GET", "/programs").json


def test_api_post_with_data_from_text_file_and_stdin(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    created = run_cli("api", "POST", "profiles", "--data", json.dumps(PROFILE))
    assert created.exit_code == 0, created.stderr
    profile_id = created.json["ProfileId"]
    body = tmp_path / "patch.json"
    body.write_text('{"CustomerName": {"FirstName": "Anna"}}')
    patched = run_cli("api", "PATCH", f"profiles/{profile_id}", "--data", f"@{body}")
    assert patched.exit_code == 0, patched.stderr
    base = f"{emulator.api_url}/{emulator.account.service_client_id}"
    fetched = run_cli("api", "GET", f"{base}/profiles/{profile_id}")
    assert fetched.json["CustomerName"]["FirstName"] == "Anna"
    piped = run_cli(
        "api",
        "PATCH",
        f"profiles/{profile_id}",
        "-d",
        "-",
        stdin='{"CustomerName": {"FirstName": "Ann"}}',
    )
    assert piped.json["CustomerName"]["FirstName"] == "Ann"


def test_api_errors_keep_the_documented_exit_codes(emulator: RunningEmulator) -> None:
    missing = run_cli("api", "GET", "profiles/999999")
    assert missing.exit_code == 4
    assert missing.stderr.startswith("error:")
    assert run_cli("api", "FETCH", "programs").exit_code == 2
    bad = run_cli("api", "POST", "profiles", "--data", "{not json")
    assert (bad.exit_code, bad.stdout) == (2, "")
    elsewhere = run_cli("api", "GET", "https://example.com/steal")
    assert elsewhere.exit_code == 2
    assert "not under the profile's api_url" in elsewhere.stderr


def test_api_paginate_follows_next_cursor_into_one_array(emulator: RunningEmulator) -> None:
    for n in range(5):
        person = {**PROFILE, "Emails": [{"Address": f"page{n}@example.com"}]}
        assert run_cli("api", "POST", "profiles", "--data", json.dumps(person)).exit_code == 0
    whole = run_cli("api", "GET", "profiles?limit=500").json["Profiles"]
    first = run_cli("api", "GET", "profiles?limit=2").json
    assert first["NextCursor"]  # the listing really pages at this size
    paged = run_cli("api", "GET", "profiles?limit=2", "--paginate")
    assert paged.exit_code == 0, paged.stderr
    assert paged.stdout.count("\n") == 1
    assert [p["ProfileId"] for p in paged.json] == [p["ProfileId"] for p in whole]
    # with -i, each page's status line and headers come first, then the one array
    included = run_cli("api", "GET", "profiles?limit=2", "--paginate", "-i")
    pages = -(-len(whole) // 2)
    assert included.stdout.count("HTTP/1.1 200 OK\n") in (pages, pages + 1)
    assert json.loads(included.stdout.rsplit("\n\n", 1)[1]) == paged.json
    # a route that does not page prints its answer unchanged
    assert (
        run_cli("api", "GET", "programs", "--paginate").json
        == run_cli("api", "GET", "programs").json
    )
    assert run_cli("api", "POST", "profiles", "--paginate").exit_code == 2


def test_api_jq_filters_the_answer_and_prints_strings_bare(emulator: RunningEmulator) -> None:
    run_cli("api", "POST", "profiles", "--data", json.dumps(PROFILE))
    ids = run_cli("api", "GET", "profiles?limit=1", "--paginate", "--jq", ".[].ProfileId")
    assert ids.exit_code == 0, ids.stderr
    whole = run_cli("api", "GET", "profiles?limit=500").json["Profiles"]
    assert ids.stdout.split() == [str(p["ProfileId"]) for p in whole]
    names = run_cli("api", "GET", "profiles?limit=1", "--jq", ".Profiles[0].CustomerName.FirstName")
    assert names.stdout == "Ann\n"
    bad = run_cli("api", "GET", "programs", "--jq", ".[")
    assert (bad.exit_code, bad.stdout) == (2, "")
    assert "--jq '.['" in bad.stderr.splitlines()[0]
    failing = run_cli("api", "GET", "programs", "--jq", '"text" | .field')
    assert (failing.exit_code, failing.stdout) == (1, "")
    assert "failed on the answer" in failing.stderr


def test_api_fields_build_the_json_body_or_the_query(emulator: RunningEmulator) -> None:
    created = run_cli(
        "api",
        "POST",
        "profiles",
        "-f",
        "CustomerName[FirstName]=Fieldy",
        "-F",
        "Emails[][Address]=fieldy@example.com",
    )
    assert created.exit_code == 0, created.stderr
    assert created.json["CustomerName"]["FirstName"] == "Fieldy"
    assert created.json["Emails"][0]["Address"] == "fieldy@example.com"
    found = run_cli("api", "GET", "profiles", "-f", "email=fieldy@example.com")
    assert [p["ProfileId"] for p in found.json["Profiles"]] == [created.json["ProfileId"]]
    both = run_cli("api", "POST", "profiles", "-f", "a=1", "--data", "{}")
    assert (both.exit_code, both.stdout) == (2, "")
    assert "not both" in both.stderr
    nested_get = run_cli("api", "GET", "profiles", "-f", "a[b]=1")
    assert nested_get.exit_code == 2


def test_api_include_prints_the_status_line_and_headers_first(emulator: RunningEmulator) -> None:
    result = run_cli("api", "GET", "programs", "-i")
    assert result.exit_code == 0, result.stderr
    head, _, body = result.stdout.partition("\n\n")
    lines = head.splitlines()
    assert lines[0] == "HTTP/1.1 200 OK"
    assert "content-type: application/json" in [line.lower() for line in lines[1:]]
    assert json.loads(body) == run_cli("api", "GET", "programs").json


def test_api_headers_are_sent_and_authorization_is_refused(emulator: RunningEmulator) -> None:
    profile_id = run_cli("api", "POST", "profiles", "--data", json.dumps(PROFILE)).json["ProfileId"]
    patch = '{"CustomerName": {"FirstName": "Ana"}}'
    plain = run_cli("api", "PATCH", f"profiles/{profile_id}", "-d", patch, "-H", "X-Trace: 1")
    assert plain.exit_code == 0, plain.stderr
    wrong_type = run_cli(
        "api", "PATCH", f"profiles/{profile_id}", "-d", patch, "-H", "Content-Type: text/plain"
    )
    assert wrong_type.exit_code == 1  # the header reached the service, which refused the type
    stolen = run_cli("api", "GET", "programs", "-H", "Authorization: Bearer other")
    assert (stolen.exit_code, stolen.stdout) == (2, "")
    assert "cannot set Authorization" in stolen.stderr
    assert run_cli("api", "GET", "programs", "-H", "no colon").exit_code == 2


def test_api_paths_are_normalised_and_kept_under_api_url(emulator: RunningEmulator) -> None:
    base = f"{emulator.api_url}/{emulator.account.service_client_id}"
    inside = run_cli("api", "GET", "programs/../programs")
    assert inside.exit_code == 0, inside.stderr
    assert inside.json == run_cli("api", "GET", "programs").json
    for escape in (
        f"{emulator.api_url}/../../../oauth2/v1/keys",
        f"{base}/%2e%2e/%2E%2E/../oauth2/v1/keys",
        "../../../oauth2/v1/keys",
        "%2e%2e/%2e%2e/%2e%2e/oauth2/v1/keys",
        "..%2f..%2f..%2foauth2/v1/keys",
        emulator.api_url.replace("127.0.0.1", "127.0.0.1@example.com") + "/programs",
    ):
        result = run_cli("api", "GET", escape)
        assert (result.exit_code, result.stdout) == (2, ""), escape
        assert result.stderr.count("\n") <= 2, result.stderr
    query_with_url = run_cli("api", "GET", "profiles?email=http://x@example.com")
    assert query_with_url.exit_code == 0, query_with_url.stderr


def test_api_imports_jq_only_when_jq_is_given(emulator: RunningEmulator) -> None:
    import os
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from prefctl.cli.app import run\n"
        "code = run(sys.argv[1:])\n"
        "print('jq loaded' if 'jq' in sys.modules else 'jq not loaded', file=sys.stderr)\n"
    )

    def loaded(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", script, "api", "GET", "programs", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
            check=False,
        )
        return result.stderr.strip().splitlines()[-1]

    assert loaded() == "jq not loaded"
    assert loaded("--jq", "length") == "jq loaded"
