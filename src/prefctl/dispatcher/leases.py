"""Lease owners: who holds a claimed delivery, and giving back what a dead process held.

A claim is a lease (``store/delivery_claims.py``): a dispatcher that dies leaves its deliveries
``in_flight`` until ``lease_until``, after which any claimer takes them back. To make recovery
immediate after a crash on the same machine, owners are named ``host:pid:token:cycle``; at start,
and every ``SWEEP_SECONDS`` while it runs (several dispatchers share one store: one of them may die
while the others go on), an engine gives back at once the leases (and the share of the accounts'
ceilings, held under ``host:pid:token``) of owners on this host whose process is gone (or is this
very process under a token no engine here uses any more). Leases of live processes, and of other
hosts, are left to expire.

A lease lasts the response timeout plus Duration (both scaled: the result of a cycle's attempts
is recorded at the next cycle) plus a real-time margin for a busy process, so that a live engine
never loses a lease it is still using.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from pathlib import Path

from prefctl.dispatcher.policy import RESPONSE_TIMEOUT_SECONDS
from prefctl.store import Store
from prefctl.store.ceilings import release_slots, slot_owners
from prefctl.store.db import transaction
from prefctl.store.delivery_claims import release_claims
from prefctl.store.dispatcher_state import lease_owners

__all__ = [
    "LEASE_MARGIN_SECONDS",
    "SWEEP_SECONDS",
    "LeaseOwner",
    "lease_seconds",
    "release_dead_owners",
]

LEASE_MARGIN_SECONDS = 30.0
# How often (real seconds) a running engine looks for leases of dead processes on its host.
SWEEP_SECONDS = 5.0

# Tokens of the engines alive in this process: leases under this pid with another token are
# leftovers of a process that had the same pid before.
_live_tokens: set[str] = set()
_lock = threading.Lock()


class LeaseOwner:
    """The lease owner names of one engine: ``host:pid:token``, plus ``:cycle`` per claim so that
    a result of an old cycle can never pass for one of a later claim."""

    def __init__(self) -> None:
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.token = secrets.token_hex(4)
        self.base = f"{self.host}:{self.pid}:{self.token}"
        with _lock:
            _live_tokens.add(self.token)

    def for_cycle(self, cycle: int) -> str:
        return f"{self.base}:{cycle}"

    def retire(self) -> None:
        with _lock:
            _live_tokens.discard(self.token)


def lease_seconds(duration_seconds: float, time_scale: float) -> float:
    """How long a cycle's claims are leased (see the module docstring)."""
    return (RESPONSE_TIMEOUT_SECONDS + duration_seconds) / time_scale + LEASE_MARGIN_SECONDS


def release_dead_owners(conn: Store) -> int:
    """Give back the leases of dead owners on this host, and the share of the accounts'
    MaxConcurrentRequests they held (``store/ceilings.py``); returns how many deliveries."""
    host = socket.gethostname()
    released = 0
    with transaction(conn):
        for owner in lease_owners(conn):
            if _is_dead(owner, host):
                released += release_claims(conn, owner)
        for owner in slot_owners(conn):
            if _is_dead(owner, host):
                release_slots(conn, owner)
    return released


def _is_dead(owner: str, host: str) -> bool:
    """Whether ``owner`` (``host:pid:token``, with ``:cycle`` for a claim) is an engine of this
    host that is gone."""
    parts = owner.split(":")
    if len(parts) not in (3, 4) or parts[0] != host or not parts[1].isdigit():
        return False  # another host, or a claimer that is not an engine: wait for the lease
    pid, token = int(parts[1]), parts[2]
    if pid == os.getpid():
        with _lock:
            return token not in _live_tokens
    return not _process_alive(pid)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # A killed child its parent has not reaped yet is a zombie: gone for our purposes.
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")
