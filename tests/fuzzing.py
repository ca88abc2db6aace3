"""Schemathesis against the served OpenAPI document: generated requests, every response checked against it.

Shared by the in-process run (tests/unit/test_openapi_fuzz.py: the shim with a fake model, the bulk of the cases)
and the run against the real CPU stack (tests/integration/test_reliability.py). Every response must have a
documented status, content type, headers (X-Request-Id on all of them) and body: every error in the envelope. No
response may be a 5xx: the fake model never fails, and what the real model is sent here is either refused by the
shim's validation or scoreable. Schema-invalid data must be refused (4xx), and a request without the token is 401.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


@dataclass
class Tally:
    """What a run sent and got back: cases per operation and mode, statuses seen."""

    cases: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.cases.values())


def fuzz(schema: Any, path: str, method: str, mode: GenerationMode, examples: int, tally: Tally,
         headers: dict[str, str] | None = None, **call: Any) -> None:
    """Send `examples` generated cases of one operation in one mode; any failed check fails the test."""
    operation = schema[path][method]
    checks = CHECKS + ([negative_data_rejection] if mode == GenerationMode.NEGATIVE else [])

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        response = case.call_and_validate(headers=headers, checks=checks, **call)
        tally.cases[(method, path, mode.value, headers is not None)] += 1
        tally.statuses[response.status_code] += 1
        if response.status_code >= 400:  # the schemas say so too; this holds even if one were loosened
            assert set(json.loads(response.content)["error"]) == {"code", "message"}

    run()
