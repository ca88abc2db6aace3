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
    Token counts grow with units, so the search brackets the target and interpolates inside the bracket
    (bisecting when the upper end was refused, or on every third probe so that a bend cannot stall it).
    """
    growth = Growth(target=target, tolerance=tolerance)
    aim = target - tolerance / 2

    def probe(units: int) -> int | None:
        tokens = measure(units)
        growth.probes.append((units, tokens))
        return tokens

    floor_tokens = probe(0)
    if floor_tokens is None:
        raise GrowthFailed("the smallest request of this shape is already refused as too long")
    low, low_tokens = 0, floor_tokens
    high: int | None = None
    high_tokens: int | None = None
    while low_tokens < target - tolerance and len(growth.probes) < max_probes:
        if high is not None and high - low <= 1:
            break
        if high is not None and (high_tokens is None or len(growth.probes) % 3 == 0):
            guess = (low + high) // 2
        elif high is not None:
            guess = low + math.floor((aim - low_tokens) * (high - low) / (high_tokens - low_tokens))
        elif low > 0 and low_tokens > floor_tokens:
            guess = low + math.floor((aim - low_tokens) * low / (low_tokens - floor_tokens))
        else:
            guess = max(first_guess, 4 * low)  # no slope yet: widen
        guess = max(guess, low + 1)
        if high is not None:
            guess = min(guess, high - 1)
        tokens = probe(guess)
        if tokens is None or tokens > target:
            high, high_tokens = guess, tokens
        else:
            low, low_tokens = guess, tokens
    growth.units, growth.tokens = low, low_tokens
    growth.reached = target - tolerance <= low_tokens <= target
    return growth
