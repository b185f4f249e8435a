"""Webhook subscriptions, the 409 rule, pause/resume, and the handshake's bookkeeping.

A subscription takes its fields from the wire body of ``POST``/``PUT /subscriptions`` (as
``dump_wire(SubscriptionInput)`` makes it) and returns as a ``SubscriptionRecord`` whose
``to_wire()`` is the API's Subscription. Rules kept here:

- **409**: one Url receives one EventType once per account. ``find_conflict`` names the
  subscription and event type in the way; create/replace raise ``DuplicateSubscriptionError``
  (and a unique index backs it up).
- **Names**: ``find_by_name`` is what the REST API checks before a create or a rename (a Name
  taken in the account is its 409). Not a unique index: stores may already hold duplicate names,
  and the temporary subscriptions of ``prefctl replay`` share one.
- **Pause/resume** (``set_state``, also through a replace): pausing with CatchUpOnResume turns
  queued deliveries into held ones, which resume queues with a new EventTime; pausing without it
  drops them. Deliveries in flight finish.
- **Url change**: ProvisioningState becomes Updating and the handshake starts over. A subscription
  that succeeded before (``provisioned_at`` kept) still takes new events meanwhile, as
  ``fanout_targets`` says; they and the queued deliveries wait until it succeeds (the dispatcher
  claims only Active + Succeeded). If it ends Failed, the handshake code dead-letters them
  (``deliveries.dead_letter_pending``): nothing vanishes.
- **Delete** leaves a tombstone (``deleted_at``): notifications stop at once, pending deliveries,
  its event types and its alerting go, and its dead letters stay, still naming it. Every lookup
  here (``get_subscription``, ``list_subscriptions``, names, tokens, fan-out) skips tombstones;
  ``deleted_among`` tells a deleted subscription from one that never existed.

Functions do not open transactions; the caller groups them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import orjson

from prefctl.errors import NotFoundError, PrefctlError
from prefctl.store import deliveries
from prefctl.store._dialect import any_of, lock_account
from prefctl.store.connection import stored_json
from prefctl.store.timestamps import wire_time

if TYPE_CHECKING:
    from prefctl.store import Row, Store

__all__ = [
    "Conflict",
    "DuplicateSubscriptionError",
    "FanoutTarget",
    "Handshake",
    "SubscriptionRecord",
    "alerting_account",
    "create_subscription",
    "delete_subscription",
    "deleted_among",
    "fanout_targets",
    "find_by_name",
    "find_by_validation_token",
    "find_conflict",
    "get_subscription",
    "list_subscriptions",
    "record_handshake_attempt",
    "replace_subscription",
    "set_alerts",
    "set_provisioning_state",
    "set_state",
    "start_validation",
    "subscriptions_version",
]

State = Literal["Active", "Paused"]
ProvisioningState = Literal["Creating", "Updating", "AwaitingManualAction", "Succeeded", "Failed"]


@dataclass(frozen=True, slots=True)
class Handshake:
    """Where the validation handshake stands (for ``dispatcher/handshake.py``)."""

    validation_code: str | None
    validation_token: str | None
    validation_expires_at: float | None
    attempts: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class SubscriptionRecord:
    """A stored subscription; times are Unix seconds."""

    id: int
    service_client_id: str
    name: str
    description: str | None
    url: str
    state: State
    catch_up_on_resume: bool
    provisioning_state: ProvisioningState
    selections: list[dict[str, Any]]
    alerts_enabled: bool
    alert_recipients: list[str]
    created_at: float
    created_by: str | None
    modified_at: float
    modified_by: str | None
    provisioned_at: float | None
    handshake: Handshake

    @property
    def receives_events(self) -> bool:
        """Only Succeeded + Active subscriptions are sent events (docs/api.md)."""
        return self.provisioning_state == "Succeeded" and self.state == "Active"

    @property
    def event_types(self) -> list[str]:
        return [str(selection["EventType"]) for selection in self.selections]

    def to_wire(self) -> dict[str, Any]:
        """The Subscription of the REST API (PascalCase)."""
        wire: dict[str, Any] = {"Id": self.id, "Name": self.name}
        if self.description is not None:
            wire["Description"] = self.description
        wire.update(
            {
                "Url": self.url,
                "State": self.state,
                "CatchUpOnResume": self.catch_up_on_resume,
                "ProvisioningState": self.provisioning_state,
                "Subscriptions": self.selections,
                "Alerts": {"Enabled": self.alerts_enabled, "Recipients": self.alert_recipients},
                "Edited": {
                    "CreateDate": wire_time(self.created_at),
                    "CreatedBy": self.created_by,
                    "ModifiedDate": wire_time(self.modified_at),
                    "ModifiedBy": self.modified_by,
                },
            }
        )
        return wire


@dataclass(frozen=True, slots=True)
class Conflict:
    """The subscription that already sends ``event_type`` to ``url``."""

    subscription_id: int
    name: str
    url: str
    event_type: str


class DuplicateSubscriptionError(PrefctlError):
    """The Url is already subscribed to one of the event types (the API's 409)."""

    def __init__(self, conflict: Conflict) -> None:
        super().__init__(
            f"subscription {conflict.subscription_id} ({conflict.name!r}) already sends"
            f" {conflict.event_type} to {conflict.url}",
            hint="add the event type to that subscription, or use another Url",
        )
        self.conflict = conflict


@dataclass(frozen=True, slots=True)
class FanoutTarget:
    """A subscription new events go to: queued, or held while paused with catch-up.

    ``selections_json`` is the wire ``Subscriptions`` list as stored: the write path keeps one
    parsed matcher per distinct text instead of parsing it for every write.
    """

    subscription_id: int
    selections_json: str
    held: bool

    @property
    def selections(self) -> list[dict[str, Any]]:
        value: list[dict[str, Any]] = stored_json(self.selections_json)
        return value


def find_conflict(
    conn: Store,
    account: str,
    url: str,
    event_types: Iterable[str],
    *,
    exclude_id: int | None = None,
) -> Conflict | None:
    """The first subscription of ``account`` (other than ``exclude_id``) that already sends one
    of ``event_types`` to ``url``, or None."""
    types, listed = any_of(conn, "t.event_type", event_types)
    # SQLite's null-safe "is not" is PostgreSQL's IS DISTINCT FROM.
    distinct = "IS DISTINCT FROM" if conn.dialect == "postgresql" else "IS NOT"
    sql = (
        "SELECT t.subscription_id, s.name, t.url, t.event_type"  # noqa: S608 (no input in it)
        " FROM subscription_event_types t JOIN subscriptions s ON s.id = t.subscription_id"
        f" WHERE t.service_client_id = ? AND t.url = ? AND t.subscription_id {distinct} ?"
        f" AND {types} ORDER BY t.event_type LIMIT 1"
    )
    row = conn.execute(sql, (account, url, exclude_id, listed)).fetchone()
    return Conflict(*row) if row else None


def create_subscription(
    conn: Store, account: str, body: Mapping[str, Any], *, actor: str, now: float
) -> SubscriptionRecord:
    """Store a new subscription in ProvisioningState Creating (the handshake comes next)."""
    fields = _fields(body)
    lock_account(conn, account)  # the checks and the write, one writer at a time
    _check_conflict(conn, account, fields["url"], fields["selections"], None)
    cursor = conn.execute(
        "INSERT INTO subscriptions (service_client_id, name, description, url, state,"
        " catch_up_on_resume, provisioning_state, selections, alerts_enabled, alert_recipients,"
        " created_at, created_by, modified_at, modified_by)"
        " VALUES (:account, :name, :description, :url, :state, :catch_up, 'Creating',"
        " :selections, :alerts_enabled, :alert_recipients, :now, :actor, :now, :actor)"
        " RETURNING id",
        {**fields, "account": account, "now": now, "actor": actor},
    )
    subscription_id = int(cursor.fetchone()[0])
    _index_event_types(conn, account, subscription_id, fields["url"], fields["selections"])
    return _require(conn, account, subscription_id)


def get_subscription(conn: Store, account: str, subscription_id: int) -> SubscriptionRecord | None:
    row = conn.execute(
        "SELECT * FROM subscriptions WHERE id = ? AND service_client_id = ? AND deleted_at IS NULL",
        (subscription_id, account),
    ).fetchone()
    return _record(row) if row else None


def find_by_name(conn: Store, account: str, name: str) -> SubscriptionRecord | None:
    """The subscription of ``account`` named exactly ``name`` (case-sensitive; the lowest Id if
    an older store holds several), or None."""
    row = conn.execute(
        "SELECT * FROM subscriptions WHERE service_client_id = ? AND name = ?"
        " AND deleted_at IS NULL ORDER BY id LIMIT 1",
        (account, name),
    ).fetchone()
    return _record(row) if row else None


def id_of(conn: Store, ref: str) -> int:
    """The Id of the subscription ``ref`` names: an Id as it is, else a Name of any account
    (live before deleted, the lowest Id first); NotFoundError, with a near name, when none."""
    ref = ref.strip()
    if ref.isdigit():
        return int(ref)
    row = conn.execute(
        "SELECT id FROM subscriptions WHERE name = ? ORDER BY deleted_at IS NOT NULL, id LIMIT 1",
        (ref,),
    ).fetchone()
    if row is not None:
        return int(row[0])
    from prefctl.errors import NotFoundError, did_you_mean

    names = [r[0] for r in conn.execute("SELECT DISTINCT name FROM subscriptions")]
    raise NotFoundError(
        f"no subscription named {ref!r}{did_you_mean(ref, names)}",
        hint="'prefctl subscriptions list' shows the names and Ids",
    )


def list_subscriptions(conn: Store, account: str) -> list[SubscriptionRecord]:
    rows = conn.execute(
        "SELECT * FROM subscriptions WHERE service_client_id = ? AND deleted_at IS NULL"
        " ORDER BY id",
        (account,),
    )
    return [_record(row) for row in rows]


def replace_subscription(
    conn: Store,
    account: str,
    subscription_id: int,
    body: Mapping[str, Any],
    *,
    actor: str,
    now: float,
) -> tuple[SubscriptionRecord, bool] | None:
    """PUT: replace every field. Returns the record and whether the Url changed (then the
    handshake must run again), or None when there is no such subscription."""
    lock_account(conn, account)  # the checks and the write, one writer at a time
    current = get_subscription(conn, account, subscription_id)
    if current is None:
        return None
    fields = _fields(body)
    _check_conflict(conn, account, fields["url"], fields["selections"], subscription_id)
    url_changed = fields["url"] != current.url
    conn.execute(
        "UPDATE subscriptions SET name = :name, description = :description, url = :url,"
        " catch_up_on_resume = :catch_up, selections = :selections,"
        " alerts_enabled = :alerts_enabled, alert_recipients = :alert_recipients,"
        " modified_at = :now, modified_by = :actor WHERE id = :id",
        {**fields, "id": subscription_id, "now": now, "actor": actor},
    )
    if url_changed:
        conn.execute(
            "UPDATE subscriptions SET provisioning_state = 'Updating',"
            " validation_code = NULL, validation_token = NULL, validation_expires_at = NULL,"
            " handshake_attempts = 0, handshake_error = NULL WHERE id = ?",
            (subscription_id,),
        )
    conn.execute(
        "DELETE FROM subscription_event_types WHERE subscription_id = ?", (subscription_id,)
    )
    _index_event_types(conn, account, subscription_id, fields["url"], fields["selections"])
    record = set_state(conn, account, subscription_id, fields["state"], actor=actor, now=now)
    return record, url_changed


def set_state(
    conn: Store,
    account: str,
    subscription_id: int,
    state: State,
    *,
    actor: str,
    now: float,
) -> SubscriptionRecord:
    """Pause or resume, moving the subscription's pending deliveries accordingly."""
    current = _require(conn, account, subscription_id)
    if state == current.state:
        return current
    if state == "Paused":
        if current.catch_up_on_resume:
            deliveries.hold_queued(conn, subscription_id)
        else:
            deliveries.drop_pending(conn, subscription_id)
    elif current.catch_up_on_resume:
        deliveries.release_held(conn, subscription_id, now=now)
    else:
        deliveries.drop_pending(conn, subscription_id)
    conn.execute(
        "UPDATE subscriptions SET state = ?, modified_at = ?, modified_by = ? WHERE id = ?",
        (state, now, actor, subscription_id),
    )
    return _require(conn, account, subscription_id)


def set_alerts(
    conn: Store,
    account: str,
    subscription_id: int,
    *,
    enabled: bool,
    recipients: list[str],
    actor: str,
    now: float,
) -> SubscriptionRecord:
    """Turn failure alerts on or off (a support-team operation)."""
    _require(conn, account, subscription_id)
    conn.execute(
        "UPDATE subscriptions SET alerts_enabled = ?, alert_recipients = ?, modified_at = ?,"
        " modified_by = ? WHERE id = ?",
        (int(enabled), orjson.dumps(recipients).decode(), now, actor, subscription_id),
    )
    return _require(conn, account, subscription_id)


def delete_subscription(
    conn: Store, account: str, subscription_id: int, *, now: float | None = None
) -> bool:
    """Delete the subscription (see the module docstring); False when there was none.

    Its pending deliveries go (they would have nowhere to go), as do its event types (the Url
    is free again) and its alerting state; delivered and dead-lettered deliveries stay. The row
    becomes a paused tombstone, so nothing claims a delivery of it again.
    """
    cursor = conn.execute(
        "UPDATE subscriptions SET deleted_at = ?, state = 'Paused', catch_up_on_resume = 0,"
        " alerts_enabled = 0, validation_token = NULL"
        " WHERE id = ? AND service_client_id = ? AND deleted_at IS NULL",
        (time.time() if now is None else now, subscription_id, account),
    )
    if cursor.rowcount != 1:
        return False
    conn.execute(
        "DELETE FROM deliveries WHERE subscription_id = ?"
        " AND state NOT IN ('delivered', 'dead_lettered')",
        (subscription_id,),
    )
    for table in ("subscription_event_types", "alert_dead_letters", "alert_incidents"):
        conn.execute(f"DELETE FROM {table} WHERE subscription_id = ?", (subscription_id,))  # noqa: S608
    return True


def deleted_among(conn: Store, subscription_ids: Iterable[int]) -> set[int]:
    """The deleted subscriptions (tombstones) among ``subscription_ids``, in any account."""
    ids = list(dict.fromkeys(subscription_ids))
    if not ids:
        return set()
    among, listed = any_of(conn, "id", ids)
    rows = conn.execute(
        f"SELECT id FROM subscriptions WHERE deleted_at IS NOT NULL AND {among}",  # noqa: S608
        (listed,),
    )
    return {int(row[0]) for row in rows}


def fanout_targets(conn: Store, account: str) -> list[FanoutTarget]:
    """Subscriptions that take new events: Succeeded and Active (queued), or Succeeded, Paused
    and catching up (held). Paused without catch-up takes nothing. A subscription validating a
    new Url after it had succeeded counts as Succeeded: its events wait for the handshake."""
    rows = conn.execute(
        "SELECT id, selections, state FROM subscriptions WHERE service_client_id = ?"
        " AND (provisioning_state = 'Succeeded' OR (provisioned_at IS NOT NULL"
        " AND provisioning_state IN ('Updating', 'AwaitingManualAction')))"
        " AND (state = 'Active' OR catch_up_on_resume = 1)"
        " AND deleted_at IS NULL"
        " ORDER BY id",
        (account,),
    )
    return [FanoutTarget(row[0], row[1], row[2] == "Paused") for row in rows]


def alerting_account(conn: Store, subscription_id: int) -> str | None:
    """The subscription's account when its alerts are enabled, else None."""
    row = conn.execute(
        "SELECT service_client_id FROM subscriptions WHERE id = ? AND alerts_enabled = 1",
        (subscription_id,),
    ).fetchone()
    return None if row is None else str(row[0])


def subscriptions_version(conn: Store) -> int:
    """A number that changes whenever any subscription does (triggers of migration 0007): what
    the profile write path reads before re-reading ``fanout_targets``."""
    return int(conn.execute("SELECT version FROM subscriptions_version").fetchone()[0])


# -- handshake bookkeeping --------------------------------------------------------------------------
def start_validation(
    conn: Store,
    subscription_id: int,
    *,
    validation_code: str,
    validation_token: str,
    expires_at: float,
) -> None:
    """Begin a handshake run: the code to expect, the token of ``/validation/{token}`` and when
    that URL stops working; attempts and the last error start over."""
    conn.execute(
        "UPDATE subscriptions SET validation_code = ?, validation_token = ?,"
        " validation_expires_at = ?, handshake_attempts = 0, handshake_error = NULL WHERE id = ?",
        (validation_code, validation_token, expires_at, subscription_id),
    )


def record_handshake_attempt(conn: Store, subscription_id: int, *, error: str | None) -> int:
    """Count one handshake attempt and what went wrong (None: it worked); returns the count."""
    row = conn.execute(
        "UPDATE subscriptions SET handshake_attempts = handshake_attempts + 1,"
        " handshake_error = ? WHERE id = ? RETURNING handshake_attempts",
        (error, subscription_id),
    ).fetchone()
    return int(row[0]) if row else 0


def set_provisioning_state(
    conn: Store,
    subscription_id: int,
    state: ProvisioningState,
    *,
    now: float,
    error: str | None = None,
    keep_validation_link: bool = False,
) -> None:
    """Move provisioning on. Succeeded stamps ``provisioned_at`` (kept through a Url change, so
    that ``fanout_targets`` knows a re-validation); Succeeded and Failed end the
    validation URL (``keep_validation_link``: Failed keeps it, so that a late GET of an expired
    link can be told it expired); ``error`` (for Failed) is kept as the handshake's last error."""
    ended = state == "Succeeded" or (state == "Failed" and not keep_validation_link)
    conn.execute(
        "UPDATE subscriptions SET provisioning_state = ?,"
        " provisioned_at = CASE WHEN ? = 'Succeeded' THEN ? ELSE provisioned_at END,"
        " validation_token = CASE WHEN ? = 1 THEN NULL ELSE validation_token END,"
        " handshake_error = coalesce(?, handshake_error) WHERE id = ?",
        (state, state, now, ended, error, subscription_id),
    )


def find_by_validation_token(conn: Store, token: str) -> SubscriptionRecord | None:
    """The subscription whose handshake issued ``token`` (any account; the URL has no auth).
    The caller compares ``handshake.validation_expires_at`` with its clock."""
    row = conn.execute(
        "SELECT * FROM subscriptions WHERE validation_token = ? AND deleted_at IS NULL", (token,)
    ).fetchone()
    return _record(row) if row else None


# -- helpers ---------------------------------------------------------------------------------------
def _fields(body: Mapping[str, Any]) -> dict[str, Any]:
    alerts = body.get("Alerts") or {}
    return {
        "name": body["Name"],
        "description": body.get("Description"),
        "url": body["Url"],
        "state": body.get("State", "Active"),
        "catch_up": int(bool(body.get("CatchUpOnResume", False))),
        "selections": orjson.dumps(list(body["Subscriptions"])).decode(),
        "alerts_enabled": int(bool(alerts.get("Enabled", False))),
        "alert_recipients": orjson.dumps(list(alerts.get("Recipients") or [])).decode(),
    }


def _event_types(selections_json: str) -> list[str]:
    return [str(selection["EventType"]) for selection in stored_json(selections_json)]


def _check_conflict(
    conn: Store, account: str, url: str, selections_json: str, own_id: int | None
) -> None:
    conflict = find_conflict(conn, account, url, _event_types(selections_json), exclude_id=own_id)
    if conflict is not None:
        raise DuplicateSubscriptionError(conflict)


def _index_event_types(
    conn: Store, account: str, subscription_id: int, url: str, selections_json: str
) -> None:
    conn.executemany(
        "INSERT INTO subscription_event_types (service_client_id, url, event_type,"
        " subscription_id) VALUES (?, ?, ?, ?)",
        [(account, url, t, subscription_id) for t in dict.fromkeys(_event_types(selections_json))],
    )


def _require(conn: Store, account: str, subscription_id: int) -> SubscriptionRecord:
    record = get_subscription(conn, account, subscription_id)
    if record is None:
        raise NotFoundError(f"subscription {subscription_id} not found")
    return record


def _record(row: Row) -> SubscriptionRecord:
    return SubscriptionRecord(
        id=row["id"],
        service_client_id=row["service_client_id"],
        name=row["name"],
        description=row["description"],
        url=row["url"],
        state=row["state"],
        catch_up_on_resume=bool(row["catch_up_on_resume"]),
        provisioning_state=row["provisioning_state"],
        selections=stored_json(row["selections"]),
        alerts_enabled=bool(row["alerts_enabled"]),
        alert_recipients=stored_json(row["alert_recipients"]),
        created_at=row["created_at"],
        created_by=row["created_by"],
        modified_at=row["modified_at"],
        modified_by=row["modified_by"],
        provisioned_at=row["provisioned_at"],
        handshake=Handshake(
            validation_code=row["validation_code"],
            validation_token=row["validation_token"],
            validation_expires_at=row["validation_expires_at"],
            attempts=row["handshake_attempts"],
            last_error=row["handshake_error"],
        ),
    )
