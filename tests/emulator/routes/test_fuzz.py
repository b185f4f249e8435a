"""Schemathesis against the running emulator's ``/openapi.json`` (issue 4, Bad input): generated
valid and invalid requests on every account operation, authenticated with a real token, never get
a 5xx, and every answer conforms to the documented statuses, media types and schemas.

Bounded: ``MAX_EXAMPLES`` per operation and mode. Subscription create and replace are left out:
each would start a validation handshake to whatever Url was generated (hosts on the internet).

A longer run (``test_fuzz_long_run_…``) sends more cases, on a profile and an import that exist
(a body is only read once its resource is found: a PATCH of a missing profile is a 404 whatever
its document), asserting only that none is answered 5xx; ``LONG_RUN_SECONDS`` bounds its time.
(Schemathesis' own pytest integration, ``from_fixture``, does not run under pytest 9, so each
operation's strategy is driven by ``hypothesis.given`` here, as its docs describe for
non-Schemathesis tests.)
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy
from schemathesis import BaseSchema, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.schemas import APIOperation
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from prefctl.emulator.serve import RunningEmulator
from tests.emulator.routes._api import Api, issue_token

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


def _settings(max_examples: int, *, derandomize: bool = False) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=derandomize,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


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
            @_settings(MAX_EXAMPLES, derandomize=True)
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


# The long run: rounds of ``LONG_RUN_ROUND`` cases (each round a seed of its own: 0, 1, …, so the
# run is the same every time), up to ``BODY_EXAMPLES`` per operation with a request body and mode
# (where the bugs were) and ``OTHER_EXAMPLES`` per other one, within ``LONG_RUN_SECONDS`` in all.
LONG_RUN_ROUND = 15
BODY_EXAMPLES = 150
OTHER_EXAMPLES = 30
LONG_RUN_SECONDS = 75.0


@pytest.mark.slow
@pytest.mark.sqlite_only(
    "CI time: the long run checks the HTTP contract (~40 s a backend); the short fuzz above and"
    " the route tests cover the store on PostgreSQL"
)
def test_fuzz_long_run_on_existing_resources_never_answers_5xx(api: Api) -> None:
    """Issue 18: ``"op": ["add"]`` in a JSON Patch was a 500 that only some thousands of cases
    found. Each round gets a new profile: a case may replace, patch or deactivate the one it is
    given (deleting it is left out, as the short run has it)."""
    emulator = api.emulator
    fixed = {"Authorization": api.client.headers["Authorization"]}
    operations = [
        operation
        for operation in (_ok(result) for result in _schema(emulator).get_all_operations())
        if not (operation.method.upper() == "DELETE" and "{profile_id}" in operation.path)
    ]
    # Those without a body first: the time they leave unused goes to those with one.
    slots = sorted(
        (
            (BODY_EXAMPLES if len(operation.body) else OTHER_EXAMPLES, operation, mode)
            for operation in operations
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        ),
        key=lambda slot: slot[0],
    )
    import_id = api.post("/imports").json()["ImportId"]
    started = time.monotonic()
    weight_left = sum(examples for examples, _, _ in slots)
    sent: dict[str, int] = {}
    with requests.Session() as session:
        for examples, operation, mode in slots:
            # One round at least, then more within this slot's share of the time left.
            now = time.monotonic()
            deadline = now + max(0.0, started + LONG_RUN_SECONDS - now) * examples / weight_left
            weight_left -= examples
            for round_seed in range(examples // LONG_RUN_ROUND):
                if round_seed and time.monotonic() > deadline:
                    break
                path_parameters = {
                    "service_client_id": emulator.account.service_client_id,
                    "profile_id": api.create_profile({"Tags": ["fuzz"]})["ProfileId"],
                    "import_id": import_id,
                }
                strategy = operation.as_strategy(
                    mode, path_parameters=path_parameters, headers=fixed
                )
                try:
                    _round(strategy, round_seed, session, sent, operation.label)()
                except Unsatisfiable:
                    assert mode is GenerationMode.NEGATIVE
                    break
                except Exception as exc:
                    exc.add_note(f"operation: {operation.label} ({mode.value}, seed {round_seed})")
                    raise
    assert len(sent) >= 16
    assert sum(sent.values()) >= 500


def _ok(result: object) -> APIOperation:
    assert isinstance(result, Ok), result
    operation: APIOperation = result.ok()
    return operation


def _round(
    strategy: SearchStrategy[Case],
    round_seed: int,
    session: requests.Session,
    sent: dict[str, int],
    label: str,
) -> Callable[[], None]:
    @seed(round_seed)
    @given(case=strategy)
    @_settings(LONG_RUN_ROUND)
    def call(case: Case) -> None:
        sent[label] = sent.get(label, 0) + 1
        case.call_and_validate(session=session, checks=[not_a_server_error])

    return call
