"""The model's facts, cached so that a request does not cost Triton a metrics read."""
from __future__ import annotations

import time

from wire.facts import ModelFacts

from .model import Model

FACTS_TTL_SECONDS = 5.0


class FactsCache:
    """Re-read after FACTS_TTL_SECONDS, so that a restarted model shows."""

    def __init__(self, model: Model, clock=time.monotonic):
        self._model = model
        self._clock = clock
        self._facts: ModelFacts | None = None
        self._read_at = 0.0

    async def get(self) -> ModelFacts:
        if self._facts is None or self._clock() - self._read_at > FACTS_TTL_SECONDS:
            self._facts = await self._model.facts()
            self._read_at = self._clock()
        return self._facts

    def clear(self) -> None:
        self._facts = None
