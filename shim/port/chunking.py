"""How many questions one predict() call carries, and the greedy packing both surfaces use to stay within it."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

MAX_QUESTIONS_PER_CALL = 16  # the model's own limit (its validate_request)
CHUNKING = ("greedy in request order: questions 1-16 form the first call, 17-32 the next, and so on; with "
            "orderings, ordering k of every decision that has more than k orderings forms wave k, each wave is "
            "packed the same way and the waves run one after another; a call with one question uses field q, "
            "a call with several uses q1..qN")


def chunks(items: Sequence[T]) -> list[Sequence[T]]:
    """Greedy in request order: items 1-16 form the first call, 17-32 the next, and so on."""
    return [items[start:start + MAX_QUESTIONS_PER_CALL] for start in range(0, len(items), MAX_QUESTIONS_PER_CALL)]
