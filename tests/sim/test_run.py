"""The simulator runs the real engine on a virtual clock: what a user would read in the report."""

from __future__ import annotations

import json

from tests.sim.scenarios import ALWAYS_500, OUTAGE, REJECTING, SHORT_TTL, SLOW, run


def test_simulate_same_seed_gives_identical_json_bytes() -> None:
    first = json.dumps(run(OUTAGE), indent=2)
    second = json.dumps(run(OUTAGE), indent=2)
    other = json.dumps(run(OUTAGE.replace("seed = 5", "seed = 6")), indent=2)

    assert first == second
    assert other != first


def test_simulate_outage_gives_retries_then_recovery() -> None:
    report = run(OUTAGE)

    deliveries = report["deliveries"]
    assert deliveries["pending"] == 0
    assert deliveries["delivered"] == deliveries["total"] == report["events"]
    assert report["dead_letters"]["total"] == 0
    assert deliveries["retried"] > 0
    assert report["attempts"]["by_outcome"]["failed"] > 0
    buckets = report["timeline"]["buckets"]
    width = report["timeline"]["bucket_minutes"]
    before = [b for b in buckets if b["start_minute"] + width <= 15]
    during = [b for b in buckets if 15 <= b["start_minute"] < 30]
    assert before
    assert all(b["failed"] == b["skipped"] == 0 for b in before)
    assert all(b["delivered"] == 0 for b in during)
    assert sum(b["failed"] + b["skipped"] for b in during) > 0
    assert buckets[-1]["delivered"] > 0
    (period,) = report["probation"]
    assert 15 <= period["start_minute"] < 30 <= period["end_minute"]
    # Events of the outage waited for it to end: the latency tail shows it.
    assert report["latency_seconds"]["max"] > 10 * 60


def test_simulate_max_attempts_dead_letters_with_its_reason() -> None:
    report = run(ALWAYS_500)

    assert report["deliveries"]["delivered"] == 0
    assert report["dead_letters"]["by_reason"] == {
        "BadRequest": 0,
        "MaxDeliveryAttemptsExceeded": report["deliveries"]["total"],
        "PayloadTooLarge": 0,
        "TimeToLiveExceeded": 0,
    }
    assert [row["attempts"] for row in report["attempts"]["histogram"]] == [3]


def test_simulate_ttl_dead_letters_with_its_reason() -> None:
    report = run(SHORT_TTL)

    assert report["dead_letters"]["by_reason"] == {
        "BadRequest": 0,
        "MaxDeliveryAttemptsExceeded": 0,
        "PayloadTooLarge": 0,
        "TimeToLiveExceeded": report["deliveries"]["total"],
    }
    # Attempts at 0 s, ~10 s and ~30 s; the next (~70 s) comes due past the 1-minute TTL.
    assert [row["attempts"] for row in report["attempts"]["histogram"]] == [3]


def test_simulate_400_and_413_dead_letter_at_once() -> None:
    report = run(REJECTING)

    reasons = report["dead_letters"]["by_reason"]
    assert {reason for reason, count in reasons.items() if count} == {
        "BadRequest",
        "PayloadTooLarge",
    }
    assert report["dead_letters"]["total"] > 0
    # Every delivery ended on its first attempt: delivered, or dead-lettered without a retry.
    assert report["deliveries"]["retried"] == 0
    (only,) = report["attempts"]["histogram"]
    assert only["attempts"] == 1
    assert only["dead_lettered"] == report["dead_letters"]["total"]


def test_simulate_reports_alerts_with_times_and_subjects() -> None:
    alerts = run(REJECTING)["alerts"]

    assert alerts[0]["kind"] == "opened"
    assert alerts[0]["subscription"] == "simulated"
    assert "dead-lettered" in alerts[0]["subject"]
    assert '"simulated"' in alerts[0]["subject"]
    minutes = [alert["minute"] for alert in alerts]
    assert minutes == sorted(minutes)
    assert all(alert["at"].startswith("2026-01-01T") for alert in alerts)


def test_simulate_without_alerts_sends_none() -> None:
    text = REJECTING + '\n[[subscriptions]]\nname = "quiet"\nalerts = false\n'

    assert run(text)["alerts"] == []


def test_simulate_slow_answers_time_out_and_late_200s_still_deliver() -> None:
    report = run(SLOW)

    outcomes = report["attempts"]["by_outcome"]
    assert outcomes["timed_out"] > 0
    assert outcomes["late_delivered"] > 0
    assert report["deliveries"]["delivered"] == report["deliveries"]["total"]


def test_simulate_skipping_idle_cycles_changes_nothing_but_the_cycle_count() -> None:
    skipped = run(SLOW)
    every = run(SLOW, skip_idle_cycles=False)

    assert skipped["run"].pop("cycles") < every["run"].pop("cycles")
    assert json.dumps(skipped) == json.dumps(every)


def test_simulate_subscriptions_get_only_the_types_they_select() -> None:
    text = (
        OUTAGE.replace("[load]", '[load]\nevent_mix = { "profile.updated" = 1, "tag.added" = 1 }')
        + '\n[[subscriptions]]\nname = "all"\n[[subscriptions]]\nname = "tags"\nevent_types = ["tag.added"]\n'
    )
    report = run(text)

    every, tags = report["subscriptions"]
    assert every["deliveries"]["total"] == report["events"]
    assert 0 < tags["deliveries"]["total"] < report["events"]
    assert (
        report["deliveries"]["total"] == every["deliveries"]["total"] + tags["deliveries"]["total"]
    )


def test_simulate_counts_a_retry_sent_before_a_late_success() -> None:
    # Every answer takes 45 s: the first attempt times out at 30 s, its retry goes out ~10 s
    # later, then the first answer arrives (late success, within the window) and delivers.
    report = run(
        "seed = 1\n[load]\nevents_per_minute = 1\nduration_minutes = 1\narrival = 'even'\n"
        "[endpoint]\nlatency_ms = 45000\n"
    )

    assert report["deliveries"]["delivered"] == 1
    # Two requests were sent: both count, and the delivery needed a retry.
    assert report["attempts"]["counted"] == 2
    assert report["attempts"]["histogram"] == [
        {"attempts": 2, "delivered": 1, "dead_lettered": 0, "total": 1}
    ]
    assert report["deliveries"]["retried"] == 1
    assert report["deliveries"]["delivered_first_time"] == 0
    # Both requests got a 200: one delivered, the other is a duplicate.
    assert report["deliveries"]["duplicates"] == 1
    # Every outcome is a key, 0 when it did not happen.
    assert report["attempts"]["by_outcome"] == {
        "delivered": 0,
        "failed": 0,
        "late_delivered": 2,
        "skipped": 0,
        "timed_out": 2,
    }


def test_simulate_late_success_alone_is_one_attempt() -> None:
    # The answer comes at 35 s: after the timeout, before the retry (~40 s), which it cancels.
    report = run(
        "seed = 1\n[load]\nevents_per_minute = 1\nduration_minutes = 1\narrival = 'even'\n"
        "[endpoint]\nlatency_ms = 35000\n"
    )

    assert report["attempts"]["counted"] == 1
    assert report["attempts"]["histogram"][0]["attempts"] == 1
