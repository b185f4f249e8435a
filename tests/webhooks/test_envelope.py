"""The event envelope (docs/webhooks.md): the fast builder and the pydantic model agree."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from pydantic import ValidationError

from prefctl.models.event import EventNotification
from prefctl.webhooks import catalog
from prefctl.webhooks.envelope import build_event, encode, encode_event, new_event_id, wire_time

NOW = datetime(2026, 11, 21, 19, 20, 30, 123456, tzinfo=UTC)
ENVELOPE_KEYS = [
    "EventId",
    "EventType",
    "Entity",
    "SubscriptionId",
    "ClientId",
    "ProfileId",
    "EventTime",
    "OriginalEventTime",
    "Data",
]


def _event(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "event_id": "6513270e-269e-4d37-b2a7-4de452e6b438",
        "event_type": "contacts.email.added",
        "subscription_id": 12,
        "client_id": "DEMO_CORP",
        "profile_id": 1001,
        "event_time": NOW,
        "original_event_time": NOW - timedelta(milliseconds=125),
        "data": {"Address": "ann@example.com"},
    }
    fields.update(overrides)
    return build_event(**fields)  # type: ignore[arg-type]


def test_build_event_has_the_design_keys_in_order_and_the_catalog_entity() -> None:
    message = _event()
    assert list(message) == ENVELOPE_KEYS
    assert message["Entity"] == "Contacts"


def test_build_event_times_are_utc_with_milliseconds() -> None:
    paris = timezone(timedelta(hours=1))
    message = _event(event_time=NOW.astimezone(paris))
    assert message["EventTime"] == "2026-11-21T19:20:30.123Z"
    assert message["OriginalEventTime"] == "2026-11-21T19:20:29.998Z"


def test_build_event_takes_a_preformatted_time_verbatim() -> None:
    assert _event(event_time="2026-01-01T00:00:00.000Z")["EventTime"] == "2026-01-01T00:00:00.000Z"
    assert wire_time("anything") == "anything"


def test_build_event_without_previous_data_leaves_the_key_out() -> None:
    assert "PreviousData" not in _event()
    message = _event(
        event_type="contacts.email.updated", previous_data={"Address": "old@example.com"}
    )
    assert list(message)[-1] == "PreviousData"
    assert message["PreviousData"] == {"Address": "old@example.com"}


def test_build_event_unknown_type_needs_an_explicit_entity() -> None:
    with pytest.raises(ValueError, match="entity"):
        _event(event_type="contacts.fax.added")
    assert _event(event_type="contacts.fax.added", entity="Contacts")["Entity"] == "Contacts"


def test_encode_is_compact_utf8_json() -> None:
    body = encode(_event(data={"FirstName": "Zoë"}))
    assert body.startswith(b'{"EventId":"6513270e')
    assert "Zoë".encode() in body
    assert json.loads(body)["Data"] == {"FirstName": "Zoë"}


def test_encode_event_equals_encode_of_build_event() -> None:
    fields = {
        "event_id": "e",
        "event_type": "tag.added",
        "subscription_id": 1,
        "client_id": "C",
        "profile_id": 2,
        "event_time": NOW,
        "original_event_time": NOW,
        "data": {"Tag": "vip"},
    }
    assert encode_event(**fields) == encode(build_event(**fields))  # type: ignore[arg-type]


def test_new_event_id_is_a_uuid4_repeatable_with_a_seed() -> None:
    first = new_event_id(random.Random(5))
    assert first == new_event_id(random.Random(5))
    assert uuid.UUID(first).version == 4
    rng = random.Random(5)
    assert new_event_id(rng) != new_event_id(rng)


def test_new_event_id_is_what_the_uuid_module_makes_of_the_same_bits() -> None:
    # Seeded runs (simulations, tests) keep their EventIds across the faster formatting.
    ours, theirs = random.Random(7), random.Random(7)
    for _ in range(2000):
        assert new_event_id(ours) == str(uuid.UUID(int=theirs.getrandbits(128), version=4))


@pytest.mark.parametrize("event_type", catalog.ALL_TYPES, ids=lambda t: t.name)
def test_model_round_trips_every_catalog_type_to_the_same_wire_dict(
    event_type: catalog.EventType,
) -> None:
    previous = {"Value": None} if event_type.has_previous_data else None
    message = _event(event_type=event_type.name, previous_data=previous, data={"A": [1, None]})
    model = EventNotification.model_validate(message)
    assert model.entity == event_type.entity
    assert model.wire() == message
    assert orjson.loads(encode(model.wire())) == message


def test_model_rejects_an_entity_that_is_not_the_types() -> None:
    message = {**_event(), "Entity": "Preferences"}
    with pytest.raises(ValidationError, match="belongs to entity 'Contacts'"):
        EventNotification.model_validate(message)


def test_model_accepts_unknown_types_and_ignores_unknown_fields() -> None:
    message = {**_event(event_type="contacts.fax.added", entity="Contacts"), "Priority": 3}
    model = EventNotification.model_validate(message)
    assert model.event_type == "contacts.fax.added"
    assert "Priority" not in model.wire()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("EventId", "not-a-uuid"),
        ("EventTime", "2026-11-21T19:20:30"),  # no zone
        ("ProfileId", None),
        ("Data", "text"),
        ("EventType", ""),
    ],
)
def test_model_rejects_bad_fields(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        EventNotification.model_validate({**_event(), field: value})


def test_model_normalises_times_to_utc_milliseconds() -> None:
    message = {**_event(), "EventTime": "2026-11-21T21:20:30.123456+02:00"}
    assert EventNotification.model_validate(message).wire()["EventTime"] == (
        "2026-11-21T19:20:30.123Z"
    )
