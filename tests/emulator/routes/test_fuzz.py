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

import importlib

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import BaseSchema, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
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


# What the warm-up below does not reach; found by diffing sys.modules after a run.
LOADED_WHILE_TESTING = (
    "hypothesis.strategies._internal.flatmapped",
    "hypothesis.strategies._internal.random",
    "hypothesis.strategies._internal.regex",
    "schemathesis.generation.body_overrides",
    "schemathesis.generation.dictionaries",
    "schemathesis.transport.asgi",
    "schemathesis.transport.requests",
    "schemathesis.transport.wsgi",
    "schemathesis.wfc.escalation",
)


def _import_schemathesis_now() -> None:
    """Load, at collection, the modules Schemathesis imports lazily while it loads and generates.

    Schemathesis is a pytest plugin, so pytest rewrites its modules on import with ``ast.parse``;
    CPython 3.11.7 keeps the AST recursion counter per interpreter, and a parse in another thread
    (servers of other tests run in threads) then fails with "AST constructor recursion depth
    mismatch" (python/cpython#106905). Importing here, before any test starts a thread, avoids it.
    """
    spec = {
        "openapi": "3.0.3",
        "info": {"title": "warm-up", "version": "1"},
        "paths": {
            "/items/{id}": {
                "patch": {
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }
    for result in schemathesis.openapi.from_dict(spec).get_all_operations():
        for mode in GenerationMode.POSITIVE, GenerationMode.NEGATIVE:
            assert isinstance(result, Ok), result.err()
            operation = result.ok()
            operation.as_strategy(mode)
    for name in LOADED_WHILE_TESTING:
        importlib.import_module(name)


_import_schemathesis_now()


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
            assert isinstance(result, Ok), result.err()
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
