"""An account's delivery limits held across every dispatcher on the store (migration
``0010_account_ceilings``): whose turn the account's cycle is (Duration), and how many of its
requests each dispatcher has in flight (MaxConcurrentRequests).

The store records and decides nothing: ``dispatcher/turns.py`` keeps the cadence and sizes each
claim. The calls run inside the caller's claim transaction, in this order, so that reading whose
turn it is, what the other dispatchers hold, taking the turn and claiming are one atomic step:

- ``next_cycle_at`` then ``others_in_flight`` read the account's state;
- ``take_turn`` moves the account's next cycle on by a compare-and-set (an UPDATE that matches
  the value read), so two dispatchers never run the same cycle (on PostgreSQL a second claimer
  waits for the first's commit, then finds the value moved);
- ``hold`` reports this dispatcher's requests in flight for the account, under a lease: the rows
  of a dispatcher that died stop counting when their lease ends.

A dispatcher's requests in flight only grow by a claim, and a claim only follows a turn taken: so
the sum read before taking the turn is never below what the others hold when the claim is made.

    >>> seen = next_cycle_at(conn, "DEMO_CORP")
    >>> room = max_concurrent - mine - others_in_flight(conn, "DEMO_CORP", me, now=t)
    >>> if room > 0 and take_turn(conn, "DEMO_CORP", seen=seen, next_at=t + 1.0): ...claim...
    >>> hold(conn, "DEMO_CORP", me, in_flight=mine + claimed, lease_until=t + 61)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefctl.store import Store

__all__ = [
    "hold",
    "next_cycle",
    "next_cycle_at",
    "others_in_flight",
    "release_slots",
    "slot_owners",
    "take_turn",
]


# The rows are written only for an account that exists: a dispatcher whose cycle began before an
# account was removed (``accounts.delete_account`` deletes its rows) writes none back for it.
_ACCOUNT_EXISTS = "EXISTS (SELECT 1 FROM accounts WHERE service_client_id = ?1)"


def next_cycle(last: float, now: float, period: float) -> float:
    """When the cycle after the one due at ``last`` may start, run at ``now``: Duration counts from
    a cycle's start, and one that starts late keeps the cadence (the next is due at its next point
    after ``now``)."""
    due = last
    if now - due >= period:
        due += math.floor((now - due) / period + 1e-9) * period
    return due + period


def next_cycle_at(conn: Store, account: str) -> float | None:
    """When the account's next cycle may start (None: no dispatcher has run one yet)."""
    row = conn.execute(
        "SELECT next_cycle_at FROM dispatcher_cycles WHERE service_client_id = ?", (account,)
    ).fetchone()
    return None if row is None else float(row[0])


def others_in_flight(conn: Store, account: str, owner: str, *, now: float) -> int:
    """The account's requests in flight held by dispatchers other than ``owner`` whose lease
    still runs at ``now``."""
    row = conn.execute(
        "SELECT coalesce(sum(in_flight), 0) FROM dispatcher_slots"
        " WHERE service_client_id = ? AND owner <> ? AND lease_until > ?",
        (account, owner, now),
    ).fetchone()
    return int(row[0])


def take_turn(conn: Store, account: str, *, seen: float | None, next_at: float) -> bool:
    """Run the account's cycle: move its next one to ``next_at`` if it is still ``seen`` (what
    ``next_cycle_at`` read in this transaction). False: another dispatcher took it meanwhile, or
    the account was removed."""
    if seen is None:
        cursor = conn.execute(
            "INSERT INTO dispatcher_cycles (service_client_id, next_cycle_at) SELECT ?1, ?2"
            f" WHERE {_ACCOUNT_EXISTS} ON CONFLICT (service_client_id) DO NOTHING",
            (account, next_at),
        )
    else:
        cursor = conn.execute(
            "UPDATE dispatcher_cycles SET next_cycle_at = ?"
            " WHERE service_client_id = ? AND next_cycle_at = ?",
            (next_at, account, seen),
        )
    return cursor.rowcount == 1


def hold(conn: Store, account: str, owner: str, *, in_flight: int, lease_until: float) -> None:
    """Report ``owner``'s requests in flight for ``account``, counted until ``lease_until`` (not
    for an account removed meanwhile)."""
    conn.execute(
        "INSERT INTO dispatcher_slots (service_client_id, owner, in_flight, lease_until)"
        f" SELECT ?1, ?2, ?3, ?4 WHERE {_ACCOUNT_EXISTS}"
        " ON CONFLICT (service_client_id, owner) DO UPDATE"
        " SET in_flight = excluded.in_flight, lease_until = excluded.lease_until",
        (account, owner, max(in_flight, 0), lease_until),
    )


def slot_owners(conn: Store) -> list[str]:
    """The owners with requests in flight reported, whatever their lease."""
    return [str(row[0]) for row in conn.execute("SELECT DISTINCT owner FROM dispatcher_slots")]


def release_slots(conn: Store, owner: str) -> int:
    """Forget what ``owner`` holds (it stopped, or is gone); returns how many rows went."""
    return conn.execute("DELETE FROM dispatcher_slots WHERE owner = ?", (owner,)).rowcount
