"""The request shapes the check measures, as /decide/shared bodies and as the predict() calls they become.

* anchor: the published latency anchor, 3 questions over a state making a 289-token prompt (the model card's own
  example, asked as the service asks it: choice questions);
* criteria21: 21 binary criteria over the anchor's state: two calls, 16 + 5 questions;
* long16: 16 binary criteria over a state making a ~3,900-token prompt;
* probe: 16 binary criteria over a state making a ~7,900-token prompt (just under the default MAX_TOKENS of
  8192): the largest call the service takes, scored once in-process to size the VRAM cap. Not timed.

The token counts are the checkpoint tokenizer's: the state is filled with words until the first call's prompt
reaches the target (fit_filler). The mapping is the contract's: one call per 16 questions in request order, choice
questions with the caller's question as instructions and {option id: description} as criteria, fields q (one
question) or q1..qN.
"""
from __future__ import annotations

from acceptance.shapes import ANCHOR_DECISIONS, ANCHOR_STATE
from fixture_checkpoint.prompt_corpus import filler_text

MAX_QUESTIONS_PER_CALL = 16
BASE_STATE = ANCHOR_STATE


def binary_criteria(count: int) -> list:
    return [{"id": f"c{n}", "question": f"Does criterion {n} hold for this state?",
             "options": [{"id": "yes", "description": "It holds."}, {"id": "no", "description": "It does not."}]}
            for n in range(1, count + 1)]


# name -> (title, decisions, target tokens of the first call or None to reuse the anchor's state, timed)
SHAPES = {
    "anchor": ("anchor: 3 questions, 289-token prompt", ANCHOR_DECISIONS, 289, True),
    "criteria21": ("21 binary criteria over the anchor's state (16 + 5)", binary_criteria(21), None, True),
    "long16": ("16 binary criteria over a ~3,900-token state", binary_criteria(16), 3900, True),
    "probe": ("largest call: 16 criteria, ~7,900 tokens (memory only)", binary_criteria(16), 7900, False),
}


def state_text(filler_words: int) -> str:
    return BASE_STATE if filler_words == 0 else BASE_STATE + " " + filler_text(filler_words)


def body(decisions: list, filler_words: int) -> dict:
    """The /decide/shared request body."""
    return {"state": state_text(filler_words), "decisions": decisions}


def predict_calls(request_body: dict) -> list:
    """The predict() requests a /decide/shared body becomes under the contract's mapping (no orderings)."""
    decisions = request_body["decisions"]
    calls = []
    for start in range(0, len(decisions), MAX_QUESTIONS_PER_CALL):
        chunk = decisions[start:start + MAX_QUESTIONS_PER_CALL]
        fields = ["q"] if len(chunk) == 1 else [f"q{number}" for number in range(1, len(chunk) + 1)]
        calls.append({
            "state": request_body["state"],
            "questions": {
                field: {"type": "choice", "instructions": decision["question"],
                        "criteria": {option["id"]: option["description"] for option in decision["options"]}}
                for field, decision in zip(fields, chunk)
            },
        })
    return calls


def fit_filler(count, decisions: list, target: int, max_words: int = 40000) -> tuple:
    """The filler word count whose first call comes closest to ``target`` tokens: (words, tokens).

    ``count(predict_request) -> tokens``. Tokens grow with the words; when even no filler exceeds the target, the
    answer is (0, that count).
    """
    def tokens(words: int) -> int:
        return count(predict_calls(body(decisions, words))[0])

    low_tokens = tokens(0)
    if low_tokens >= target:
        return 0, low_tokens
    high = 64
    while tokens(high) < target:
        if high >= max_words:
            return high, tokens(high)
        high = min(high * 2, max_words)
    low = 0  # invariant: tokens(low) < target <= tokens(high)
    while high - low > 1:
        middle = (low + high) // 2
        if tokens(middle) < target:
            low = middle
        else:
            high = middle
    below, above = tokens(low), tokens(high)
    return (low, below) if target - below <= above - target else (high, above)


def reached(target: int | None, tokens: int) -> bool:
    """Within 1% (at least 3 tokens) of the target."""
    return target is None or abs(tokens - target) <= max(3, target // 100)
