from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from prefctl.clock import FakeClock
from prefctl.errors import NotFoundError, UsageError
from prefctl.store import Store, imports, profiles
from prefctl.store.db import transaction
from prefctl.store.errors import StoreError
from prefctl.store.imports import ImportJob
from tests.store.service_helpers import (
    ACCOUNT,
    OTHER_ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

T0 = 1_767_225_600.0


@pytest.fixture
def conn(store_location: str) -> Iterator[Store]:
    conn = open_service_store(store_location)
    yield conn
    conn.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _staged(conn: Store, *batches: list[dict[str, Any]]) -> int:
    with transaction(conn):
        job = imports.initiate_import(conn, ACCOUNT, actor="loader", now=T0)
        for batch in batches:
            imports.stage_records(conn, ACCOUNT, job.id, batch, now=T0)
        imports.queue_import(conn, ACCOUNT, job.id, now=T0)
    return job.id


def _status(conn: Store, import_id: int) -> ImportJob:
    job = imports.get_import(conn, ACCOUNT, import_id)
    assert job is not None
    return job


def test_import_creates_profiles_and_no_events(conn: Store, clock: FakeClock) -> None:
    add_subscription(conn, subscription_body())  # would receive profile.created from the API
    import_id = _staged(
        conn,
        [{"Emails": [{"Address": "a@x.io"}]}, {"Emails": [{"Address": "b@x.io"}]}],
        [{"Tags": ["vip"]}],
    )
    job = imports.run_import(conn, ACCOUNT, import_id, clock=clock, batch_size=2)
    assert (job.state, job.total_records, job.processed_records) == ("Completed", 3, 3)
    assert (job.created_profiles, job.replaced_profiles, job.failed_records) == (3, 0, 0)
    found = profiles.search_profiles(conn, ACCOUNT, profiles.ProfileQuery(email="b@x.io"))
    assert [p["ProfileId"] for p in found.profiles] == [1002]
    assert found.profiles[0]["Edited"]["CreatedBy"] == "loader"
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM deliveries").fetchone()[0] == 0


def test_import_replaces_known_ids_and_reports_bad_records(conn: Store, clock: FakeClock) -> None:
    first = _staged(conn, [{"CustomerType": "Individual"}])
    imports.run_import(conn, ACCOUNT, first, clock=clock)
    clock.advance(60)
    import_id = _staged(
        conn,
        [
            {"ProfileId": 1001, "CustomerType": "Business"},
            {"ProfileId": 4242, "CustomerType": "Business"},
            {"Emails": [{"Address": "not-an-email"}]},
            {"Emial": []},
            {"CustomerType": "Individual"},
        ],
    )
    job = imports.run_import(conn, ACCOUNT, import_id, clock=clock)
    assert (job.created_profiles, job.replaced_profiles, job.failed_records) == (1, 1, 3)
    wire = _status(conn, import_id).to_wire()
    assert wire["State"] == "Completed"
    errors = {e["Record"]: e["Message"] for e in wire["Errors"]}
    assert sorted(errors) == [2, 3, 4]
    assert "ProfileId 4242 does not exist" in errors[2]
    assert errors[3].startswith("Emails[0].Address:")
    assert errors[4].startswith("Emial:")
    replaced = profiles.get_profile(conn, ACCOUNT, 1001)
    assert replaced is not None
    assert replaced["CustomerType"] == "Business"
    assert replaced["Edited"]["CreateDate"] == "2026-01-01T00:00:00.000Z"
    assert replaced["Edited"]["ModifiedDate"] == "2026-01-01T00:01:00.000Z"


def test_import_states_are_enforced(conn: Store, clock: FakeClock) -> None:
    with transaction(conn):
        job = imports.initiate_import(conn, ACCOUNT, actor="loader", now=T0)
    assert job.state == "Initiated"
    with pytest.raises(UsageError, match="has no records"), transaction(conn):
        imports.queue_import(conn, ACCOUNT, job.id, now=T0)
    with pytest.raises(UsageError, match="execute it first"):
        imports.run_import(conn, ACCOUNT, job.id, clock=clock)
    with transaction(conn):
        assert imports.stage_records(conn, ACCOUNT, job.id, [{}], now=T0).state == "Staging"
        assert imports.queue_import(conn, ACCOUNT, job.id, now=T0).state == "Queued"
    with pytest.raises(UsageError, match="only before execute"), transaction(conn):
        imports.stage_records(conn, ACCOUNT, job.id, [{}], now=T0)
    with pytest.raises(UsageError, match="already Queued"), transaction(conn):
        imports.queue_import(conn, ACCOUNT, job.id, now=T0)
    done = imports.run_import(conn, ACCOUNT, job.id, clock=clock)
    assert imports.run_import(conn, ACCOUNT, job.id, clock=clock) == done


def test_import_of_another_account_is_not_found(conn: Store) -> None:
    import_id = _staged(conn, [{}])
    assert imports.get_import(conn, OTHER_ACCOUNT, import_id) is None
    with pytest.raises(NotFoundError), transaction(conn):
        imports.stage_records(conn, OTHER_ACCOUNT, import_id, [{}], now=T0)


def test_interrupted_import_resumes_after_the_last_batch(conn: Store, clock: FakeClock) -> None:
    import_id = _staged(conn, [{"Tags": [f"t{n}"]} for n in range(1, 6)])
    # As a process killed after committing its first batch of two would leave it.
    with transaction(conn):
        conn.execute(
            "UPDATE imports SET state = 'Processing', processed_records = 2 WHERE id = ?",
            (import_id,),
        )
    job = imports.run_import(conn, ACCOUNT, import_id, clock=clock, batch_size=2)
    assert (job.state, job.processed_records, job.created_profiles) == ("Completed", 5, 3)
    page = profiles.search_profiles(conn, ACCOUNT, profiles.ProfileQuery())
    assert [p["Tags"] for p in page.profiles] == [["t3"], ["t4"], ["t5"]]


def test_import_that_cannot_write_fails_with_the_reason(conn: Store, clock: FakeClock) -> None:
    import_id = _staged(conn, [{}, {}, {}])
    if conn.dialect == "postgresql":
        conn.execute(
            "CREATE FUNCTION full_disk() RETURNS trigger LANGUAGE plpgsql"
            " AS $$ BEGIN RAISE EXCEPTION 'disk full'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER full_disk BEFORE INSERT ON profiles FOR EACH ROW"
            " WHEN (NEW.profile_id > 1001) EXECUTE FUNCTION full_disk()"
        )
    else:
        conn.execute(
            "CREATE TEMP TRIGGER full_disk BEFORE INSERT ON profiles WHEN NEW.profile_id > 1001"
            " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
    with pytest.raises(StoreError, match="disk full"):
        imports.run_import(conn, ACCOUNT, import_id, clock=clock, batch_size=1)
    job = _status(conn, import_id)
    assert (job.state, job.processed_records, job.created_profiles) == ("Failed", 1, 1)
    assert job.error is not None
    assert "disk full" in job.error


def test_import_step_stops_at_its_time_budget_and_the_last_step_completes(
    conn: Store, clock: FakeClock
) -> None:
    import_id = _staged(conn, [{"Tags": [f"t{n}"]} for n in range(1, 6)])
    ticks = iter(range(1_000))  # each look at the clock: one more second

    def monotonic() -> float:
        return float(next(ticks))

    first = imports.run_import_step(
        conn, ACCOUNT, import_id, clock=clock, budget=2.0, monotonic=monotonic
    )
    states = [first.state]
    while states[-1] != "Completed" and len(states) < 10:
        step = imports.run_import_step(
            conn, ACCOUNT, import_id, clock=clock, budget=2.0, monotonic=monotonic
        )
        states.append(step.state)
    assert (first.state, first.processed_records, first.created_profiles) == ("Processing", 2, 2)
    assert states == ["Processing", "Processing", "Completed"]  # 2 + 2 + 1 records
    assert _status(conn, import_id).created_profiles == 5


def test_import_step_as_a_job_of_the_writer_process_pickles_and_runs(
    conn: Store,
) -> None:
    import pickle

    import_id = _staged(conn, [{}, {}])
    step = pickle.loads(pickle.dumps(imports.ImportStep(ACCOUNT, import_id, now=T0)))

    with transaction(conn):  # the writer process runs jobs inside its transaction
        state = step(conn)

    assert state == "Completed"
    job = _status(conn, import_id)
    assert (job.processed_records, job.created_profiles) == (2, 2)
    profile = profiles.get_profile(conn, ACCOUNT, 1001)
    assert profile is not None
    assert profile["Edited"]["CreateDate"] == "2026-01-01T00:00:00.000Z"  # stamped ``now``


def test_fail_import_marks_an_unfinished_import_failed_and_leaves_a_finished_one(
    conn: Store, clock: FakeClock
) -> None:
    running = _staged(conn, [{}])
    done = _staged(conn, [{}])
    imports.run_import(conn, ACCOUNT, done, clock=clock)
    assert imports.unfinished_imports(conn) == [(ACCOUNT, running)]

    failed = imports.fail_import(conn, ACCOUNT, running, error="OSError: disk full", now=T0)
    kept = imports.fail_import(conn, ACCOUNT, done, error="too late", now=T0)

    assert (failed.state, failed.error) == ("Failed", "OSError: disk full")
    assert (kept.state, kept.error) == ("Completed", None)
    assert imports.unfinished_imports(conn) == []


def test_staged_records_are_dropped_as_they_are_done_and_when_an_import_fails(
    conn: Store, clock: FakeClock
) -> None:
    # Kept, each import would grow the store by its size for good.
    def staged_rows(import_id: int) -> int:
        sql = "SELECT count(*) FROM import_records WHERE import_id = ?"
        return int(conn.execute(sql, (import_id,)).fetchone()[0])

    done = _staged(conn, [{"Tags": [str(n)]} for n in range(5)])
    with transaction(conn):
        step = imports.run_import_step(conn, ACCOUNT, done, clock=clock, batch_size=2)
    assert (step.processed_records, staged_rows(done)) == (2, 3)
    assert imports.run_import(conn, ACCOUNT, done, clock=clock).state == "Completed"
    assert staged_rows(done) == 0
    assert _status(conn, done).created_profiles == 5
    failed = _staged(conn, [{}, {}])
    with transaction(conn):
        imports.fail_import(conn, ACCOUNT, failed, error="stopped", now=T0)
    assert (_status(conn, failed).state, staged_rows(failed)) == ("Failed", 0)
