"""How many questions one predict() call carries, and the greedy packing both surfaces use to stay within it."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

MAX_QUESTIONS_PER_CALL = 16  # the model's own limit (its validate_request)


def chunks(items: Sequence[T]) -> list[Sequence[T]]:
    """Greedy in request order: items 1-16 form the first call, 17-32 the next, and so on."""
    return [items[start:start + MAX_QUESTIONS_PER_CALL] for start in range(0, len(items), MAX_QUESTIONS_PER_CALL)]
