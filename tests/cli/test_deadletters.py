"""``prefctl deadletters list / show / redrive / export / purge`` on a store file."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from prefctl.dispatcher.run import DispatcherConfig, running
from prefctl.receiver.faults import FaultPlan, FaultStep, plan_from_options
from prefctl.receiver.serve import ReceiverConfig, start_in_thread
from prefctl.store.db import connect
from prefctl.store.delivery_history import get_delivery
from tests.dispatcher.engine_helpers import CREDENTIALS, new_store, set_settings, subscribe
from tests.dispatcher.engine_helpers import queue_events as engine_queue
from tests.dispatcher.ops_helpers import T0, event_id, finish, queue_event
from tests.helpers import run_cli, run_in_terminal, run_with_terminal_stderr, sorted_event_ids
from tests.store.service_helpers import (
    OTHER_ACCOUNT,
    add_subscription,
    open_service_store,
    subscription_body,
)

DEAD_LETTER_KEYS = [
    "event_id",
    "event_type",
    "subscription_id",
    "reason",
    "attempts",
    "last_status",
    "last_error",
    "first_attempt_at",
    "last_attempt_at",
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Dead letters: event 1 → A (413), event 2 → A (503 × 2), event 3 → B (refused); event 4
    → B delivered."""
    path = tmp_path / "store.db"
    conn = open_service_store(path)
    a = add_subscription(conn, subscription_body("https://a.example/hook", name="A"))
    b = add_subscription(conn, subscription_body("https://b.example/hook", name="B"))
    (d1,) = queue_event(conn, 1, [a])
    (d2,) = queue_event(conn, 2, [a])
    (d3,) = queue_event(conn, 3, [b])
    (d4,) = queue_event(conn, 4, [b])
    finish(conn, d1.delivery_id, status=413, reason="PayloadTooLarge", at=T0 + 10)
    finish(conn, d2.delivery_id, status=503, attempts=2, at=T0 + 20)
    finish(conn, d3.delivery_id, status=None, error="connection refused", at=T0 + 30)
    finish(conn, d4.delivery_id, state="delivered", status=200, reason=None)
    conn.close()
    return path


def _state(store: Path, delivery_id: int) -> str | None:
    conn = connect(store)
    try:
        record = get_delivery(conn, delivery_id)
        return None if record is None else record.state
    finally:
        conn.close()


def test_deadletters_list_json_records_have_exactly_the_design_keys(store: Path) -> None:
    result = run_cli("deadletters", "list", "--store", store, "-o", "json")

    assert result.exit_code == 0, result.stderr
    assert [list(record) for record in result.json] == [DEAD_LETTER_KEYS] * 3
    first = result.json[0]
    assert first["event_id"] == event_id(1)
    assert (first["reason"], first["last_status"], first["attempts"]) == ("PayloadTooLarge", 413, 1)
    assert first["last_attempt_at"] == "2026-01-01T00:00:10.000Z"


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (["--reason", "PayloadTooLarge"], [1]),
        (["--status", "503"], [2]),
        (["--subscription", "2"], [3]),
        (["--since", "2026-01-01T00:00:15Z"], [2, 3]),
        (["--until", "2026-01-01T00:00:25Z"], [1, 2]),
        (["--event", event_id(3)], [3]),
    ],
)
def test_deadletters_list_filters(store: Path, filters: list[str], expected: list[int]) -> None:
    result = run_cli("-o", "json", "deadletters", "list", "--store", store, *filters)
    assert result.exit_code == 0, result.stderr
    assert [record["event_id"] for record in result.json] == [event_id(n) for n in expected]


def test_deadletters_list_table_shows_reason_and_last_answer(store: Path) -> None:
    result = run_cli("deadletters", "list", "--store", store)
    assert result.exit_code == 0, result.stderr
    assert "PayloadTooLarge" in result.stdout
    assert "connection refused" in result.stdout


def test_deadletters_list_bad_time_is_a_usage_error(store: Path) -> None:
    result = run_cli("deadletters", "list", "--store", store, "--since", "yesterday")
    assert result.exit_code == 2
    assert "--since 'yesterday'" in result.stderr


@pytest.mark.parametrize(
    "command",
    [["list"], ["export"], ["redrive"], ["purge", "--yes"]],
)
def test_deadletters_unknown_subscription_exits_4(store: Path, command: list[str]) -> None:
    result = run_cli("deadletters", *command, "--store", store, "--subscription", "99")

    assert result.exit_code == 4, result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: subscription 99 not found")


def test_deadletters_list_subscription_without_dead_letters_says_none(store: Path) -> None:
    conn = connect(store)
    body = subscription_body("https://c.example/hook", name="C")
    quiet = add_subscription(conn, body, account=OTHER_ACCOUNT)
    conn.close()

    result = run_cli("deadletters", "list", "--store", store, "--subscription", str(quiet))

    assert (result.exit_code, result.stdout) == (0, "")
    assert "no dead letters" in result.stderr


def test_deadletters_show_by_event_id_json(store: Path) -> None:
    result = run_cli("-o", "json", "deadletters", "show", event_id(2), "--store", store)

    assert result.exit_code == 0, result.stderr
    data = result.json
    assert list(data)[:9] == DEAD_LETTER_KEYS
    assert [a["status"] for a in data["timeline"]] == [503, 503]
    assert data["event"]["EventId"] == event_id(2)


def test_deadletters_show_table_includes_the_event(store: Path) -> None:
    result = run_cli("deadletters", "show", "1", "--store", store)
    assert result.exit_code == 0, result.stderr
    assert '"EventId": "' + event_id(1) in result.stdout
    assert "PayloadTooLarge" in result.stdout


def test_deadletters_show_unknown_exits_4(store: Path) -> None:
    result = run_cli("deadletters", "show", event_id(4), "--store", store)
    assert result.exit_code == 4


def test_deadletters_redrive_requeues_selected_and_reports_them(store: Path) -> None:
    result = run_cli("-o", "json", "deadletters", "redrive", "--status", "503", "--store", store)

    assert result.exit_code == 0, result.stderr
    assert result.json == {
        "requeued": 1,
        "event_ids": [event_id(2)],
        "of_deleted_subscriptions": 0,
    }
    assert _state(store, 2) == "queued"
    assert _state(store, 1) == "dead_lettered"
    assert "prefctl dispatcher run" in result.stderr  # no emulator serves this store


@pytest.mark.slow
def test_deadletters_redrive_on_a_store_another_process_keeps_locked_is_one_line_exit_1(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("prefctl.store.connection.BUSY_TIMEOUT_MS", 200)  # instead of waiting 30 s
    holder = connect(store)
    holder.execute("BEGIN IMMEDIATE")  # another writer that does not let go
    try:
        result = run_cli("deadletters", "redrive", "--all", "--store", store)
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [
        "error: the store is busy: another prefctl command kept it locked for over 0.2 s"
        " — try again when it has finished"
    ]


def test_deadletters_redrive_without_filter_needs_all(store: Path) -> None:
    refused = run_cli("deadletters", "redrive", "--store", store)
    assert refused.exit_code == 2
    assert "--all" in refused.stderr

    result = run_cli("deadletters", "redrive", "--all", "--store", store)
    assert result.exit_code == 0, result.stderr
    assert "requeued 3 dead letters" in result.stderr


def test_deadletters_export_to_a_private_file_then_replay_reads_it(
    store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "dead.ndjson"
    result = run_cli("deadletters", "export", "--store", store, "--file", out)

    assert result.exit_code == 0, result.stderr
    assert "exported 3 dead letters" in result.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [list(line)[:9] for line in lines] == [DEAD_LETTER_KEYS] * 3
    assert lines[2]["event"]["Data"] == {"Address": "ann3@example.com"}


def test_deadletters_export_that_fails_leaves_the_file_as_it_was(
    store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "dead.ndjson"
    out.write_bytes(b'{"kept": true}\n')

    result = run_cli(
        "deadletters", "export", "--store", store, "--file", out, "--subscription", "99"
    )

    assert result.exit_code == 4, result.stderr
    assert out.read_bytes() == b'{"kept": true}\n'
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".dead")] == []


def test_deadletters_exports_into_one_file_at_once_each_leave_a_whole_file(
    tmp_path: Path,
) -> None:
    # Two CI steps exporting to the same artifact: each export's records are written beside the
    # file and renamed over it, never interleaved with the other's.
    path = tmp_path / "store.db"
    conn = open_service_store(path)
    a = add_subscription(conn, subscription_body("https://a.example/hook", name="A"))
    for n in range(1, 1501):
        (queued,) = queue_event(conn, n, [a])
        finish(conn, queued.delivery_id, status=413, reason="PayloadTooLarge")
    conn.close()
    out = tmp_path / "dead.ndjson"
    command = [sys.executable, "-m", "prefctl", "deadletters", "export", "--store", str(path)]
    procs = [
        subprocess.Popen([*command, "--file", str(out)], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for proc in procs:
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [record["event_id"] for record in records] == [event_id(n) for n in range(1, 1501)]
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


def test_deadletters_export_json_to_stdout(store: Path) -> None:
    result = run_cli(
        "deadletters", "export", "--format", "json", "--reason", "PayloadTooLarge", "--store", store
    )
    assert result.exit_code == 0, result.stderr
    (record,) = result.json
    assert record["event"]["EventId"] == event_id(1)


def test_deadletters_purge_without_a_terminal_needs_yes(store: Path) -> None:
    result = run_cli("deadletters", "purge", "--reason", "PayloadTooLarge", "--store", store)
    assert result.exit_code == 2
    assert "--yes" in result.stderr
    assert _state(store, 1) == "dead_lettered"


def test_deadletters_purge_with_yes_deletes_only_the_selected(store: Path) -> None:
    result = run_cli(
        "-o",
        "json",
        "deadletters",
        "purge",
        "--reason",
        "PayloadTooLarge",
        "--yes",
        "--store",
        store,
    )

    assert result.exit_code == 0, result.stderr
    assert result.json == {"purged": 1}
    assert _state(store, 1) is None
    assert _state(store, 2) == "dead_lettered"


def test_deadletters_purge_on_a_terminal_deletes_only_the_dead_letters_it_counted(
    store: Path,
) -> None:
    # The question waits for a person; a dead letter that arrives meanwhile was not in the count
    # they said yes to, and stays.
    def dead_letter_arrives_then_yes() -> str:
        conn = connect(store)
        try:
            first = get_delivery(conn, 1)
            assert first is not None
            (late,) = queue_event(conn, 5, [first.subscription_id], at=T0 + 100)
            finish(conn, late.delivery_id, status=413, reason="PayloadTooLarge", at=T0 + 110)
        finally:
            conn.close()
        return "y\n"

    result = run_in_terminal(
        "deadletters", "purge", "--reason", "PayloadTooLarge", "--store", str(store),
        answers=[("delete 1 dead letter?", dead_letter_arrives_then_yes)],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "purged 1 dead letter" in result.output
    assert _state(store, 1) is None
    assert [r["event_id"] for r in run_cli("-o", "json", "deadletters", "list", "--reason",
        "PayloadTooLarge", "--store", store).json] == [event_id(5)]  # fmt: skip


# -- dead letters made by the real engine against real receivers -----------------------------------
def _deliver_until_final(store: Path, ids: list[int]) -> None:
    """The engine (time scale 50: the 30 s timeout is 0.6 s) on ``store`` until every delivery in ``ids`` is final."""

    async def main() -> None:
        config = DispatcherConfig(store_path=store, time_scale=50, plugins=False)
        async with running(config):
            deadline = time.monotonic() + 15
            while any(_state(store, i) not in ("delivered", "dead_lettered") for i in ids):
                assert time.monotonic() < deadline, "not final within 15 s"
                await asyncio.sleep(0.02)

    asyncio.run(main())


def test_deadletters_lifecycle_with_the_engine_and_real_receivers(tmp_path: Path) -> None:
    store = tmp_path / "engine.db"
    conn = new_store(store)
    set_settings(conn, MaxDeliveryAttempts=2)
    two_413s = FaultPlan(steps=(FaultStep(count=2, status=413),))
    with (
        start_in_thread(ReceiverConfig(port=0, credentials=CREDENTIALS, faults=two_413s)) as fixed,
        start_in_thread(
            ReceiverConfig(port=0, credentials=CREDENTIALS, faults=plan_from_options(respond=503))
        ) as failing,
    ):
        sub_a = subscribe(conn, fixed.webhook_url, name="A")
        sub_b = subscribe(conn, failing.webhook_url, name="B")
        now = time.time()
        a_ids = engine_queue(conn, sub_a, 2, at=now)
        b_ids = engine_queue(conn, sub_b, 1, at=now, prefix="11111111")
        _deliver_until_final(store, a_ids + b_ids)

        listed = run_cli("-o", "json", "deadletters", "list", "--store", store)
        by_status = run_cli(
            "-o", "json", "deadletters", "list", "--status", "503", "--store", store
        )
        by_sub = run_cli(
            "-o", "json", "deadletters", "list", "--subscription", str(sub_a), "--store", store
        )
        shown = run_cli("-o", "json", "deadletters", "show", str(b_ids[0]), "--store", store)
        exported = run_cli("deadletters", "export", "--reason", "PayloadTooLarge", "--store", store)
        redriven = run_cli(
            "deadletters", "redrive", "--reason", "PayloadTooLarge", "--store", store
        )
        _deliver_until_final(store, a_ids)
        delivered = run_cli(
            "-o", "json", "deliveries", "list", "--state", "delivered", "--store", store
        )
        purged = run_cli("-o", "json", "deadletters", "purge", "--all", "--yes", "--store", store)
        left = run_cli("-o", "json", "deadletters", "list", "--store", store)
    conn.close()

    assert sorted((r["subscription_id"], r["reason"], r["last_status"]) for r in listed.json) == [
        (sub_a, "PayloadTooLarge", 413),
        (sub_a, "PayloadTooLarge", 413),
        (sub_b, "MaxDeliveryAttemptsExceeded", 503),
    ]
    assert [list(r) for r in listed.json] == [DEAD_LETTER_KEYS] * 3
    assert [r["subscription_id"] for r in by_status.json] == [sub_b]
    assert [r["subscription_id"] for r in by_sub.json] == [sub_a, sub_a]
    assert [(a["outcome"], a["status"]) for a in shown.json["timeline"]] == [
        ("failed", 503),
        ("failed", 503),
    ]
    assert len(exported.stdout.splitlines()) == 2
    assert all(
        orjson.loads(line)["event"]["SubscriptionId"] == sub_a
        for line in exported.stdout.splitlines()
    )
    assert "requeued 2 dead letters" in redriven.stderr
    assert sorted(r["delivery_id"] for r in delivered.json) == sorted(a_ids)
    assert purged.json == {"purged": 1}
    assert left.json == []


def test_dead_letters_outlive_their_deleted_subscription(store: Path) -> None:
    from prefctl.store import subscriptions
    from prefctl.store.db import transaction
    from tests.store.service_helpers import ACCOUNT

    conn = connect(store)
    try:
        (a, b) = [s.id for s in subscriptions.list_subscriptions(conn, ACCOUNT)]
        with transaction(conn):
            assert subscriptions.delete_subscription(conn, ACCOUNT, a, now=T0 + 100)
        # Gone for the API, its Url free again: a new subscription may take it and its name.
        assert [s.id for s in subscriptions.list_subscriptions(conn, ACCOUNT)] == [b]
        with transaction(conn):
            again = add_subscription(conn, subscription_body("https://a.example/hook", name="A"))
    finally:
        conn.close()

    # Its two dead letters stay, still naming it (docs/dispatcher.md).
    listed = run_cli(
        "-o", "json", "deadletters", "list", "--subscription", str(a), "--store", store
    )
    assert listed.exit_code == 0, listed.stderr
    assert [(r["subscription_id"], r["event_id"]) for r in listed.json] == [
        (a, event_id(1)),
        (a, event_id(2)),
    ]
    # A redrive leaves them (nowhere to go) and says how to re-deliver them; B's goes.
    redrive = run_cli("-o", "json", "deadletters", "redrive", "--all", "--store", store)
    assert redrive.exit_code == 0, redrive.stderr
    assert redrive.json == {
        "requeued": 1,
        "event_ids": [event_id(3)],
        "of_deleted_subscriptions": 2,
    }
    assert f"deleted subscription(s) {a}" in redrive.stderr
    assert "replay --dead-lettered --to URL" in redrive.stderr
    left = run_cli("-o", "json", "deadletters", "list", "--store", store)
    assert [r["subscription_id"] for r in left.json] == [a, a]
    # Replaying them to their own (deleted) subscription is refused with the way out.
    replay = run_cli("replay", "--dead-lettered", "--store", store, "--timeout", "5")
    assert replay.exit_code == 4
    assert f"subscription {a} was deleted" in replay.stderr
    assert again != a
    # To a URL, they go, with their EventIds.
    with start_in_thread(ReceiverConfig(port=0, verify=False)) as receiver:
        replay = run_cli(
            "-o", "json", "replay", "--dead-lettered", "--from-subscription", str(a),
            "--to", receiver.webhook_url, "--store", store, "--time-scale", "50", "--timeout", "15",
        )  # fmt: skip
        assert replay.exit_code == 0, replay.stderr
        arrived = receiver.wait_for(2)
    assert sorted_event_ids(arrived) == [event_id(1), event_id(2)]


def test_deadletters_and_deliveries_list_show_at_most_the_limit_and_say_more_match(
    store: Path,
) -> None:
    # The fixture holds three dead letters and four deliveries.
    dead = run_cli("-o", "json", "deadletters", "list", "--limit", "2", "--store", store)
    assert dead.exit_code == 0, dead.stderr
    assert len(dead.json) == 2  # stdout stays one JSON array
    assert "showing the first 2 dead letters; more match" in dead.stderr
    assert "deadletters export" in dead.stderr

    every = run_cli("-o", "json", "deadletters", "list", "--limit", "3", "--store", store)
    assert (len(every.json), every.stderr) == (3, "")

    deliveries = run_cli("deliveries", "list", "--limit", "3", "--store", store)
    assert deliveries.exit_code == 0, deliveries.stderr
    assert "showing the first 3 deliveries; more match" in deliveries.stderr
    assert "--cursor 3" in deliveries.stderr


def test_deadletters_export_into_a_file_from_an_interactive_shell_fills_the_file(
    store: Path,
) -> None:
    # `prefctl deadletters export > dead.ndjson` on a terminal: the spinner runs on stderr and
    # the records must still go to stdout, not be printed above the spinner.
    result = run_with_terminal_stderr("deadletters", "export", "--store", str(store))
    assert result.exit_code == 0, result.stderr
    assert [record["event"]["EventId"] for record in result.ndjson] == [
        event_id(1),
        event_id(2),
        event_id(3),
    ]
    assert "exported 3 dead letters" in result.stderr
    assert "EventId" not in result.stderr


def test_deadletters_redrive_takes_yes_like_purge(tmp_path: Path) -> None:
    result = run_cli("deadletters", "redrive", "--all", "--yes", "--store", tmp_path / "none.db")
    assert "No such option" not in result.stderr
