"""A request's calls, sent to the model back to back under the process-wide lock (INV-2), counted and classified."""
from __future__ import annotations

import asyncio

from wire.answer import CallAnswer

from .errors import ModelFailure
from .metrics import ShimMetrics
from .model import Model


class CallRunner:
    def __init__(self, model: Model, metrics: ShimMetrics, lock: asyncio.Lock):
        self._model = model
        self._metrics = metrics
        self._lock = lock

    async def run(self, requests: list[dict], request_id: str) -> list[CallAnswer]:
        """The calls' answers in order, as one inference request; ModelFailure for the first call that fails."""
        self._metrics.calls_per_request.observe(len(requests))
        self._metrics.queued.inc()
        try:
            await self._lock.acquire()
        finally:
            self._metrics.queued.dec()
        try:
            return await self._model.predict_calls(requests, request_id)
        except ModelFailure as failure:
            self._metrics.triton_error(failure.failure)
            raise
        finally:
            self._lock.release()
