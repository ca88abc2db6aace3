"""A request's calls, sent to the model back to back under the process-wide lock (INV-2), counted and classified.
The wait for the lock ends early when the client goes, or when a drain stops the queue (shim/port/waiting.py)."""
from __future__ import annotations

import time
from typing import NamedTuple

from wire.answer import CallAnswer

from ..client_gone import ClientGone
from ..drain import Drain
from ..errors import ModelFailure
from ..metrics import ShimMetrics
from ..tracing import span
from .model import Model
from .turns import Turns
from .waiting import acquire


class AnsweredCalls(NamedTuple):
    """What one request's run of calls gave: the answers, and how long the lock kept it waiting."""

    answers: list[CallAnswer]
    queue_seconds: float  # waiting for the lock (INV-2) behind other requests
    scoring_started: float  # perf_counter() once the lock was held: semif's total_seconds runs from here


class CallRunner:
    def __init__(self, model: Model, metrics: ShimMetrics, lock: Turns, drain: Drain | None = None):
        self._model = model
        self._metrics = metrics
        self._lock = lock
        self._drain = drain

    async def run(self, state: object, calls: list[dict], request_id: str) -> AnsweredCalls:
        """ModelFailure for the first call that fails."""
        self._metrics.calls_per_request.observe(len(calls))
        self._metrics.queued.inc()
        queued_at = time.perf_counter()
        try:
            # a request whose client went away first is never scored; a drain stopping the queue answers it 503
            with span("wait for the model"):
                await acquire(self._lock, self._drain)
        except ClientGone:
            self._metrics.client_gone.inc()
            raise
        finally:
            self._metrics.queued.dec()
        scoring_started = time.perf_counter()
        try:
            with span("infer", {"intern_decision.calls": len(calls)}):
                answers = await self._model.predict_calls(state, calls, request_id)
        except ModelFailure as failure:
            self._metrics.triton_error(failure.failure)
            raise
        finally:
            self._lock.release()
        return AnsweredCalls(answers, scoring_started - queued_at, scoring_started)
