"""A large import executes in steps: profile writes are served meanwhile, its progress shows, and
a stop in the middle neither loses nor repeats a record (the next start resumes it)."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from prefctl.emulator.serve import EmulatorConfig, RunningEmulator, start_in_thread
from prefctl.emulator.write_process import STORE_ENV
from prefctl.store.db import connect
from prefctl.store.imports import get_import
from tests.emulator.routes._api import MERGE_PATCH, Api, issue_token
from tests.helpers import free_port, wait_until

# Enough records that executing them takes seconds, so that writes land while it runs.
RECORDS = 8_000
STAGE_CHUNK = 1_000


def _staged_import(api: Api, marker: str, count: int = RECORDS) -> int:
    """An import of ``count`` new profiles tagged ``marker``, staged and not yet executed."""
    answer = api.post("/imports")
    assert answer.status_code == 201, answer.text
    import_id: int = answer.json()["ImportId"]
    for start in range(0, count, STAGE_CHUNK):
        records = [
            {"Tags": [marker], "AlternateIds": [{"Type": "Bulk", "Value": f"{marker}-{n}"}]}
            for n in range(start, min(start + STAGE_CHUNK, count))
        ]
        staged = api.post(f"/imports/{import_id}/records", json=records)
        assert staged.status_code == 200, staged.text
    return import_id


def _status(api: Api, import_id: int) -> dict[str, Any]:
    answer = api.get(f"/imports/{import_id}")
    assert answer.status_code == 200, answer.text
    status: dict[str, Any] = answer.json()
    return status


def _writer_pid(emulator: RunningEmulator) -> int:
    """The pid of the emulator's writer process (a child of this test process, which started the
    emulator), found by its command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
        if ppid != os.getpid() or b"prefctl.emulator.write_process" not in cmdline:
            continue
        # A SQLite store is on the writer's command line, a PostgreSQL URL in its environment.
        store = str(emulator.store).encode()
        if store in cmdline or STORE_ENV.encode() + b"=" + store in environ:
            found.append(int(entry.name))
    assert len(found) == 1, found
    return found[0]


def _holds(pipe: str) -> bool:
    """Whether this process has a descriptor of ``pipe`` (a ``pipe:[inode]`` link) open."""
    for entry in Path("/proc/self/fd").iterdir():
        try:
            if os.readlink(entry) == pipe:
                return True
        except OSError:
            continue  # closed meanwhile
    return False


def _profiles_tagged(emulator: RunningEmulator, marker: str) -> int:
    with closing(connect(emulator.store)) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM profiles WHERE body LIKE ?", (f'%"{marker}"%',)
        ).fetchone()
    return int(count)


def test_import_profile_writes_are_served_while_a_large_import_executes(api: Api) -> None:
    profile = api.create_profile({"Tags": ["before"]})
    path = f"/profiles/{profile['ProfileId']}"
    import_id = _staged_import(api, uuid.uuid4().hex)

    assert api.post(f"/imports/{import_id}/execute").status_code == 202
    wait_until(lambda: _status(api, import_id)["ProcessedRecords"] > 0)
    patched = api.patch(path, {"Tags": ["during"]}, MERGE_PATCH)
    replaced = api.put(path, json={"Tags": ["replaced"]})
    created = api.post("/profiles", json={"Tags": ["created-during"]})
    meanwhile = _status(api, import_id)

    assert (patched.status_code, replaced.status_code, created.status_code) == (200, 200, 201)
    assert meanwhile["State"] == "Processing"  # the writes did not wait for the import
    assert 0 < meanwhile["ProcessedRecords"] < RECORDS
    wait_until(lambda: _status(api, import_id)["State"] == "Completed", timeout=120)
    assert _status(api, import_id)["CreatedProfiles"] == RECORDS
    assert api.get(path).json()["Tags"] == ["replaced"]


def test_import_processed_records_advance_while_it_executes(api: Api) -> None:
    import_id = _staged_import(api, uuid.uuid4().hex)
    seen: set[int] = set()

    def done() -> bool:
        status = _status(api, import_id)
        seen.add(status["ProcessedRecords"])
        return bool(status["State"] == "Completed")

    api.post(f"/imports/{import_id}/execute")
    wait_until(done, timeout=120, interval=0.05)

    assert len(seen - {0, RECORDS}) >= 3  # several steps seen in between
    assert max(seen) == RECORDS


def test_import_cut_short_by_a_stop_resumes_on_the_next_start_without_repeating_a_record(
    emulator: RunningEmulator, api: Api
) -> None:
    marker = uuid.uuid4().hex
    total = 2 * RECORDS  # so that the stop comes long before the end, even on a fast machine
    import_id = _staged_import(api, marker, total)
    api.post(f"/imports/{import_id}/execute")
    wait_until(lambda: _status(api, import_id)["ProcessedRecords"] > 0)
    # Pause the writer process: the import cannot advance past its step in hand, however long
    # the stop takes on a loaded machine (it once finished all its records before a stop got to
    # it). Once the stop has closed the writer's input, the writer is killed, as the stop itself
    # would after its 10 s wait (test_group_writer.py tests that): the step is not committed.
    writer = _writer_pid(emulator)
    os.kill(writer, signal.SIGSTOP)
    writers_input = os.readlink(f"/proc/{writer}/fd/0")
    stopping = threading.Thread(target=emulator.stop, kwargs={"timeout": 60})
    stopping.start()
    wait_until(lambda: not _holds(writers_input), timeout=60, what="the stop did not get there")
    os.kill(writer, signal.SIGKILL)
    stopping.join(60)
    assert not stopping.is_alive()
    with closing(connect(emulator.store)) as conn:
        job = get_import(conn, emulator.account.service_client_id, import_id)
    assert job is not None
    state, processed, created = job.state, job.processed_records, job.created_profiles
    written = _profiles_tagged(emulator, marker)
    store = emulator.store if isinstance(emulator.store, str) else None
    config = EmulatorConfig(port=free_port(), data_dir=emulator.data_dir, store=store)
    restarted = start_in_thread(config)
    try:
        base = f"{restarted.api_url}/{restarted.account.service_client_id}"
        with httpx.Client(base_url=base) as client:
            client.headers["Authorization"] = f"Bearer {issue_token(restarted, http=client)}"
            again = Api(restarted, client)
            wait_until(lambda: _status(again, import_id)["State"] == "Completed", timeout=120)
            final = _status(again, import_id)
    finally:
        restarted.stop()

    assert (state, processed < total) == ("Processing", True)  # cut short…
    assert written == created == processed  # counters committed with what they count
    assert (final["ProcessedRecords"], final["CreatedProfiles"]) == (total, total)
    assert _profiles_tagged(restarted, marker) == total  # …and no record applied twice


@pytest.mark.sqlite_only("makes the step fail with a SQLite trigger")
def test_import_whose_step_cannot_write_is_failed_with_the_reason(
    emulator: RunningEmulator, api: Api
) -> None:
    marker = uuid.uuid4().hex
    import_id = _staged_import(api, marker, count=3)
    trigger = f"refuse_{marker}"
    with closing(sqlite3.connect(emulator.store_path)) as conn:
        conn.execute(
            f"CREATE TRIGGER {trigger} BEFORE INSERT ON profiles WHEN NEW.body LIKE '%{marker}%'"
            " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
    try:
        api.post(f"/imports/{import_id}/execute")
        wait_until(lambda: _status(api, import_id)["State"] == "Failed")
    finally:
        with closing(sqlite3.connect(emulator.store_path)) as conn:
            conn.execute(f"DROP TRIGGER {trigger}")
    status = _status(api, import_id)

    assert "disk full" in status["Error"]
    assert (status["ProcessedRecords"], status["CreatedProfiles"]) == (0, 0)  # the step undone
    assert _profiles_tagged(emulator, marker) == 0
