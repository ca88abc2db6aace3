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
LONG_STATE_TOKENS = 3900  # the state's own tokens, the contract's "~3,900-token state"
ANCHOR_TOKENS = 289
# The anchor itself, written once: the model card's request, one state and three questions of the three types (289
# prompt tokens with the real tokenizer), as System One asks it, and as /decide/shared asks it (choice questions,
# the caller's question as instructions). The benchmarks (bench/) and the GPU check time it.
ANCHOR_STATE = "The customer was charged twice and asks for the extra payment back."
ANCHOR_QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this request?",
             "criteria": {"billing": "Payments and refunds", "delivery": "Shipping and delivery"}},
    "urgency": {"type": "score", "instructions": "Rate the priority.", "criteria": ["Low", "Medium", "High"]},
    "refund_requested": {"type": "noul", "instructions": "Is the customer asking for a refund?"},
}
ANCHOR_DECISIONS = [
    {"id": "team", "question": "Which team should handle this request?",
     "options": [{"id": "billing", "description": "Payments and refunds"},
                 {"id": "delivery", "description": "Shipping and delivery"}]},
    {"id": "urgency", "question": "Rate the priority.",
     "options": [{"id": "low", "description": "Low"}, {"id": "medium", "description": "Medium"},
                 {"id": "high", "description": "High"}]},
    {"id": "refund_requested", "question": "Is the customer asking for a refund?",
     "options": [{"id": "yes", "description": "The customer asks for a refund."},
                 {"id": "no", "description": "The customer does not ask for a refund."}]},
]
# The 21 binary criteria run over a state as long as the bench's shape777 states (about 8,000 characters).
REALISTIC_STATE_CHARS = 8000
_CASE_LINES = (
    "{day}: the customer wrote that order {order} arrived {days} days late and the box was {state}.",
    "{day}: support checked the carrier's scan history for order {order}; the last scan was at depot {depot}.",
    "{day}: a refund of {amount} EUR was requested for order {order}; the payment was made by {method}.",
    "{day}: the warehouse confirmed that {items} items of order {order} were packed and weighed at {weight} kg.",
    "{day}: the customer asked whether a replacement can be sent before {deadline}, citing an event.",
    "{day}: a note was added that the account has {orders} earlier orders and {claims} earlier claims.",
)


def binary_criteria(count: int, prefix: str = "c") -> list[dict]:
    return [{"id": f"{prefix}{n}", "question": f"Does criterion {n} hold for this state?",
             "options": [{"id": "yes", "description": "It holds."}, {"id": "no", "description": "It does not."}]}
            for n in range(count)]


def filler_state(units: int) -> str:
    """A state text that grows by one sentence per unit; never empty."""
    return " ".join([FILLER_HEAD, *(FILLER_SENTENCE.format(n=n) for n in range(units))])


def realistic_state(chars: int = REALISTIC_STATE_CHARS) -> str:
    """A support case log of about `chars` characters whose lines vary in wording, numbers and names."""
    lines = ["Case 48213, opened by the customer through the web form; history follows in order."]
    n = 0
    while sum(len(line) + 1 for line in lines) < chars:
        lines.append(_CASE_LINES[n % len(_CASE_LINES)].format(
            day=f"Day {n // 3 + 1}", order=f"A-{70211 + n * 7}", days=n % 9 + 1,
            state=("dented", "wet", "intact", "open")[n % 4], depot=("Lyon", "Ghent", "Porto", "Brno")[n % 4],
            amount=f"{19.5 + n * 3.25:.2f}", method=("card", "transfer", "voucher")[n % 3], items=n % 5 + 1,
            weight=f"{1.2 + n * 0.35:.2f}", deadline=f"the {n % 27 + 1}th", orders=n + 3, claims=n % 4))
        n += 1
    return "\n".join(lines)


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
    floor_tokens: int | None = None  # set when tokens count the state's own: the call's tokens over the least state

    def as_numbers(self) -> dict:
        numbers = {"target_tokens": self.target, "tolerance": self.tolerance, "tokens": self.tokens,
                   "filler_units": self.units, "reached": self.reached, "probes": len(self.probes)}
        if self.floor_tokens is not None:
            numbers = {"counts": "the state's own tokens (the call's input tokens less those over the "
                                 "smallest state)", **numbers, "call_tokens_over_smallest_state": self.floor_tokens}
        return numbers


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
