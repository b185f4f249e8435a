"""``prefctl deliveries list / show`` on a store file."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from prefctl.dispatcher.deadletters import DeadLetterFilter, redrive_dead_letters
from prefctl.store.delivery_results import Attempt, DeliveryResult, record_results
from tests.dispatcher.ops_helpers import T0, event_id, finish, queue_event
from tests.helpers import run_cli
from tests.store.service_helpers import add_subscription, open_service_store, subscription_body


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Event 1 → subscription A (dead-lettered after 2 × 503) and B (queued)."""
    path = tmp_path / "store.db"
    conn = open_service_store(path)
    subs = [
        add_subscription(conn, subscription_body("https://a.example/hook", name="A")),
        add_subscription(conn, subscription_body("https://b.example/hook", name="B")),
    ]
    (a1, _b1) = queue_event(conn, 1, subs)
    finish(conn, a1.delivery_id, status=503, attempts=2)
    conn.close()
    return path


def test_deliveries_list_json_is_an_array_of_snake_case_records(store: Path) -> None:
    result = run_cli("deliveries", "list", "--store", store, "-o", "json")

    assert result.exit_code == 0, result.stderr
    records = result.json
    assert [(r["delivery_id"], r["state"]) for r in records] == [
        (1, "dead_lettered"),
        (2, "queued"),
    ]
    assert records[0]["event_id"] == event_id(1)
    assert records[0]["reason"] == "MaxDeliveryAttemptsExceeded"
    assert records[1]["next_attempt_at"] == "2026-01-01T00:00:00.000Z"


def test_deliveries_list_state_filter_and_table(store: Path) -> None:
    result = run_cli("deliveries", "list", "--store", store, "--state", "queued")

    assert result.exit_code == 0, result.stderr
    assert "queued" in result.stdout
    assert "dead_lettered" not in result.stdout


def test_deliveries_list_nothing_matches_says_so_on_stderr(store: Path) -> None:
    result = run_cli("deliveries", "list", "--store", store, "--subscription", "99")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "no deliveries" in result.stderr


def test_deliveries_show_prints_the_attempt_timeline(store: Path) -> None:
    result = run_cli("deliveries", "show", "1", "--store", store)

    assert result.exit_code == 0, result.stderr
    assert "attempts" in result.stdout
    assert result.stdout.count("503") >= 2
    assert "dead-lettered: MaxDeliveryAttemptsExceeded" in result.stdout
    assert "50 ms" in result.stdout


def test_deliveries_show_json_has_the_timeline(store: Path) -> None:
    result = run_cli("-o", "json", "deliveries", "show", "1", "--store", store)

    assert result.exit_code == 0, result.stderr
    timeline = result.json["timeline"]
    assert [(a["attempt"], a["outcome"], a["status"]) for a in timeline] == [
        (1, "failed", 503),
        (2, "failed", 503),
    ]


def test_deliveries_show_unknown_id_exits_4(store: Path) -> None:
    result = run_cli("deliveries", "show", "42", "--store", store)
    assert result.exit_code == 4
    assert "delivery 42 not found" in result.stderr


def test_deliveries_list_without_a_store_exits_2_with_a_hint(tmp_path: Path) -> None:
    result = run_cli("deliveries", "list")
    assert result.exit_code == 2
    assert "no store at" in result.stderr
    assert "prefctl emulator start" in result.stderr


@pytest.mark.parametrize("command", [("deliveries", "list"), ("deadletters", "list")])
def test_store_commands_leave_a_file_that_is_not_a_store_untouched(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    # A mistyped --store naming another application's database, or an empty file.
    other = tmp_path / "app.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.commit()
    empty = tmp_path / "empty.db"
    empty.touch()
    before = other.read_bytes()
    for path in (other, empty):
        result = run_cli(*command, "--store", path)
        assert result.exit_code == 2
        assert "is not a prefctl store" in result.stderr
    assert other.read_bytes() == before
    assert empty.stat().st_size == 0
    result = run_cli("dispatcher", "run", "--store", other, "--once")
    assert result.exit_code == 2
    assert other.read_bytes() == before


def test_deliveries_show_labels_a_late_answer_and_a_probation_skip_not_as_a_redrive(
    tmp_path: Path,
) -> None:
    # Attempt 1 times out, attempt 2 is put off by probation then fails, and attempt 1's 200
    # arrives late: rows share attempt numbers, and nothing was redriven.
    path = tmp_path / "store.db"
    conn = open_service_store(path)
    sub = add_subscription(conn, subscription_body("https://a.example/hook", name="A"))
    (delivery,) = queue_event(conn, 1, [sub])
    did = delivery.delivery_id
    rows = [
        (Attempt(1, T0, T0 + 30, "timed_out", None, "no response within 30 s"), "queued", 1),
        (Attempt(2, T0 + 40, T0 + 40, "skipped", None, "endpoint on probation"), "queued", 1),
        (Attempt(2, T0 + 60, T0 + 60.1, "failed", 503, None, 100.0), "queued", 2),
        (Attempt(1, T0, T0 + 70, "late_delivered", 200, None, 70_000.0), "delivered", 2),
    ]
    for attempt, state, count in rows:
        final = state == "delivered"
        record_results(
            conn,
            [
                DeliveryResult(
                    did,
                    state,  # type: ignore[arg-type]
                    count,
                    at=attempt.finished_at,
                    next_attempt_at=None if final else attempt.finished_at + 10,
                    attempt=attempt,
                )
            ],
        )
    conn.close()

    result = run_cli("deliveries", "show", str(did), "--store", path)

    assert result.exit_code == 0, result.stderr
    assert "redrive" not in result.stdout
    assert "no response within 30 s" in result.stdout  # the timeout says what happened
    assert "attempt 1 answered late" in result.stdout
    assert "2026-01-01T00:01:00" in result.stdout  # the skip points at the attempt made later


def test_deliveries_show_marks_a_redrive_after_a_single_attempt_run(tmp_path: Path) -> None:
    # A 413 dead-letters at the first attempt; redriven, the new run starts at attempt 1 again.
    path = tmp_path / "store.db"
    conn = open_service_store(path)
    sub = add_subscription(conn, subscription_body("https://a.example/hook", name="A"))
    (delivery,) = queue_event(conn, 1, [sub])
    finish(conn, delivery.delivery_id, status=413, reason="PayloadTooLarge")
    redrive_dead_letters(conn, DeadLetterFilter(), now=T0 + 20)
    finish(conn, delivery.delivery_id, state="delivered", status=200, reason=None, at=T0 + 30)
    conn.close()

    result = run_cli("deliveries", "show", str(delivery.delivery_id), "--store", path)

    assert result.exit_code == 0, result.stderr
    assert "run again (redrive or replay)" in result.stdout


def test_deliveries_list_subscription_by_name_or_id_and_unknown_name_suggests(store: Path) -> None:
    by_id = run_cli("deliveries", "list", "--store", store, "--subscription", "2", "-ojson")
    by_name = run_cli("deliveries", "list", "--store", store, "--subscription", "B", "-ojson")
    assert by_name.exit_code == 0, by_name.stderr
    assert by_name.json == by_id.json
    assert [r["subscription_id"] for r in by_name.json] == [2]
    wrong = run_cli("deliveries", "list", "--store", store, "--subscription", "b")
    assert wrong.exit_code == 4
    assert "no subscription named 'b' (did you mean 'B'?)" in wrong.stderr


def test_deliveries_list_at_80_columns_keeps_the_type_and_gives_up_the_event_id_whole(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # stdout counts as a terminal of 80 columns
    result = run_cli("deliveries", "list", "--store", store)
    lines = result.stdout.splitlines()
    assert len(lines) == 4  # header, rule, two rows: one line each
    assert all(len(line) <= 80 for line in lines)
    assert "TYPE" in lines[0]
    assert "contacts.email.updated" in lines[2]
    assert event_id(1)[:8] not in result.stdout  # left out whole, never cut
    assert "not shown at 80 columns: EVENT ID" in result.stderr
    piped = run_cli("deliveries", "list", "--store", store)
    monkeypatch.delenv("TTY_COMPATIBLE")
    piped = run_cli("deliveries", "list", "--store", store)
    fields = [line.split("\t") for line in piped.stdout.splitlines()]
    assert fields[0][:3] == ["ID", "EVENT ID", "TYPE"]
    assert fields[1][1] == event_id(1)
    assert len({len(f) for f in fields}) == 1


def test_deliveries_list_with_cursor_pages_through_json_without_stderr(store: Path) -> None:
    first = run_cli(
        "deliveries", "list", "--store", store, "--limit", "1", "-ojson", "--with-cursor"
    )
    assert first.exit_code == 0, first.stderr
    assert [r["delivery_id"] for r in first.json["items"]] == [1]
    cursor = first.json["next_cursor"]
    second = run_cli(
        "deliveries",
        "list",
        "--store",
        store,
        "--limit",
        "1",
        "--cursor",
        cursor,
        "-ojson",
        "--with-cursor",
    )
    assert [r["delivery_id"] for r in second.json["items"]] == [2]
    assert second.json["next_cursor"] is None


def test_completion_of_show_offers_the_store_s_dead_letters_and_deliveries(store: Path) -> None:
    from tests.cli.test_completion import complete

    assert complete("bash", f"prefctl deadletters show --store {store} ") == [event_id(1)]
    assert complete("bash", f"prefctl deliveries show --store {store} ") == ["2", "1"]
    assert complete("zsh", f"prefctl deliveries list --store {store} --subscription ") != []
