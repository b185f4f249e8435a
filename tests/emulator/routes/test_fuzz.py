"""Schemathesis against the running emulator's ``/openapi.json`` (issue 4, Bad input): generated
valid and invalid requests on every account operation, authenticated with a real token, never get
a 5xx, and every answer conforms to the documented statuses, media types and schemas.

Bounded: ``MAX_EXAMPLES`` per operation and mode. Subscription create and replace are left out:
each would start a validation handshake to whatever Url was generated (hosts on the internet).
(Schemathesis' own pytest integration, ``from_fixture``, does not run under pytest 9, so each
operation's strategy is driven by ``hypothesis.given`` here, as its docs describe for
non-Schemathesis tests.)
"""

from __future__ import annotations

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import BaseSchema, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from prefctl.emulator.serve import RunningEmulator
from tests.emulator.routes._api import issue_token

MAX_EXAMPLES = 8
# What is asserted. Not positive_data_acceptance: a schema-valid profile can still be invalid
# (unique emails, consent Elements naming the profile's contacts, whitespace-only names), and
# the emulator rightly answers 400 to those.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


def _schema(emulator: RunningEmulator) -> BaseSchema:
    loaded = schemathesis.openapi.from_url(f"{emulator.url}/openapi.json")
    return loaded.include(path_regex=r"^/api/v1/\{service_client_id\}/").exclude(
        path_regex=r"/subscriptions", method=["POST", "PUT"]
    )


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_fuzz_every_account_operation_answers_within_its_contract(
    emulator: RunningEmulator, mode: GenerationMode
) -> None:
    headers = {"Authorization": f"Bearer {issue_token(emulator)}"}
    path_parameters = {"service_client_id": emulator.account.service_client_id}
    fuzzed = []
    with requests.Session() as session:
        for result in _schema(emulator).get_all_operations():
            operation = result.ok()
            strategy = operation.as_strategy(mode, path_parameters=path_parameters, headers=headers)

            @given(case=strategy)
            @settings(
                max_examples=MAX_EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def call(case: Case) -> None:
                case.call_and_validate(session=session, checks=CHECKS)

            try:
                call()
            except Unsatisfiable:
                # Nothing of this operation can be made invalid (no parameters, no body).
                assert mode is GenerationMode.NEGATIVE
                continue
            except Exception as exc:
                exc.add_note(f"operation: {operation.label} ({mode.value})")
                raise
            fuzzed.append(operation.label)
    assert len(fuzzed) >= (16 if mode is GenerationMode.POSITIVE else 10)
