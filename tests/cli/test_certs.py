from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import run_cli


def _default_dir() -> Path:
    return Path(os.environ["PREFCTL_DATA_DIR"]) / "certs"


def test_certs_init_creates_the_ca_in_the_data_dir() -> None:
    result = run_cli("certs", "init")
    assert result.exit_code == 0, result.output
    assert str(_default_dir() / "ca.pem") in result.stdout
    assert "created the development CA" in result.stderr
    assert (_default_dir() / "ca.key").stat().st_mode & 0o777 == 0o600


def test_certs_init_twice_keeps_the_ca() -> None:
    run_cli("certs", "init")
    again = run_cli("-o", "json", "certs", "init")
    assert again.exit_code == 0
    assert again.json["created"] is False
    assert "kept the existing" in again.stderr


def test_certs_issue_server_and_client_print_paths_as_json(tmp_path: Path) -> None:
    folder = tmp_path / "pki"
    assert run_cli("certs", "init", "--dir", str(folder)).exit_code == 0
    server = run_cli("-o", "json", "certs", "issue", "--server", "localhost", "--dir", str(folder))
    assert server.exit_code == 0, server.output
    assert server.json["certificate"] == str(folder / "server-localhost.pem")
    assert server.json["kind"] == "server"
    client = run_cli("-o", "json", "certs", "issue", "--client", "bot", "--dir", str(folder))
    assert client.json["private_key"] == str(folder / "client-bot.key")
    assert len(client.json["sha256"]) == 43
    assert "prefctl emulator clients add --certificate" in client.stderr


def test_certs_issue_needs_exactly_one_of_server_or_client() -> None:
    run_cli("certs", "init")
    for args in ([], ["--server", "a", "--client", "b"]):
        result = run_cli("certs", "issue", *args)
        assert result.exit_code == 2
        assert result.stderr.strip() == "error: give exactly one of --server HOST or --client NAME"


def test_certs_issue_before_init_is_exit_2_with_a_hint(tmp_path: Path) -> None:
    result = run_cli("certs", "issue", "--client", "bot", "--dir", str(tmp_path))
    assert result.exit_code == 2
    assert "no development CA" in result.stderr
    assert "prefctl certs init" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
