"""``prefctl receive`` against hostile input and a stuck reader (issue 18, points 1 and 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_receive import FLAGS, run_receiving
from tests.helpers import run_cli


@pytest.fixture(autouse=True)
def hashkey(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFCTL_HASHKEY", "cli-receive-hashkey")


def test_receive_auto_validate_without_any_trusted_host_exits_2() -> None:
    result = run_cli("receive", "--port", "0", "--no-verify", "--auto-validate")
    assert result.exit_code == 2
    assert "--auto-validate needs a trusted host" in result.stderr
    assert "--validation-host" in result.stderr


def test_receive_auto_validate_trusts_the_profile_hosts_and_validation_hosts(
    config_path: Path,
) -> None:
    config_path.parent.mkdir(parents=True)
    config_path.write_text(
        'default = "dev"\n[profiles.dev]\nservice_client_id = "DEMO_CORP"\n'
        'api_url = "http://127.0.0.1:8750/api/v1"\nauth_url = "https://login.example.com"\n'
        '[profiles.dev.webhooks]\nsignature_user_id = "events-signer"\n'
    )
    result = run_receiving(
        "-o", "json", "--auto-validate", "--validation-host", "hooks.example.org",
        "--timeout", "0.2", send=lambda url: None,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.ndjson[0]["validation_hosts"] == [
        "127.0.0.1:8750",
        "login.example.com:443",
        "hooks.example.org",
    ]


def test_receive_validation_host_that_is_a_url_is_a_usage_error() -> None:
    result = run_cli(
        "receive", "--port", "0", *FLAGS, "--auto-validate",
        "--validation-host", "https://evil.example/x",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "is not HOST or HOST:PORT" in result.stderr
