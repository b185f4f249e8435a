"""The store on either backend: opening, migrating, transactions and errors, on SQLite and on a
real PostgreSQL server (tests/fixtures/postgres.py); and what only PostgreSQL has (a server that
cannot be reached, a refused password, placeholders translated)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from prefctl.errors import EXIT_AUTH, EXIT_UNREACHABLE, AuthError, ConfigError, UnreachableError
from prefctl.store import Store, alerts, ceilings, profiles
from prefctl.store.db import connect, open_store, store_error
from prefctl.store.errors import StoreBusyError, StoreDiskFullError, StoreError
from prefctl.store.migrations import bundled_migrations
from prefctl.store.postgres import redacted, translate
from prefctl.store.settings import get_settings, update_settings
from tests.helpers import free_port, wait_until
from tests.store.service_helpers import ACCOUNT, open_service_store

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def test_open_store_applies_every_migration_on_each_backend(store_location: str) -> None:
    with open_store(store_location) as store:
        names = [row["name"] for row in store.execute("SELECT name FROM schema_migrations")]
    assert sorted(names) == [m.name for m in bundled_migrations()]


def test_migrations_have_the_same_names_on_both_backends() -> None:
    sqlite = [m.name for m in bundled_migrations("sqlite")]
    postgresql = [m.name for m in bundled_migrations("postgresql")]
    assert postgresql == sqlite


def test_open_store_reopened_applies_nothing_again(store_location: str) -> None:
    with open_store(store_location):
        pass
    with open_store(store_location) as store:
        count = store.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]
    assert count == len(bundled_migrations())


def test_open_store_by_several_processes_at_once_migrates_once(postgres_url: str) -> None:
    opener = f"from prefctl.store.db import open_store\nwith open_store({postgres_url!r}): pass"
    processes = [
        subprocess.Popen([sys.executable, "-c", opener], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    failures = [p.communicate(timeout=60)[1] for p in processes if p.wait(timeout=60) != 0]
    assert failures == []
    with open_store(postgres_url) as store:
        names = [row[0] for row in store.execute("SELECT name FROM schema_migrations")]
    assert sorted(names) == [m.name for m in bundled_migrations()]


def test_store_rows_read_by_name_and_by_index(store_location: str) -> None:
    with open_store(store_location) as store:
        row = store.execute("SELECT 7 AS seven, 'x' AS letter").fetchone()
    assert (row["seven"], row[0], row["letter"], row[1]) == (7, 7, "x", "x")
    assert dict(row) == {"seven": 7, "letter": "x"}


def test_store_transaction_that_raises_leaves_nothing(store_location: str) -> None:
    with open_store(store_location) as store:
        with pytest.raises(RuntimeError), store.transaction():
            store.execute(
                "INSERT INTO signing_keys (kid, private_key_pem, created_at) VALUES (?, ?, ?)",
                ("k1", "pem", 1.0),
            )
            raise RuntimeError("undo")
        assert store.execute("SELECT count(*) FROM signing_keys").fetchone()[0] == 0


def test_store_savepoint_that_raises_undoes_only_its_own_writes(store_location: str) -> None:
    insert = "INSERT INTO signing_keys (kid, private_key_pem, created_at) VALUES (?, ?, ?)"
    with open_store(store_location) as store:
        with store.transaction():
            store.execute(insert, ("kept", "pem", 1.0))
            with pytest.raises(RuntimeError), store.transaction():
                store.execute(insert, ("undone", "pem", 2.0))
                raise RuntimeError("undo the inner one")
        kids = [row[0] for row in store.execute("SELECT kid FROM signing_keys")]
    assert kids == ["kept"]


def test_store_duplicate_key_is_a_store_error(store_location: str) -> None:
    insert = "INSERT INTO signing_keys (kid, private_key_pem, created_at) VALUES (?, ?, ?)"
    with open_store(store_location) as store:
        store.execute(insert, ("k", "pem", 1.0))
        with pytest.raises(StoreError), store.transaction():
            store.execute(insert, ("k", "pem", 1.0))
        # the store is usable after the failed transaction
        assert store.execute("SELECT count(*) FROM signing_keys").fetchone()[0] == 1


def test_postgres_lock_held_past_the_timeout_is_a_busy_store(postgres_url: str) -> None:
    with open_store(postgres_url) as first, open_store(postgres_url) as second:
        first.execute("SELECT 1")  # both migrated
        with first.transaction():
            first.execute("LOCK TABLE signing_keys IN ACCESS EXCLUSIVE MODE")
            second.execute("SET lock_timeout = '50ms'")
            with pytest.raises(StoreBusyError):
                second.execute("SELECT count(*) FROM signing_keys")


def test_postgres_snapshot_sees_one_state_while_another_connection_commits(
    postgres_url: str,
) -> None:
    insert = "INSERT INTO signing_keys (kid, private_key_pem, created_at) VALUES (?, ?, ?)"
    with open_store(postgres_url) as reader, open_store(postgres_url) as writer:
        with reader.snapshot():
            before = reader.execute("SELECT count(*) FROM signing_keys").fetchone()[0]
            writer.execute(insert, ("k", "pem", 1.0))
            during = reader.execute("SELECT count(*) FROM signing_keys").fetchone()[0]
        after = reader.execute("SELECT count(*) FROM signing_keys").fetchone()[0]
    assert (before, during, after) == (0, 0, 1)


def test_postgres_unreachable_is_exit_5_naming_the_host() -> None:
    port = free_port()
    with pytest.raises(UnreachableError) as caught:
        connect(f"postgresql://prefctl:s3cret-pw@127.0.0.1:{port}/prefctl")
    assert caught.value.exit_code == EXIT_UNREACHABLE
    assert str(caught.value) == f"cannot reach PostgreSQL at 127.0.0.1:{port}: Connection refused"
    assert "s3cret-pw" not in f"{caught.value} {caught.value.hint}"


def test_postgres_wrong_password_is_exit_3_without_the_password(
    postgres_password_url: str,
) -> None:
    with pytest.raises(AuthError) as caught:
        connect(postgres_password_url)
    text = f"{caught.value} {caught.value.hint}"
    assert caught.value.exit_code == EXIT_AUTH
    assert "not-the-password-1f3a" not in text
    assert "prefctl_password@" in text


def test_translate_turns_sqlite_placeholders_into_numbered_ones() -> None:
    assert translate("SELECT ? , ?")[0] == "SELECT $1 , $2"
    assert translate("SELECT ?2, ?1, ?2")[0] == "SELECT $2, $1, $2"
    assert translate("SELECT :a, :b, :a") == ("SELECT $1, $2, $1", ("a", "b"))


def test_translate_leaves_literals_casts_and_comments_alone() -> None:
    sql = "SELECT '?:x' AS \"?\", v::jsonb, 5 % 2 -- why? :y\nFROM t WHERE a = ?"
    assert translate(sql)[0] == (
        "SELECT '?:x' AS \"?\", v::jsonb, 5 % 2 -- why? :y\nFROM t WHERE a = $1"
    )


def test_postgres_percent_in_a_literal_and_a_parameter_round_trips(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        row = store.execute("SELECT '100%' AS literal, ? AS param", ("50% off",)).fetchone()
    assert (row["literal"], row["param"]) == ("100%", "50% off")


def test_redacted_url_drops_the_password() -> None:
    assert redacted("postgresql://me:pw@db:5432/x") == "postgresql://me@db:5432/x"
    assert redacted("postgresql://db/x") == "postgresql://db/x"


def test_postgres_store_without_the_driver_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    with pytest.raises(ConfigError) as caught:
        connect("postgresql://me:pw@db.example/prefctl")
    assert "pip install '.[postgres]'" in str(caught.value.hint)
    assert "pw" not in str(caught.value)


def test_sqlite_location_with_a_scheme_names_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with open_store(f"sqlite:{path}") as store:
        store.execute(
            "INSERT INTO signing_keys (kid, private_key_pem, created_at) VALUES ('k', 'p', 1)"
        )
    with open_store(path) as store:
        assert store.execute("SELECT kid FROM signing_keys").fetchone()[0] == "k"


def test_postgres_rows_status_is_libpqs_tuples_ok() -> None:
    psycopg_pq = pytest.importorskip("psycopg.pq")
    from prefctl.store import postgres

    assert postgres._TUPLES_OK == psycopg_pq.ExecStatus.TUPLES_OK


def test_postgres_statement_answering_rows_and_none_read_alike(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        assert store.execute("SELECT 1 WHERE false").fetchall() == []
        changed = store.execute("UPDATE subscriptions_version SET version = version")
        assert (changed.fetchall(), changed.fetchone(), changed.rowcount) == ([], None, 1)
        first = store.execute("SELECT version AS v FROM subscriptions_version").fetchone()
        again = store.execute("SELECT version AS v FROM subscriptions_version").fetchone()
    assert first["v"] == again["v"] == 0


@pytest.mark.parametrize(
    ("error_class", "expected"),
    [
        ("SerializationFailure", StoreBusyError),
        ("DeadlockDetected", StoreBusyError),
        ("LockNotAvailable", StoreBusyError),
        ("QueryCanceled", StoreBusyError),
        ("DiskFull", StoreDiskFullError),
        ("UniqueViolation", StoreError),
    ],
)
def test_postgres_driver_errors_read_as_the_stores(error_class: str, expected: type) -> None:
    errors = pytest.importorskip("psycopg.errors")
    translated = store_error(getattr(errors, error_class)("the server's words"))
    assert type(translated) is expected
    assert isinstance(translated, StoreError)
    assert translated.reason == "the server's words"


def test_postgres_connection_lost_reads_as_unreachable() -> None:
    psycopg = pytest.importorskip("psycopg")
    translated = store_error(psycopg.OperationalError("server closed the connection"))
    assert isinstance(translated, UnreachableError)
    assert translated.exit_code == EXIT_UNREACHABLE


# Connections of this test's database waiting for a lock another holds.
_LOCK_WAITS = (
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE wait_event_type = 'Lock' AND datname = current_database()"
)


@pytest.fixture
def two_writers(postgres_url: str) -> Iterator[tuple[Store, Store]]:
    """Two connections to one migrated database with the test accounts."""
    first = open_service_store(postgres_url)
    second = connect(postgres_url)
    yield first, second
    first.close()
    second.close()


def _waiting(postgres_url: str, target: Callable[[], None]) -> threading.Thread:
    """``target`` running in a thread, once it waits for a lock another connection holds."""
    thread = threading.Thread(target=target)
    thread.start()
    with closing(connect(postgres_url)) as watcher:
        wait_until(lambda: watcher.execute(_LOCK_WAITS).fetchone()[0] == 1, what="no lock wait")
    return thread


def test_postgres_settings_changed_by_two_connections_at_once_keep_both_changes(
    postgres_url: str, two_writers: tuple[Store, Store]
) -> None:
    first, second = two_writers

    def change_another() -> None:
        with second.transaction():
            update_settings(second, ACCOUNT, {"MaxDeliveryAttempts": 3})

    with first.transaction():
        update_settings(first, ACCOUNT, {"Duration": 7})
        other = _waiting(postgres_url, change_another)  # for the first's commit, as on SQLite
    other.join(timeout=30)
    settings = get_settings(first, ACCOUNT)
    assert (settings["Duration"], settings["MaxDeliveryAttempts"]) == (7, 3)


def test_postgres_profile_read_for_update_waits_for_the_writer_before_it(
    postgres_url: str, two_writers: tuple[Store, Store]
) -> None:
    first, second = two_writers
    seen: list[dict[str, object] | None] = []
    with first.transaction():
        profile_id = profiles.next_profile_id(first, ACCOUNT)
        profiles.save_profile(first, ACCOUNT, {"ProfileId": profile_id}, now=1.0)

    def read_for_update() -> None:
        with second.transaction():
            seen.append(profiles.get_profile(second, ACCOUNT, profile_id, for_update=True))

    with first.transaction():
        profiles.get_profile(first, ACCOUNT, profile_id, for_update=True)
        other = _waiting(postgres_url, read_for_update)
        profiles.save_profile(first, ACCOUNT, {"ProfileId": profile_id, "Tags": ["a"]}, now=2.0)
    other.join(timeout=30)
    assert seen == [{"ProfileId": profile_id, "Tags": ["a"]}]


def _taking_the_turn(
    conn: Store, taken: list[tuple[float | None, int, bool]]
) -> Callable[[], None]:
    """An engine's turn on ``conn`` (store/ceilings.py): what it read, then whether it took it."""

    def turn() -> None:
        with conn.transaction():
            seen = ceilings.next_cycle_at(conn, ACCOUNT)
            others = ceilings.others_in_flight(conn, ACCOUNT, "second", now=T0)
            took = ceilings.take_turn(conn, ACCOUNT, seen=seen, next_at=T0 + 2)
            taken.append((seen, others, took))

    return turn


@pytest.mark.parametrize("first_cycle", [True, False])
def test_postgres_turn_read_before_another_dispatchers_commit_is_refused_after_it(
    postgres_url: str, two_writers: tuple[Store, Store], first_cycle: bool
) -> None:
    first, second = two_writers
    if not first_cycle:
        with first.transaction():
            assert ceilings.take_turn(first, ACCOUNT, seen=None, next_at=T0)
    seen = None if first_cycle else T0
    taken: list[tuple[float | None, int, bool]] = []
    with first.transaction():
        assert ceilings.take_turn(first, ACCOUNT, seen=seen, next_at=T0 + 1)
        ceilings.hold(first, ACCOUNT, "first", in_flight=50, lease_until=T0 + 60)
        # READ COMMITTED: the second reads the cycle and the ceiling as they were, then waits
        # for the first's commit at its compare-and-set, and finds the cycle taken.
        other = _waiting(postgres_url, _taking_the_turn(second, taken))
    other.join(timeout=30)
    assert taken == [(seen, 0, False)]
    assert ceilings.next_cycle_at(second, ACCOUNT) == T0 + 1


def test_postgres_alert_claimed_by_another_dispatcher_meanwhile_is_not_claimed_again(
    postgres_url: str, two_writers: tuple[Store, Store]
) -> None:
    first, second = two_writers
    with first.transaction():
        alert_id = alerts.add_alert(
            first,
            alerts.NewAlert(
                incident_id=1,
                service_client_id=ACCOUNT,
                subscription_id=1,
                subscription_name="orders",
                kind="opened",
                sequence=1,
                dead_letters=1,
                incident_dead_letters=1,
                recipients=("ops@example.com",),
                subject="orders: deliveries are failing",
                message_id="<alert-1@prefctl.test>",
                created_at=T0,
            ),
        )
    claimed: list[bool] = []

    def claim() -> None:
        with second.transaction():
            claimed.append(alerts.claim_alert(second, alert_id, "second", now=T0, until=T0 + 60))

    with first.transaction():
        assert alerts.claim_alert(first, alert_id, "first", now=T0, until=T0 + 60)
        other = _waiting(postgres_url, claim)
    other.join(timeout=30)
    assert claimed == [False]


def test_postgres_claim_from_a_backlog_never_analyzed_takes_the_oldest_by_the_due_index(
    postgres_url: str,
) -> None:
    """A dispatcher's claim stays a walk of the due index in order, however stale the planner's
    statistics: on a store whose 20,000 queued deliveries (10 subscriptions) were written faster
    than autovacuum analyzes, the plan without the claim's settings read every due row once per
    subscription and sorted them all (100-300 ms per claim, each cycle)."""
    from prefctl.store import delivery_claims
    from prefctl.store.db import transaction
    from tests.store.service_helpers import add_subscription, subscription_body

    with closing(open_service_store(postgres_url)) as store:
        for number in range(10):
            add_subscription(
                store, subscription_body(f"https://hooks.example/{number}", name=f"hook-{number}")
            )
        with transaction(store):
            store.execute(
                "INSERT INTO events (event_id, service_client_id, event_type, entity,"
                " original_event_time, data) SELECT 'e' || g, ?, 'profile.created', 'Profile',"
                " ? + g, '{}' FROM generate_series(1, 2000) AS g",
                (ACCOUNT, T0),
            )
            store.execute(
                "INSERT INTO deliveries (event_rowid, subscription_id, state, event_time,"
                " next_attempt_at) SELECT e.id, s.id, 'queued', e.original_event_time,"
                " e.original_event_time FROM events e, subscriptions s"
            )
        with transaction(store):
            store.execute(delivery_claims._DUE_IN_ORDER_POSTGRES)
            plan = "\n".join(
                row[0]
                for row in store.execute(
                    "EXPLAIN " + delivery_claims._CLAIM_ACCOUNT_POSTGRES,
                    {
                        "owner": "d",
                        "until": T0 + 1e6,
                        "now": T0 + 1e5,
                        "limit": 500,
                        "expired_before": None,
                        "max_attempts": None,
                        "account": ACCOUNT,
                    },
                )
            )
        claimed = delivery_claims.claim_due(store, T0 + 1e5, 500, 60, "d", account=ACCOUNT)
        oldest = store.execute(
            "SELECT id FROM deliveries ORDER BY next_attempt_at, id LIMIT 500"
        ).fetchall()
    assert "Index Scan using deliveries_due" in plan
    assert "Sort" not in plan
    assert "Bitmap" not in plan
    assert [c.delivery_id for c in claimed] == [row[0] for row in oldest]
