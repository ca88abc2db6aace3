"""Request bodies at the shapes the checks measure, and the search that grows a state to a token count.

The kit has no tokenizer: a state is grown by asking the service and reading back the input_tokens it reports.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

SHORT_STATE = "The parcel arrived broken and the customer wants a refund."
FILLER_HEAD = "Case log."
FILLER_SENTENCE = "Entry {n}: the order was checked, the parcel was weighed and a note was filed for review."

# Our production shapes and the upstream anchor (one state, three questions, 289 prompt tokens).
LONG_STATE_TOKENS = 3900
ANCHOR_TOKENS = 289


def binary_criteria(count: int, prefix: str = "c") -> list[dict]:
    return [{"id": f"{prefix}{n}", "question": f"Does criterion {n} hold for this state?",
             "options": [{"id": "yes", "description": "It holds."}, {"id": "no", "description": "It does not."}]}
            for n in range(count)]


def filler_state(units: int) -> str:
    """A state text that grows by one sentence per unit; never empty."""
    return " ".join([FILLER_HEAD, *(FILLER_SENTENCE.format(n=n) for n in range(units))])


def shared_body(state: object, decisions: list[dict]) -> dict:
    return {"state": state, "decisions": decisions}


def plain_body(request_id: str = "single", state: object = SHORT_STATE) -> dict:
    return {"id": request_id, "state": state, "question": "Should the refund be approved?",
            "options": [{"id": "approve", "description": "Approve the refund."},
                        {"id": "decline", "description": "Decline the refund."}]}


def path_for(body: dict) -> str:
    """A body with decisions goes to /decide/shared, any other to /decide."""
    return "/decide/shared" if "decisions" in body else "/decide"


class GrowthFailed(RuntimeError):
    pass


@dataclass
class Growth:
    target: int
    tolerance: int
    units: int = 0
    tokens: int = 0
    reached: bool = False
    probes: list[tuple[int, int | None]] = field(default_factory=list)

    def as_numbers(self) -> dict:
        return {"target_tokens": self.target, "tolerance": self.tolerance, "tokens": self.tokens,
                "filler_units": self.units, "reached": self.reached, "probes": len(self.probes)}


def grow(measure: Callable[[int], int | None], target: int, tolerance: int, max_probes: int = 16,
         first_guess: int = 8) -> Growth:
    """The most filler units whose request stays at or under target tokens, aiming at [target - tolerance, target].

    measure(units) returns the request's input tokens, or None when the service refused it as too long.
    Token counts grow with units, so the search brackets the target and interpolates inside the bracket.
    """
    growth = Growth(target=target, tolerance=tolerance)

    def probe(units: int) -> int | None:
        tokens = measure(units)
        growth.probes.append((units, tokens))
        return tokens

    floor_tokens = probe(0)
    if floor_tokens is None:
        raise GrowthFailed("the smallest request of this shape is already refused as too long")
    low, low_tokens = 0, floor_tokens
    high: int | None = None
    guess = first_guess
    while low_tokens < target - tolerance and len(growth.probes) < max_probes:
        if high is not None and high - low <= 1:
            break
        if low > 0 and low_tokens > floor_tokens:
            per_unit = (low_tokens - floor_tokens) / low
            guess = low + math.floor((target - tolerance / 2 - low_tokens) / per_unit)
        elif high is None and len(growth.probes) > 1:
            guess = max(guess * 4, low + 1)  # no slope yet: widen
        if high is not None:
            guess = min(max(guess, low + 1), high - 1)
            if guess <= low:
                break
        guess = max(guess, low + 1)
        tokens = probe(guess)
        if tokens is None or tokens > target:
            high = guess
            guess = (low + guess) // 2
        else:
            low, low_tokens = guess, tokens
    growth.units, growth.tokens = low, low_tokens
    growth.reached = target - tolerance <= low_tokens <= target
    return growth
