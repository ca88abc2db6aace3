"""A request's calls, sent to the model back to back in the request's turn (INV-2), counted and classified. The wait
for the turn ends early when the request's cycle says so (shim/cycle.py): the client gone, the drain, its place."""
from __future__ import annotations

import time
from typing import NamedTuple

from wire.answer import CallAnswer

from .. import cycle
from ..errors import ModelFailure
from ..metrics import ShimMetrics
from ..tracing import span
from .locks import acquire_unless
from .model import Model
from .turns import Turns


class AnsweredCalls(NamedTuple):
    """What one request's run of calls gave: the answers, and how long it waited for its turn."""

    answers: list[CallAnswer]
    queue_seconds: float  # waiting for the turn (INV-2) behind other requests
    scoring_started: float  # perf_counter() once the turn was held: semif's total_seconds runs from here


class CallRunner:
    def __init__(self, model: Model, metrics: ShimMetrics, lock: Turns):
        self._model = model
        self._metrics = metrics
        self._lock = lock

    async def run(self, state: object, calls: list[dict], request_id: str) -> AnsweredCalls:
        """ModelFailure for the first call that fails; the cycle's ApiError when its wait ends first."""
        self._metrics.calls_per_request.observe(len(calls))
        self._metrics.queued.inc()
        queued_at = time.perf_counter()
        try:
            with span("wait for the model"):
                await self._take_turn(cycle.current())
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

    async def _take_turn(self, request: cycle.Cycle) -> None:
        stops = request.stops()
        with request.waiting_for_turn():
            stopped = await acquire_unless(self._lock, request.caller, *stops)
        if stopped is not None:
            if stopped is request.client_gone:
                self._metrics.client_gone.inc()
            request.end(stopped)
        request.scoring = True
