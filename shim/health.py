"""GET /health and the model_up gauge, from the watch's verdict and a background loop's last check: it costs Triton
nothing."""
from __future__ import annotations

import asyncio
import logging
from typing import NamedTuple

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from wire.facts import ModelFacts

from .drain import Drain
from .errors import MODEL_UNAVAILABLE, ApiError, ModelFailure, Problem, envelope
from .errors.codes import HEALTH_DRAINING, HEALTH_UNAVAILABLE, ProbeAnswer
from .metrics import ShimMetrics
from .port.chunking import MAX_QUESTIONS_PER_CALL
from .port.facts_cache import FactsCache
from .port.graph_series import LiveGraphs
from .port.watch import ModelWatch
from .settings import ShimSettings

log = logging.getLogger("intern_decision.shim")

HEALTH_PATH = "/health"
CHUNKING = ("greedy in request order: questions 1-16 form the first call, 17-32 the next, and so on; with "
            "orderings, ordering k of every decision that has more than k orderings forms wave k, each wave is "
            "packed the same way and the waves run one after another; a call with one question uses field q, "
            "a call with several uses q1..qN")

MODEL_CHECK_SECONDS = 5.0


class ModelHealth(NamedTuple):
    """Why the model is unusable, or its facts."""

    problem: Problem | None
    facts: ModelFacts | None
    graphs: LiveGraphs | None = None


class HealthCheck:
    def __init__(self, watch: ModelWatch, metrics: ShimMetrics):
        self._watch = watch
        self._metrics = metrics
        self.facts = FactsCache(watch)
        self._last: ModelHealth | None = None  # without the watch's own verdict
        self._checking: asyncio.Future | None = None
        self._kept = False

    async def current(self) -> ModelHealth:
        """Sets model_up; no call to Triton once keep_checking has checked."""
        if self._watch.down is None and not (self._kept and self._last is not None):
            await self.check()
        verdict = self._last if self._watch.down is None else ModelHealth(self._watch.down, None)
        self._metrics.model_up.set(verdict.problem is None)
        return verdict

    async def check(self) -> ModelHealth:
        """Callers that ask while a check runs share it."""
        if self._checking is None:
            self._checking = asyncio.ensure_future(self._read())
            self._checking.add_done_callback(self._checked)
        return await asyncio.shield(self._checking)

    def _checked(self, done: asyncio.Future) -> None:
        if self._checking is done:
            self._checking = None

    async def _read(self) -> ModelHealth:
        problem, facts, graphs = await self._watch.triton_ready(), None, None
        if problem is None:
            try:
                facts = await self.facts.get()
            except ApiError as exc:
                problem = Problem(exc.reason if isinstance(exc, ModelFailure) else MODEL_UNAVAILABLE, exc.message)
        if problem is None:
            graphs = await self._watch.graphs()  # never cached: it changes while the model serves
        if problem is not None:
            self.facts.clear()  # a restarted model may bring other pins
        previous, self._last = self._last, ModelHealth(problem, facts, graphs)
        if problem is not None and (previous is None or previous.problem != problem):
            log.warning("the health check finds the model not usable: %s", problem.detail)
        elif problem is None and previous is not None and previous.problem is not None:
            log.warning("the health check finds the model usable again")
        self._metrics.model_up.set(problem is None and self._watch.down is None)
        return self._last

    async def keep_checking(self) -> None:
        self._kept = True
        try:
            while True:
                try:
                    await self.check()
                except Exception:
                    self._metrics.model_up.set(0)
                    log.exception("the background model check failed")
                await asyncio.sleep(MODEL_CHECK_SECONDS)
        finally:
            self._kept = False
            if self._checking is not None:
                self._checking.cancel()


def health_body(settings: ShimSettings, facts: ModelFacts, graphs: LiveGraphs | None = None) -> dict:
    return {
        "status": "ok",
        "model": {key: value for key, value in facts.as_dict().items() if key not in ("vram_cap_gib", "max_tokens")},
        "graphs": None if graphs is None else graphs.as_dict(),
        "vram_cap_gib": facts.vram_cap_gib,
        "max_tokens": facts.max_tokens,
        "max_decisions": settings.max_decisions,
        "max_questions_per_call": MAX_QUESTIONS_PER_CALL,
        "chunking": CHUNKING,
        "workloads": [],
    }


def probe_answer(answer: ProbeAnswer, message: str) -> JSONResponse:
    return JSONResponse({"status": answer.body_status, **envelope(answer.error, message)}, status_code=answer.status)


def health_route(settings: ShimSettings, check: "HealthCheck", drain: Drain) -> Route:
    async def health(request: Request) -> JSONResponse:
        if drain.draining:
            return probe_answer(HEALTH_DRAINING, "this replica is shutting down")
        verdict = await check.current()
        if verdict.problem is not None:
            return probe_answer(HEALTH_UNAVAILABLE, verdict.problem.public)
        return JSONResponse(health_body(settings, verdict.facts, verdict.graphs))

    return Route(HEALTH_PATH, health, methods=["GET"])
