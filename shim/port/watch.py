"""Whether the model answers: pings through Triton under the service's lock, at once after a failed inference and
periodically while idle (docs/operations.md, "When the model process dies"). It never heals the model itself."""
from __future__ import annotations

import asyncio
import logging

from wire.answer import CallAnswer
from wire.facts import ModelFacts

from ..errors import Failure, ModelFailure, Problem
from .graph_series import LiveGraphs
from .model import Model, Probe
from .turns import Turns

log = logging.getLogger("intern_decision.shim.watch")

RETRY_SECONDS = 1.0
RESTART_HINT = "waiting for tritonserver to be restarted (docs/operations.md, \"When the model process dies\")"


class ModelWatch:
    """Wraps the model (a Model itself, for the service and the health check) and keeps `down`: None, or why the
    model is down. While it is down, inferences are refused at once (Failure.DOWN) and readiness says why."""

    def __init__(self, model: Model, lock: Turns, probe_seconds: float, *,
                 retry_seconds: float = RETRY_SECONDS):
        self._model = model
        self._lock = lock
        self._probe_seconds = probe_seconds
        self._retry_seconds = retry_seconds
        self._wake = asyncio.Event()
        self._wake.set()  # the first ping at once
        self.down: Problem | None = None

    async def predict_calls(self, state: object, calls: list[dict], request_id: str) -> list[CallAnswer]:
        if self.down is not None:
            raise ModelFailure(Failure.DOWN, self.down.detail, reason=self.down.public)
        try:
            return await self._model.predict_calls(state, calls, request_id)
        except ModelFailure as exc:
            if exc.failure.marks_down:
                self._mark_down(Problem(exc.reason, f"an inference failed ({exc.message}); checking the model"))
                self._wake.set()
            raise

    async def ready(self) -> Problem | None:
        return self.down or await self._model.ready()

    async def triton_ready(self) -> Problem | None:
        """Triton's own readiness of the model, whatever the watch knows (the health check adds `down` itself)."""
        return await self._model.ready()

    async def facts(self) -> ModelFacts:
        return await self._model.facts()

    async def graphs(self) -> LiveGraphs | None:
        return await self._model.graphs()

    async def ping(self) -> Probe:
        return await self._model.ping()

    async def open(self) -> None:
        await self._model.open()

    async def close(self) -> None:
        await self._model.close()

    async def run(self) -> None:
        """Runs until cancelled; a failure of its own is logged and the watch goes on."""
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the model watch failed; going on")
                await asyncio.sleep(self._retry_seconds)

    async def step(self) -> None:
        try:  # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancel that meets the wake-up
            async with asyncio.timeout(self._probe_seconds if self.down is None else self._retry_seconds):
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()
        if self.down is None and self._lock.locked():
            return  # an inference is in progress: its own answer tells
        async with self._lock:
            probe = await self._model.ping()
        if probe.ok:
            self._mark_up()
        elif probe.triton_answered:
            self._mark_down(Problem(probe.problem.public, f"{probe.problem.detail}; {RESTART_HINT}"))
        else:
            self._mark_down(probe.problem)

    def _mark_down(self, problem: Problem, level: int = logging.WARNING) -> None:
        if problem != self.down:
            log.log(level, "the model is down: %s", problem.detail)
        self.down = problem

    def _mark_up(self) -> None:
        if self.down is not None:
            log.warning("the model answers again")
        self.down = None
