"""Property-based fuzzing of the live edge from the OpenAPI document it
serves (schemathesis): every operation, with requests generated from the
document, answers no 5xx and every answer matches the document (status
code, content type, headers and body schema).

Each operation is fuzzed twice: with every parameter generated (mostly ids
that do not exist), and with the path parameters of real things (an event
with an open waiting room, the fan's hold and payment), so that the
requests get past the 404s. The fan is signed in (session cookie) and
admitted (access-token cookie), so that they get past the 401s too.
Deterministic: Hypothesis derandomized, no example database.

schemathesis calls with ``requests`` (blocking), so the fuzzing runs in a
worker thread while the edge serves in the test's event loop.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import hypothesis
import hypothesis.errors
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis import Case, GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Ok

from tests.edge.fans import admit, hold, signed_in
from tests.edge.harness import edge_stack
from tests.support import Stores

# Examples per operation, run and mode (each operation runs with generated
# and with real ids): the whole fuzzing stays under a minute on two cores.
EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 6}

# Defects of the document reported to its owner (scripts/gen_openapi.py):
# the checks left out for an operation until the document is fixed.
# test_reported_document_defects_are_still_there fails once one is fixed, so
# that its entry goes.
# Operations whose documented answers the fuzzing cannot check in full
# (none today; an entry names the checks left out and why).
DOCUMENT_DEFECTS: dict[str, list[Any]] = {}

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@dataclass(frozen=True)
class Target:
    url: str
    cookies: Mapping[str, str]
    # Path parameters of real things, by name.
    known: Mapping[str, str]


@pytest.fixture(scope="module")
async def target(stores: Stores) -> AsyncIterator[Target]:
    async with edge_stack(stores, prefix="edge-fuzz") as stack:
        event_id = await stack.event(seats=40, max_active=10)
        async with signed_in(stack, f"fuzz-{uuid.uuid4().hex[:8]}") as fan:
            await admit(fan, event_id)
            made = await hold(fan, event_id)
            paid = await hold(fan, event_id)
            started = await fan.post(f"/v1/holds/{paid['holdId']}/payment", json={"paymentMethod": "pm_card_ok"})
            assert started.status_code == 200, started.text
            cookies = {name: fan.cookies[name] for name in ("bo_session", "bo_access")}
        yield Target(
            stack.url,
            cookies,
            {
                "event_id": str(event_id),
                "hold_id": made["holdId"],
                "payment_id": started.json()["payment"]["paymentId"],
            },
        )


@pytest.fixture(scope="module")
async def schema(stack_document: dict[str, Any]) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_dict(stack_document)


@pytest.fixture(scope="module")
async def stack_document(target: Target) -> dict[str, Any]:
    """The document as the live edge serves it."""

    def fetch() -> dict[str, Any]:
        reply = requests.get(f"{target.url}/openapi.json", timeout=10)
        reply.raise_for_status()
        document: dict[str, Any] = reply.json()
        return document

    return await asyncio.to_thread(fetch)


def _fuzz(
    operation: schemathesis.APIOperation[Any, Any, Any, Any], target: Target, mode: GenerationMode, known: bool
) -> Callable[[], None]:
    params = {
        parameter.name: target.known[parameter.name]
        for parameter in operation.path_parameters
        if known and parameter.name in target.known
    }
    strategy = operation.as_strategy(generation_mode=mode, path_parameters=params or None)
    left_out = DOCUMENT_DEFECTS.get(operation.label, [])
    checks = [check for check in CHECKS if check not in left_out]

    @hypothesis.settings(
        max_examples=EXAMPLES[mode],
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @hypothesis.given(case=strategy)
    def run(case: Case[Any]) -> None:
        with requests.Session() as session:
            response = case.call(base_url=target.url, session=session, cookies=dict(target.cookies), timeout=15)
        case.validate_response(response, checks=checks)

    return run


# schemathesis's strategies draw from the random module, which Hypothesis
# seeds for every example (so the runs stay deterministic) and warns about.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning")
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
async def test_every_operation_answers_as_its_document_says(
    schema: schemathesis.BaseSchema, target: Target, mode: GenerationMode
) -> None:
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    assert len(operations) >= 20
    failures: list[str] = []

    def fuzz_all() -> None:
        for operation in operations:
            for known in (False, True):
                if known and not any(p.name in target.known for p in operation.path_parameters):
                    continue
                try:
                    _fuzz(operation, target, mode, known)()
                except hypothesis.errors.Unsatisfiable:
                    # Nothing of the operation can be made invalid (no parameters, no body).
                    assert mode is GenerationMode.NEGATIVE, operation.label
                except (AssertionError, BaseExceptionGroup) as err:
                    # Every operation is reported, not only the first.
                    where = "known ids" if known else "generated ids"
                    failures.append(f"{operation.label} ({where}): {str(err)[:3000]}")

    await asyncio.to_thread(fuzz_all)
    assert not failures, "\n\n".join(failures)
