"""Check 7, chunking: 21 questions in one request equal the same questions asked chunk by chunk."""
from __future__ import annotations

from ..compare import chunk_differences
from ..report import FAIL, PASS
from ..shapes import SHORT_STATE, binary_criteria, shared_body
from .common import CheckFailed, Context

QUESTIONS = 21
EXPECTED_CALLS = [16, 5]


def run(ctx: Context) -> tuple[str, str | None, dict]:
    decisions = binary_criteria(QUESTIONS)
    whole = ctx.service.post("/decide/shared", shared_body(SHORT_STATE, decisions))
    if whole.status != 200:
        raise CheckFailed(f"the {QUESTIONS}-question request answered {whole.describe()}")
    timing = whole.body["timing"]
    results = whole.body["results"]
    numbers: dict = {"questions": QUESTIONS, "calls": timing.get("calls"),
                     "questions_per_call": timing.get("questions_per_call"), "expected_per_call": EXPECTED_CALLS}
    reasons = []
    if timing.get("calls") != len(EXPECTED_CALLS) or timing.get("questions_per_call") != EXPECTED_CALLS:
        reasons.append(f"chunked as {timing.get('questions_per_call')}, expected {EXPECTED_CALLS}")
    if [result.get("id") for result in results] != [decision["id"] for decision in decisions]:
        reasons.append("results are not in request order")

    mismatches: dict[str, list[str]] = {}
    start = 0
    for size in EXPECTED_CALLS:
        part = decisions[start:start + size]
        alone = ctx.service.post("/decide/shared", shared_body(SHORT_STATE, part))
        if alone.status != 200:
            raise CheckFailed(f"questions {start + 1}-{start + size} alone answered {alone.describe()}", numbers)
        for chunked, asked_alone in zip(results[start:start + size], alone.body["results"]):
            differing = chunk_differences(chunked, asked_alone)
            if differing:
                mismatches[chunked.get("id", "?")] = differing
        start += size
    numbers["compared"] = QUESTIONS
    numbers["mismatches"] = mismatches
    if mismatches:
        reasons.append(f"{len(mismatches)} answer(s) differ from the same question asked in its own chunk")
    return (FAIL, "; ".join(reasons), numbers) if reasons else (PASS, None, numbers)
