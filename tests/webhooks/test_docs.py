"""docs/webhooks.md cannot drift: its catalog table and JSON examples are checked against the code."""

from __future__ import annotations

import json
import re

import pytest

from prefctl.models.event import EventNotification, ValidationHandshake, ValidationReply
from prefctl.receiver.conformance import CASE_NAMES
from prefctl.webhooks import catalog
from prefctl.webhooks.handshake import classify_reply, validation_fields
from tests.webhooks import _doc

DOC = _doc.text()


def _example(name: str) -> dict[str, object]:
    match = re.search(rf"<!-- example:{name} -->\s*```json\n(.*?)```", DOC, re.S)
    assert match is not None, f"docs/webhooks.md has no {name} example"
    parsed: dict[str, object] = json.loads(match.group(1))
    return parsed


def test_docs_catalog_table_is_the_catalog() -> None:
    assert _doc.section(DOC, "catalog").strip() == _doc.catalog_table().strip(), (
        "docs/webhooks.md: replace the catalog table with `python -m tests.webhooks._doc`"
    )


def test_docs_catalog_table_lists_every_type_once() -> None:
    names = re.findall(r"^\| `([a-z.]+)` \|", _doc.section(DOC, "catalog"), re.M)
    assert names == [t.name for t in catalog.ALL_TYPES]


def test_docs_event_example_is_a_valid_notification_and_wire_form() -> None:
    example = _example("event")
    assert EventNotification.model_validate(example).wire() == example


def test_docs_handshake_and_reply_examples_validate_each_other() -> None:
    handshake = _example("handshake")
    reply = _example("reply")
    ValidationHandshake.model_validate(handshake)
    ValidationReply.model_validate(reply)
    code, _url = validation_fields(handshake)
    assert code is not None
    assert classify_reply(200, json.dumps(reply), code).outcome == "validated"


@pytest.mark.parametrize("name", CASE_NAMES)
def test_docs_describe_the_conformance_cases(name: str) -> None:
    assert f"`{name}`" in DOC
