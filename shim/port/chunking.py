"""How many questions one predict() call carries, and how both surfaces pack them."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

MAX_QUESTIONS_PER_CALL = 16  # the model's validate_request


def chunks(items: Sequence[T]) -> list[Sequence[T]]:
    """Greedy, in request order."""
    return [items[start:start + MAX_QUESTIONS_PER_CALL] for start in range(0, len(items), MAX_QUESTIONS_PER_CALL)]
