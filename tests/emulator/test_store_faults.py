"""The emulator on a full disk, a damaged store and an emptied store (issue 18, points 7 and 8).

The full disk is real: a 2 MiB tmpfs mounted for the test (root only; skipped, saying why,
where mounting is not permitted). The damaged store is a real store with pages overwritten.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from prefctl.emulator.serve import EmulatorConfig, start_in_thread
from tests.emulator.routes._api import issue_token
from tests.helpers import CliResult, run_cli

PROFILE = {
    "CustomerName": {"FirstName": "Ann"},
    "Tags": [f"tag-{n}-" + "x" * 40 for n in range(20)],
}


def one_line_error(result: CliResult, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: a disk that fills up for real."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        # Lazily: a file the emulator leaves open until collected would keep it busy.
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def _client(url: str, service_client_id: str, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{url}/api/v1/{service_client_id}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def _integrity(store: Path) -> str:
    with sqlite3.connect(store) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def test_emulator_write_on_a_full_disk_is_507_and_what_was_stored_stays(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = small_disk / "data"
    emulator = start_in_thread(EmulatorConfig(port=0, data_dir=data_dir))
    stored: list[int] = []
    try:
        token = issue_token(emulator)
        with _client(emulator.url, emulator.account.service_client_id, token) as api:
            for _ in range(2_000):  # a bound: the disk is full after about 40
                answer = api.post("/profiles", json=PROFILE)
                if answer.status_code != 201:
                    break
                stored.append(answer.json()["ProfileId"])
            assert answer.status_code == 507, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert "store is full" in answer.json()["detail"]
            assert f"the disk of the store {emulator.store_path} is full" in caplog.text
            # Reads still work, and every profile answered 201 is there.
            assert all(api.get(f"/profiles/{pid}").status_code == 200 for pid in stored)

            # Room again: the next write is stored, without a restart.
            subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)
            assert api.post("/profiles", json=PROFILE).status_code == 201
    finally:
        emulator.stop()
    assert len(stored) > 5
    assert _integrity(emulator.store_path) == "ok"


def test_emulator_start_on_a_full_disk_is_one_line_exit_2(
    small_disk: Path, config_path: Path
) -> None:
    data_dir = small_disk / "data"
    emulator = start_in_thread(EmulatorConfig(port=0, data_dir=data_dir))
    emulator.stop()
    filler = small_disk / "filler"
    with filler.open("wb") as out:  # fill what is left (2 MiB at most)
        try:
            for _ in range(2 * 1024 * 1024 // 65536 + 1):
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass

    result = run_cli("emulator", "start", "--port", "0", "--data-dir", str(data_dir))
    on_a_new_store = run_cli(
        "emulator", "start", "--port", "0", "--data-dir", str(small_disk / "new")
    )
    detached = run_cli("emulator", "start", "--detach", "--port", "0", "--data-dir", str(data_dir))

    assert one_line_error(result, 2).endswith("the store is intact")
    assert one_line_error(detached, 2).endswith("the store is intact")
    first_start = one_line_error(on_a_new_store, 2)
    assert "is full" in first_start
    assert first_start.endswith("nothing was created")  # not "the store is intact": there is none
    assert not (small_disk / "new").exists()
    filler.unlink()  # room for SQLite to open the store and check it
    assert _integrity(emulator.store_path) == "ok"


def _damage(store: Path, pages: int) -> None:
    """Overwrite ``pages`` random pages of the store with noise (never the first: the header)."""
    with sqlite3.connect(store) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(store.read_bytes())
    rng = random.Random(18)
    count = len(data) // 4096
    for page in rng.sample(range(count // 4, count), pages):
        data[page * 4096 : (page + 1) * 4096] = rng.randbytes(4096)
    store.write_bytes(bytes(data))


def _filled_store(data_dir: Path, profiles: int = 300) -> Path:
    emulator = start_in_thread(EmulatorConfig(port=0, data_dir=data_dir))
    try:
        token = issue_token(emulator)
        with _client(emulator.url, emulator.account.service_client_id, token) as api:
            for _ in range(profiles):
                assert api.post("/profiles", json=PROFILE).status_code == 201
    finally:
        emulator.stop()
    return emulator.store_path


def test_emulator_start_on_a_damaged_store_is_exit_2_naming_the_file(
    tmp_path: Path, config_path: Path
) -> None:
    store = _filled_store(tmp_path / "data")
    _damage(store, pages=5)

    result = run_cli("emulator", "start", "--port", "0", "--data-dir", str(tmp_path / "data"))

    line = one_line_error(result, 2)
    assert f"the store {store} is damaged" in line
    assert "integrity_check" in line
    assert not config_path.exists()


def test_emulator_start_on_an_emptied_store_is_exit_2_and_keeps_profile_local(
    tmp_path: Path, config_path: Path
) -> None:
    data_dir = tmp_path / "data"
    assert run_cli("emulator", "users", "list", "--data-dir", str(data_dir)).exit_code == 0
    emulator = start_in_thread(EmulatorConfig(port=0, data_dir=data_dir, config_path=config_path))
    emulator.stop()
    profiles_before = config_path.read_text()
    emulator.store_path.write_bytes(b"")  # what a failed copy or a full disk may leave

    result = run_cli("emulator", "start", "--port", "0", "--data-dir", str(data_dir))
    admin = run_cli("emulator", "users", "list", "--data-dir", str(data_dir))

    line = one_line_error(result, 2)
    assert f"the store {emulator.store_path} is empty (0 bytes)" in line
    assert "prefctl emulator reset" in line
    assert "is empty" in one_line_error(admin, 2)
    assert config_path.read_text() == profiles_before
    assert emulator.store_path.stat().st_size == 0


def test_emulator_store_damaged_while_serving_is_503_and_turns_healthz_to_503(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    store = _filled_store(data_dir)
    emulator = start_in_thread(EmulatorConfig(port=0, data_dir=data_dir))
    try:
        assert httpx.get(f"{emulator.url}/healthz").status_code == 200
        token = issue_token(emulator)
        _damage(store, pages=60)
        statuses = []
        with _client(emulator.url, emulator.account.service_client_id, token) as api:
            cursor = None
            for _ in range(20):  # a bound: 300 profiles in pages of 100
                answer = api.get(
                    "/profiles", params={"limit": 100, **({"cursor": cursor} if cursor else {})}
                )
                statuses.append(answer.status_code)
                if answer.status_code != 200 or not answer.json().get("NextCursor"):
                    break
                cursor = answer.json()["NextCursor"]
        health = httpx.get(f"{emulator.url}/healthz")
    finally:
        emulator.stop()

    assert statuses[-1] == 503, statuses
    assert "damaged" in answer.json()["detail"]
    assert health.status_code == 503
    assert health.json()["status"] == "unavailable"
    assert str(store) in health.json()["reason"]
